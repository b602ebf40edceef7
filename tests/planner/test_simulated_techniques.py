"""The simulator runs the configuration the analytic plan chose: the routing policy's prefix
hit rate, and speculative decoding on or off, so both paths skip the same prefill."""

import pytest

from planner import runner, tails
from planner.services import build_inputs_snapshot
from tests.factories import make_scenario

pytestmark = [pytest.mark.django_db, pytest.mark.tails]

ONE = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["bf16"], "tp_options": [1]}


def _steps(values: dict) -> dict:
    return {s["name"]: s for s in values["derivation"]["steps"]}


def _simulate(inputs: dict) -> tuple[dict, dict, dict]:
    [analytic] = runner.size_candidates(inputs, [0])
    key = tails.cache_key(inputs, 0)
    hint = analytic["derivation"]["requests_per_s_per_replica"] or 0.0
    found = tails.search(inputs, 0, hint, hint > 0, key)
    return analytic, found, tails.simulated_row(inputs, 0, found)


def test_the_simulation_runs_at_the_routed_hit_rate(catalog):
    # given 2,000-token prefixes over 50 tenants routed by prefix affinity, and a scenario-level
    # hit rate of 0.1 that the routing policy replaces
    scenario = make_scenario(
        **ONE,
        shared_prefix_tokens=2000,
        prefix_hit_rate=0.1,
        prompt_tokens_mean=3000,
        prompt_tokens_p95=4000,
        serving={"routing": "prefix_affinity", "distinct_prefixes": 50},
    )
    analytic, found, simulated = _simulate(build_inputs_snapshot(scenario, None))
    routed = _steps(analytic)["prefix_hit_rate"]["value"]
    assert routed != 0.1
    # then the simulation ran at the analytic plan's routed hit rate
    assert found["prefix_hit_rate"] == pytest.approx(routed)
    steps = _steps(simulated)
    assert steps["simulated_prefix_hit_rate"]["value"] == pytest.approx(routed)
    # and the simulated row's chain skips the same prefill as the analytic row's
    assert steps["prefill_isl_tokens"]["value"] == pytest.approx(
        _steps(analytic)["prefill_isl_tokens"]["value"]
    )


def test_the_simulation_drops_speculation_when_the_plan_does(catalog):
    # given an EAGLE head whose drafts are almost never accepted (a = 0.05: 1.05 tokens per
    # verify step), which the analytic plan drops as the dearer option
    spec = {"method": "eagle", "tokens": 4, "acceptance": 0.05, "head_params": 2e8}
    scenario = make_scenario(**ONE, serving={"speculative": spec})
    inputs = build_inputs_snapshot(scenario, None)
    analytic, found, simulated = _simulate(inputs)
    assert _steps(analytic)["speculative_decoding"]["value"] == "off"
    # then the simulation ran without it, and the simulated row says so
    assert found["speculative"] == "off"
    assert tails.simulated_candidate(inputs, 0, "off").engine.spec_method == ""
    steps = _steps(simulated)
    assert steps["speculative_decoding"]["value"] == "off"
    assert "spec_tokens_per_verify_step" not in steps  # the plain step was simulated
    assert "draft_weights" not in str(steps["kv_budget_gb_per_gpu"]["formula"])
