"""Tail-latency sizing: the leading candidates of a run re-sized on simulated percentiles."""

import copy
import math
import time

import numpy as np
import pytest

from planner import runner, tails, tasks
from planner.models import SizingRun
from planner.planning import plan_document
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = [pytest.mark.django_db, pytest.mark.tails]

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["fp8"]}
PERCENTILE_FIELDS = [f"{n}_ms_p{p}" for n in ("ttft", "tpot") for p in (50, 95, 99)]


def _snapshot_rows(run: SizingRun) -> dict:
    return {r.candidate_key: _values(r) for r in run.results.all()}


def _values(result) -> dict:
    fields = [f.attname for f in result._meta.concrete_fields if f.attname != "id"]
    return {f: copy.deepcopy(getattr(result, f)) for f in fields}


def _simulated(run: SizingRun) -> list:
    return [r for r in run.results.all() if "max_rate_rps" in r.derivation.get("simulated", {})]


def test_typical_scenario_sizes_on_simulated_tails_in_bounded_time(catalog):
    # given the typical scenario (4 GPUs, ~130 candidates)
    started = time.perf_counter()
    run = sizing_run_start(scenario=make_scenario())
    elapsed_s = time.perf_counter() - started
    # then it finishes in-process within the bound, and the leaders carry percentiles
    assert run.status == SizingRun.Status.SUCCEEDED and run.progress == 100, run.error
    assert elapsed_s < 20, elapsed_s
    simulated = _simulated(run)
    assert 4 <= len(simulated) <= tails.MAX_SIMULATED
    for r in simulated:
        assert r.ttft_ms_p50 <= r.ttft_ms_p95 <= r.ttft_ms_p99, r.candidate_key
        assert r.tpot_ms_p50 <= r.tpot_ms_p95 <= r.tpot_ms_p99, r.candidate_key
        names = [s["name"] for s in r.derivation["steps"]]
        assert "simulated_max_rate_rps" in names and "simulated_serving_replicas" in names
        step = next(s for s in r.derivation["steps"] if s["name"] == "simulated_max_rate_rps")
        assert step["unit"] == "req/s per replica" and all(
            i["unit"] is not None for i in step["inputs"]
        )
    # the recommendation per GPU is re-picked from the updated numbers
    results = list(run.results.all())
    for slug in run.inputs["gpu_names"]:
        meeting = [r for r in results if r.gpu_slug == slug and r.meets_slo]
        recommended = [r for r in results if r.gpu_slug == slug and r.recommended]
        if not meeting:
            assert not recommended
            continue
        best = min(meeting, key=lambda r: runner.rank_key(_values(r)))
        assert recommended == [best]
        entry = next(e for e in run.summary["per_gpu"] if e["gpu"] == slug)
        source = "simulated" if best in simulated else "mean-value"
        assert entry["latency_source"] == source
        if source == "simulated":
            assert entry["ttft_ms_p95"] == best.ttft_ms_p95 and entry["tpot_ms_p95"] > 0
    # unsimulated rows keep NULL percentiles
    others = [r for r in results if r not in simulated]
    assert all(getattr(r, f) is None for r in others for f in PERCENTILE_FIELDS)


def test_replicas_follow_the_simulated_rate(catalog):
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    policy = run.inputs["policy"]
    peak = run.inputs["traffic"]["peak_rps"]
    for r in _simulated(run):
        sim = r.derivation["simulated"]
        rate, mean_rate = sim["max_rate_rps"], sim["mean_value_rps"]
        load = peak * policy["burst_factor"]
        serving = math.ceil(load / (rate * policy["target_utilization"]) - 1e-9)
        extra = policy["spare_replicas"] + policy["warm_pool_replicas"]
        assert sim["serving_replicas"] == serving and r.replicas == serving + extra
        assert r.gpus == r.replicas * r.gpus_per_replica
        # a lower sustainable rate than the mean-value model's never needs fewer replicas;
        # (when the percentiles bind less than the means do, the simulated rate is higher)
        if rate <= mean_rate:
            assert r.replicas >= sim["mean_value"]["replicas"]
        assert r.usd_per_month == pytest.approx(
            r.gpus * run.inputs["gpus"][r.gpu_slug]["usd_per_gpu_hour"] * 730
        )
        assert r.meets_slo == sim["meets_slo"]
        if r.meets_slo:
            assert sim["ttft_ms_at_percentile"] <= run.inputs["slo"]["ttft_ms"]
            assert sim["tpot_ms_at_percentile"] <= run.inputs["slo"]["tpot_ms"]
            assert sim["goodput"] >= run.inputs["slo"]["goodput_target"]


def test_aggregating_twice_leaves_identical_rows(catalog):
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    before = _snapshot_rows(run)
    assert any(v["ttft_ms_p95"] is not None for v in before.values())
    # a redelivered aggregate after the run reopened (the finished check is bypassed)
    SizingRun.objects.filter(pk=run.pk).update(status=SizingRun.Status.RUNNING)
    tasks.aggregate_run(run.pk)
    run.refresh_from_db()
    assert run.status == SizingRun.Status.SUCCEEDED
    assert _snapshot_rows(run) == before
    assert tasks.simulate_tails_phase(run) == 0  # nothing left to simulate


def test_a_failing_simulation_keeps_the_mean_value_numbers(catalog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulator exploded")

    monkeypatch.setattr(tails, "simulate", broken)
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    assert run.status == SizingRun.Status.SUCCEEDED, run.error
    failed = [r for r in run.results.all() if "simulated" in r.derivation]
    assert failed
    for r in failed:
        assert "simulator exploded" in r.derivation["simulated"]["error"]
        [mean_value] = runner.size_candidates(run.inputs, [_index(run, r.candidate_key)])
        for field in runner.RESULT_FIELDS:
            assert getattr(r, field) == mean_value[field], field
        assert all(getattr(r, f) is None for f in PERCENTILE_FIELDS)
    entry = run.summary["per_gpu"][0]
    assert entry["latency_source"] == "mean-value"


def test_switched_off_in_the_snapshot_no_row_is_simulated(catalog, monkeypatch):
    from planner import services

    original = services.build_inputs_snapshot
    monkeypatch.setattr(
        services,
        "build_inputs_snapshot",
        lambda *a, **k: original(*a, **k) | {"simulate_tails": False},
    )
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    assert run.status == SizingRun.Status.SUCCEEDED and not _simulated(run)


def test_plan_document_simulates_only_when_asked(catalog):
    document = {
        "name": "small",
        "traffic": {
            "peak_rps": 20,
            "mean_rps": 10,
            "prompt_tokens": {"mean": 1000, "p95": 3000},
            "output_tokens": {"mean": 300, "p95": 800},
        },
        "slo": {"ttft_ms": 2000, "tpot_ms": 50},
        "candidates": {"models": SMALL["models"], "gpus": ["B200"], "precisions": ["fp8"]},
    }
    fast = plan_document(document)
    assert fast["per_gpu"][0]["latency_source"] == "mean-value"
    slow = plan_document(document, simulate_tails=True)
    entry = slow["per_gpu"][0]
    assert entry["latency_source"] == "simulated" and entry["ttft_ms_p95"] > 0
    assert entry["recommended"]["derivation"]["simulated"]["max_rate_rps"] > 0


def test_run_length_timer_gives_the_parent_timers_numbers(catalog):
    from planner import snapshot as snap
    from planner.selectors import latest_price_sheet
    from planner.services import build_inputs_snapshot
    from sizing.chain import candidate_arrays
    from sizing.simulate import StepTimer, Workload, lengths_from_mean_p95, simulate

    inputs = build_inputs_snapshot(make_scenario(**SMALL), latest_price_sheet())
    c = candidate_arrays(snap.candidates(inputs, [0]))
    isl, osl = lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(300, 800)
    replica = tails._Replica(c, isl, osl, snap.traffic(inputs), snap.slo(inputs), seed=3)
    for rate_rps in (0.2, 5.0):
        w = Workload(isl, osl, requests=300, rate_rps=rate_rps, seed=3)
        plain = simulate(c, w, replica.engine, StepTimer(c, replica.engine.max_num_seqs))
        fast = simulate(
            c, w, replica.engine, tails.RunLengthStepTimer(c, replica.engine.max_num_seqs)
        )
        assert np.array_equal(plain.ttft_s, fast.ttft_s, equal_nan=True)
        assert np.array_equal(plain.tpot_s, fast.tpot_s, equal_nan=True)


def _index(run: SizingRun, key: str) -> int:
    return next(i for i, c in enumerate(run.inputs["candidates"]) if c["key"] == key)


def test_a_gpu_whose_simulated_leader_fails_gets_a_second_candidate_simulated(catalog, monkeypatch):
    # given simulations that make the first candidate of every GPU miss the SLO
    from planner import tails as tails_module

    real = tails_module.simulate_tails_or_reason
    first_seen: set[str] = set()

    def leader_fails(inputs, index, mean_value):
        updates = real(inputs, index, mean_value)
        gpu = inputs["candidates"][index]["gpu"]
        if gpu not in first_seen:
            first_seen.add(gpu)
            updates["meets_slo"] = False
        return updates

    monkeypatch.setattr(tails_module, "simulate_tails_or_reason", leader_fails)
    scenario = make_scenario(gpus=["H100"], models=["llama-3.1-8b"], precisions=["fp8", "bf16"])
    # when the run aggregates
    run = sizing_run_start(scenario=scenario)
    simulated = [r for r in run.results.all() if "simulated" in r.derivation]
    # then a second H100 candidate was simulated, and a re-aggregate simulates nothing new
    assert len(simulated) == 2, [r.candidate_key for r in simulated]
    from planner import tasks

    run.refresh_from_db()
    assert tasks.simulate_tails_phase(run) == 0
