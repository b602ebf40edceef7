"""Saved numbers are finite, runs recompute exactly from their snapshot, absurd input is bounded."""

import json
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner import runner
from planner.models import SizingRun
from planner.planning import plan_inputs
from planner.services import sizing_run_start
from tests.factories import UserFactory, make_scenario

pytestmark = pytest.mark.django_db

COMPARED = [*runner.RESULT_FIELDS, "derivation"]  # every stored result field


TAIL_FIELDS = [f"{n}_ms_p{p}" for n in ("ttft", "tpot") for p in (50, 95, 99)]


def _all_finite(value) -> bool:
    """No NaN or inf anywhere in a saved value (JSON refuses them with allow_nan=False)."""
    json.dumps(value, allow_nan=False)
    return True


@pytest.mark.tails  # the simulated rows must reproduce too
def test_recomputing_a_run_from_its_snapshot_matches_exactly(catalog):
    # given a finished run, simulated as in production
    # (one model, one precision: two GPU groups of simulated rows are enough to reproduce)
    scenario = make_scenario(models=["llama-3.1-8b"], gpus=["H100", "L40S"], precisions=["fp8"])
    run = sizing_run_start(scenario=scenario)
    assert run.status == SizingRun.Status.SUCCEEDED
    # when its inputs snapshot is recomputed through the pipeline with an empty cache (every
    # simulation is redone from its seed)
    again = plan_inputs(run.inputs, tails_on=True, cache=FreshCache())
    # then every stored number is reproduced exactly, derivation included
    stored = {r.candidate_key: r for r in run.results.all()}
    assert len(again["rows"]) == len(stored)
    assert any(r["latency_source"] == "simulated" for r in again["rows"])
    for values in again["rows"]:
        row = stored[values["candidate_key"]]
        for field in [*COMPARED, *TAIL_FIELDS, "rank", "recommended", "evaluated"]:
            expected = values[field]
            if field == "derivation":
                steps = json.loads(json.dumps(expected["steps"]))  # as stored: tuples -> lists
                assert row.derivation["steps"] == steps, values["candidate_key"]
                continue
            assert getattr(row, field) == expected, (values["candidate_key"], field)


class FreshCache(dict):
    def put(self, key, value):
        self[key] = value


def test_snapshot_survives_catalog_and_price_changes(catalog):
    from fleets.models import GpuSku
    from pricing.models import GpuHourPrice

    run = sizing_run_start(scenario=make_scenario(gpus=["H100"], precisions=["fp8"]))
    before = runner.size_candidates(run.inputs, range(run.candidate_count))
    GpuSku.objects.filter(slug="h100_sxm").update(hbm_bandwidth_tb_s=1.0)
    new_sheet_prices = GpuHourPrice.objects.exclude(sheet=run.price_sheet)
    assert not new_sheet_prices.exists()  # the run's sheet is locked; nothing else changed it
    assert runner.size_candidates(run.inputs, range(run.candidate_count)) == before


def test_every_saved_number_is_finite(catalog):
    run = sizing_run_start(scenario=make_scenario())
    for result in run.results.all():
        for field in COMPARED:
            value = getattr(result, field)
            if isinstance(value, float):
                assert math.isfinite(value), (result.candidate_key, field)
        assert _all_finite(result.derivation)
    assert _all_finite(run.summary) and _all_finite(run.inputs)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    peak=st.floats(1e-3, 1e6),
    mean_share=st.floats(0.01, 1.0),
    prompt=st.floats(1, 1_000_000),
    output=st.floats(1, 100_000),
    ttft=st.floats(1, 1e6),
    tpot=st.floats(0.1, 1e4),
)
def test_core_never_returns_nan_or_inf_for_valid_input(
    catalog, peak, mean_share, prompt, output, ttft, tpot
):
    # given any valid traffic, including absurd but legal values (1e6 req/s, 1M-token prompts)
    scenario = make_scenario(
        owner=UserFactory(username="fuzz"),
        peak_rps=peak,
        mean_rps=peak * mean_share,
        prompt_tokens_mean=prompt,
        prompt_tokens_p95=prompt * 2,
        output_tokens_mean=output,
        output_tokens_p95=output * 2,
        ttft_ms=ttft,
        tpot_ms=tpot,
        models=["llama-3.1-8b", "deepseek-v3"],
        gpus=["H100", "L40S"],
        precisions=["fp8"],
    )
    from planner.selectors import latest_price_sheet
    from planner.services import build_inputs_snapshot

    inputs = build_inputs_snapshot(scenario, latest_price_sheet())
    # when the chain runs, then it computes or says why not, with finite numbers only
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    for row in rows:
        assert _all_finite(row)
        assert row["fits"] or row["reason"]
    scenario.delete()


def test_absurd_but_valid_inputs_compute_or_explain_quickly(catalog):
    started = time.perf_counter()
    huge = sizing_run_start(
        scenario=make_scenario(peak_rps=1e6, mean_rps=5e5, models=["llama-3.1-8b"], gpus=["H100"])
    )
    assert huge.status == SizingRun.Status.SUCCEEDED
    best = huge.results.filter(meets_slo=True).order_by("rank").first()
    assert best.replicas > 1000  # a million requests per second needs thousands of replicas
    long_prompt = sizing_run_start(
        scenario=make_scenario(
            prompt_tokens_mean=1_000_000,
            prompt_tokens_p95=1_000_000,
            models=["llama-3.1-8b"],
            gpus=["H100"],
        )
    )
    for result in long_prompt.results.all():
        assert not result.meets_slo and result.reason  # 1M tokens exceed 8B's 128k context
    assert time.perf_counter() - started < 60
