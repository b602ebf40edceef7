"""Plan a scenario document without saving anything (the ``plan`` command's core)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from fleets.models import GpuSku, ModelArchitecture
from planner import pipeline, runner, scenario_io
from planner.cache import DatabaseCache
from planner.models import Scenario
from planner.selectors import latest_price_sheet
from planner.services import build_inputs_snapshot, clean_scenario_data


class PlanInputError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def plan_document(document, simulate_tails: bool = True) -> dict:
    """Validate a nested scenario document, size every candidate, return the ranked result.

    The same pipeline as a run (``planner.pipeline``): analytic sizing of every candidate,
    then, unless ``simulate_tails`` is False (``--no-tails``) or tails are switched off
    (``SIZING_SIMULATE_TAILS``), bound-and-prune rounds of simulations, then ranking.
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
    return plan_inputs(inputs, tails_on=simulate_tails and inputs.get("simulate_tails", True))


def plan_inputs(inputs: dict, tails_on: bool, cache=None) -> dict:
    """Size an inputs snapshot in-process, exactly as a run does (``pipeline``)."""
    cache = DatabaseCache() if cache is None else cache
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    index = {c["key"]: i for i, c in enumerate(inputs["candidates"])}
    by_key = {row["candidate_key"]: row for row in rows}

    def run_round(keys: list[str]) -> None:
        items = [(index[key], by_key[key]) for key in keys]
        for key, values in zip(keys, pipeline.simulate_round(inputs, items, cache), strict=True):
            by_key[key].update(values)

    if tails_on:
        pipeline.search_rounds(inputs, rows, run_round)
    ranked, best = pipeline.finish(rows, tails_on)
    summary = pipeline.summarize(inputs, ranked, best, tails_on)
    per_gpu = [
        {**entry, "row": by_key.get(entry["recommended"] or "")} for entry in summary["per_gpu"]
    ]
    return {
        "scenario": inputs["scenario"]["name"],
        "price_sheet": inputs["price_sheet"],
        "gpus_without_price": inputs["gpus_without_price"],
        "summary": {k: v for k, v in summary.items() if k != "per_gpu"},
        "per_gpu": per_gpu,
        "rows": ranked,
    }
