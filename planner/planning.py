"""Plan a scenario document without saving anything (the ``plan`` command's core)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from fleets.models import GpuSku, ModelArchitecture
from planner import runner, scenario_io
from planner.models import Scenario
from planner.selectors import latest_price_sheet
from planner.services import build_inputs_snapshot, clean_scenario_data


class PlanInputError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def plan_document(document) -> dict:
    """Validate a nested scenario document, size every candidate, return the ranked result."""
    try:
        flat = scenario_io.flatten(document)
        clean = clean_scenario_data(flat)
    except scenario_io.DocumentError as exc:
        raise PlanInputError(exc.errors) from exc
    except ValidationError as exc:
        raise PlanInputError(scenario_io.nest_errors(exc.message_dict)) from exc
    scenario = Scenario(**clean.scalars, price_sheet=clean.price_sheet)
    sheet = clean.price_sheet or latest_price_sheet()
    models = ModelArchitecture.objects.filter(pk__in=clean.model_ids)
    gpus = GpuSku.objects.filter(pk__in=clean.gpu_ids)
    inputs = build_inputs_snapshot(scenario, sheet, models, gpus)
    if not inputs["candidates"]:
        raise PlanInputError({"candidates": ["no valid candidate (model x GPU x TP) to size"]})
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    rows.sort(key=runner.rank_key)
    best_per_gpu: dict[str, dict] = {}
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
        if row["meets_slo"] and row["gpu_slug"] not in best_per_gpu:
            best_per_gpu[row["gpu_slug"]] = row
        row["recommended"] = best_per_gpu.get(row["gpu_slug"]) is row
    per_gpu = []
    for slug, name in inputs["gpu_names"].items():
        best = best_per_gpu.get(slug)
        tried = [r for r in rows if r["gpu_slug"] == slug]
        why = (
            "" if best else "; ".join(sorted({r["reason"] or "misses the SLO" for r in tried})[:3])
        )
        per_gpu.append({"gpu": slug, "gpu_name": name, "recommended": best, "why_none": why})
    return {
        "scenario": inputs["scenario"]["name"],
        "price_sheet": inputs["price_sheet"],
        "gpus_without_price": inputs["gpus_without_price"],
        "per_gpu": per_gpu,
        "rows": rows,
    }
