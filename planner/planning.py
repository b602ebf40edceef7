"""Plan a scenario document without saving anything (the ``plan`` command's core)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from fleets.models import GpuSku, ModelArchitecture
from planner import runner, scenario_io, tails
from planner.models import Scenario
from planner.selectors import latest_price_sheet
from planner.services import build_inputs_snapshot, clean_scenario_data


class PlanInputError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def plan_document(document, simulate_tails: bool = False) -> dict:
    """Validate a nested scenario document, size every candidate, return the ranked result.

    ``simulate_tails`` re-sizes the leading candidates on simulated p50/p95/p99 as a run does
    (``planner.tails``; ~1-3 s per simulated candidate, up to 12), then re-ranks.
    """
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
    if simulate_tails and inputs.get("simulate_tails", True):
        apply_tails(inputs, rows)
    order, best_keys = runner.rank_and_pick(rows)
    by_key = {row["candidate_key"]: row for row in rows}
    rows = [by_key[key] for key in order]
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
        row["recommended"] = best_keys.get(row["gpu_slug"]) == row["candidate_key"]
    per_gpu = []
    for slug, name in inputs["gpu_names"].items():
        best = by_key.get(best_keys.get(slug, ""))
        why = "" if best else runner.why_none(rows, slug)
        entry = {"gpu": slug, "gpu_name": name, "recommended": best, "why_none": why}
        if best:
            entry |= tails.latency_summary(
                best.get("ttft_ms_p95"), best.get("tpot_ms_p95"), best["derivation"]
            )
        per_gpu.append(entry)
    return {
        "scenario": inputs["scenario"]["name"],
        "price_sheet": inputs["price_sheet"],
        "gpus_without_price": inputs["gpus_without_price"],
        "per_gpu": per_gpu,
        "rows": rows,
    }


def apply_tails(inputs: dict, rows: list[dict]) -> int:
    """Update the picked rows in place with their simulated sizing (as a run's aggregate
    does); every row gains the percentile keys (None when not simulated)."""
    for row in rows:
        for name in ("ttft", "tpot"):
            for p in (50, 95, 99):
                row.setdefault(f"{name}_ms_p{p}", None)
    index = {c["key"]: i for i, c in enumerate(inputs["candidates"])}
    by_key = {row["candidate_key"]: row for row in rows}
    picked = tails.pick_for_simulation(rows)
    for key in picked:
        by_key[key].update(tails.simulate_tails_or_reason(inputs, index[key], by_key[key]))
    return len(picked)
