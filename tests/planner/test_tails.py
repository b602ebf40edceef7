"""Tail-latency sizing in runs and ``plan``: bound-and-prune rounds of simulations.

Contract (issue "One pipeline, one answer"): only simulated rows are recommended; a row that
was never simulated is "not evaluated" with a bound that could not beat a simulated option;
every row names its latency source, statistic and calibration profile; the band contains the
answer; runs and ``plan`` simulate the same candidates and agree number for number.
"""

import copy
import math
import time

import pytest

from planner import pipeline, runner, tails, tasks
from planner.models import SimulationCache, SizingRun
from planner.planning import plan_inputs
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = [pytest.mark.django_db, pytest.mark.tails]

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["fp8", "bf16"]}
PERCENTILE_FIELDS = [f"{n}_ms_p{p}" for n in ("ttft", "tpot") for p in (50, 95, 99)]
COMPARED = [
    "fits", "reason", "replicas", "gpus", "usd_per_hour", "usd_per_month", "usd_per_mtok",
    "ttft_ms", "tpot_ms", *PERCENTILE_FIELDS, "meets_slo", "binding_constraint",
    "latency_source", "latency_statistic", "profile", "evaluated", "recommended", "rank",
]  # fmt: skip


def _values(result) -> dict:
    fields = [f.attname for f in result._meta.concrete_fields if f.attname not in {"id", "run_id"}]
    return {f: copy.deepcopy(getattr(result, f)) for f in fields}


def _rows(run: SizingRun) -> dict:
    return {r.candidate_key: _values(r) for r in run.results.all()}


def test_typical_scenario_recommends_only_simulated_rows(catalog):
    # given a scenario of 2 models x 2 GPUs (4 prune groups; bench/scenarios.py times the
    # 144-candidate typical one), run in-process
    started = time.process_time()
    run = sizing_run_start(
        scenario=make_scenario(models=["llama-3.1-8b", "Qwen3-32B"], gpus=["H100", "L40S"])
    )
    # CPU time, not wall time, so a busy machine does not fail it
    cpu_s = time.process_time() - started
    assert run.status == SizingRun.Status.SUCCEEDED and run.progress == 100, run.error
    assert cpu_s < 120, cpu_s
    rows = list(run.results.all())
    simulated = [r for r in rows if r.latency_source == "simulated"]
    groups = {(r.gpu_slug, r.model_name) for r in rows}
    assert len(groups) == 4  # 2 GPUs x 2 models: the bound-and-prune groups
    assert simulated and len(simulated) <= pipeline.MAX_SIMULATED_PER_GROUP * len(groups)
    # then every row names its latency source, statistic and profile
    assert {r.latency_source for r in rows} <= {"simulated", "analytic"}
    assert all(r.profile for r in rows)
    for r in simulated:
        assert r.latency_statistic == "p95"
        assert r.ttft_ms_p50 <= r.ttft_ms_p95 <= r.ttft_ms_p99, r.candidate_key
        assert r.tpot_ms_p50 <= r.tpot_ms_p95 <= r.tpot_ms_p99, r.candidate_key
        assert (r.ttft_ms, r.tpot_ms) == (r.ttft_ms_p95, r.tpot_ms_p95)
        names = [s["name"] for s in r.derivation["steps"]]
        assert "simulated_max_rate_rps" in names
        # a row whose simulation finds no rate meeting the SLO is sized no fleet
        serves = r.derivation["simulated"]["rate_rps"] > 0
        assert ("serving_replicas" in names) == serves, r.candidate_key
        assert "analytic_max_rate_rps" not in names  # one capacity stage per row
    # a recommendation is simulated, meets the SLO and is its GPU's cheapest simulated row
    for slug in run.inputs["gpu_names"]:
        recommended = [r for r in rows if r.gpu_slug == slug and r.recommended]
        meeting = [r for r in simulated if r.gpu_slug == slug and r.meets_slo]
        if not meeting:
            assert not recommended
            continue
        best = min(meeting, key=lambda r: runner.rank_key(_values(r)))
        assert recommended == [best]
        entry = next(e for e in run.summary["per_gpu"] if e["gpu"] == slug)
        assert entry["latency_source"] == "simulated" and entry["profile"] == best.profile
        # the band is on the final sizing and contains the answer
        low, high = entry["band"]["replicas"]
        assert low <= best.replicas <= high
        money_low, money_high = entry["band"]["usd_per_month"]
        assert money_low <= best.usd_per_month <= money_high
        # and every pruned row of that GPU could not have beaten it
        for r in rows:
            if r.gpu_slug == slug and not r.evaluated:
                bound = r.derivation["bound"]["usd_per_month"]
                # an unpriced replica shape (no instance on the sheet holds it) never beats a
                # priced answer: it compares on GPUs alone, after every priced row
                assert bound is None or bound >= best.usd_per_month, r.candidate_key
                assert r.reason.startswith("not evaluated: ")
                assert all(getattr(r, f) is None for f in PERCENTILE_FIELDS)
    # each pruned row could not beat its own (GPU, model) group's best simulated option, or
    # that group spent its whole simulation budget first
    for r in rows:
        if r.fits and not r.evaluated and r.derivation.get("bound"):
            key = (r.gpu_slug, r.model_name)
            group = [s for s in simulated if (s.gpu_slug, s.model_name) == key]
            meeting = [s.usd_per_month for s in group if s.meets_slo]
            if r.reason.startswith("not evaluated: cannot beat"):
                bound = r.derivation["bound"]["usd_per_month"]
                assert bound is None or bound >= min(meeting), r.candidate_key
            else:
                assert "budget" in r.reason, r.candidate_key
                assert len(group) == pipeline.MAX_SIMULATED_PER_GROUP, r.candidate_key


def test_replicas_follow_the_simulated_rate_through_the_one_headroom_stage(catalog):
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    policy, peak = run.inputs["policy"], run.inputs["traffic"]["peak_rps"]
    simulated = run.results.filter(latency_source="simulated")
    assert simulated.exists()
    for r in simulated:
        rate = r.derivation["simulated"]["rate_rps"]
        serving = math.ceil(
            peak * policy["burst_factor"] / (rate * policy["target_utilization"]) - 1e-9
        )
        extra = policy["spare_replicas"] + policy["warm_pool_replicas"]
        assert r.replicas == max(serving, 1) + extra and r.gpus == r.replicas * r.gpus_per_replica
        assert r.usd_per_month == pytest.approx(
            r.gpus * run.inputs["gpus"][r.gpu_slug]["usd_per_gpu_hour"] * 730
        )
        if r.meets_slo:
            assert r.ttft_ms <= run.inputs["slo"]["ttft_ms"]
            assert r.tpot_ms <= run.inputs["slo"]["tpot_ms"]


def test_aggregating_twice_leaves_identical_rows(catalog):
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    before = _rows(run)
    # a redelivered aggregate after the run reopened (the finished check is bypassed)
    SizingRun.objects.filter(pk=run.pk).update(status=SizingRun.Status.RUNNING)
    tasks.aggregate_run(run.pk)
    run.refresh_from_db()
    assert run.status == SizingRun.Status.SUCCEEDED
    assert _rows(run) == before


def test_a_second_run_reuses_the_cached_searches_and_gets_the_same_numbers(catalog):
    first = sizing_run_start(scenario=make_scenario(**SMALL))
    cached = SimulationCache.objects.count()
    assert cached == first.results.filter(latency_source="simulated").count() > 0
    second = sizing_run_start(scenario=make_scenario(**SMALL))
    assert SimulationCache.objects.count() == cached
    strip = lambda rows: {k: {f: v[f] for f in COMPARED} for k, v in rows.items()}  # noqa: E731
    assert strip(_rows(first)) == strip(_rows(second))


def test_a_rerun_of_cached_searches_sends_no_simulation_task(catalog, monkeypatch):
    # given a run whose searches are all in the cache
    first = sizing_run_start(scenario=make_scenario(**SMALL))
    # when the same scenario runs again, counting the rounds sent to the workers
    sent: list[str] = []
    real_chord = tasks.chord

    def spy(header):
        header = list(header)
        sent.extend(signature.task for signature in header)
        return real_chord(header)

    monkeypatch.setattr(tasks, "chord", spy)
    second = sizing_run_start(scenario=make_scenario(**SMALL))
    # then every round is re-sized in the aggregation task itself, and the rows are the same
    assert second.status == SizingRun.Status.SUCCEEDED, second.error
    assert not any(name.endswith("simulate_candidates") for name in sent), sent
    strip = lambda rows: {k: {f: v[f] for f in COMPARED} for k, v in rows.items()}  # noqa: E731
    assert strip(_rows(first)) == strip(_rows(second))
    assert second.results.filter(latency_source="simulated").count() > 0


def test_a_failing_simulation_is_never_recommended(catalog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("simulator exploded")

    monkeypatch.setattr(tails, "search", broken)
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    assert run.status == SizingRun.Status.SUCCEEDED, run.error
    rows = list(run.results.all())
    assert not any(r.recommended for r in rows)
    failed = [r for r in rows if r.derivation.get("simulation_error")]
    assert failed and all("simulator exploded" in r.reason for r in failed)
    assert all(r.latency_source == "analytic" and not r.evaluated for r in failed)
    entry = run.summary["per_gpu"][0]
    assert entry["recommended"] is None and entry["why_none"]


def test_plan_and_a_run_give_identical_rows(catalog):
    # given the same scenario through a run and through plan's in-process pipeline
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    planned = plan_inputs(run.inputs, tails_on=True)
    by_key = {r["candidate_key"]: r for r in planned["rows"]}
    # then every compared field is identical, row by row
    for key, values in _rows(run).items():
        assert {f: values[f] for f in COMPARED} == {f: by_key[key][f] for f in COMPARED}, key


def test_no_tails_sizes_every_row_analytically(catalog):
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    planned = plan_inputs(run.inputs, tails_on=False)
    assert {r["latency_source"] for r in planned["rows"]} == {"analytic"}
    assert planned["summary"]["tails"] == "analytic" and planned["summary"]["simulated"] == 0
    assert all(r["evaluated"] for r in planned["rows"])


class _DictCache:
    def __init__(self):
        self.store: dict = {}

    def get(self, key):
        return copy.deepcopy(self.store.get(key))

    def put(self, key, value):
        self.store[key] = copy.deepcopy(value)


def test_a_round_re_sized_in_one_call_equals_each_row_re_sized_alone(catalog):
    # given the analytic rows of a scenario with aggregated and disaggregated candidates of
    # two GPUs, and a round of up to six of them (both kinds)
    run = sizing_run_start(
        scenario=make_scenario(models=["llama-3.1-8b"], gpus=["H100", "B200"], precisions=["fp8"])
    )
    inputs = run.inputs
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    disagg = [i for i, c in enumerate(inputs["candidates"]) if c["key"].endswith("|disagg")]
    agg = [i for i, r in enumerate(rows) if i not in disagg and pipeline.can_be_simulated(r)]
    picked = agg[:4] + disagg[:2]
    assert len(disagg) >= 1 and len(picked) >= 4
    cache = _DictCache()
    # when the round is re-sized in one call, and each row again alone (the same searches)
    together = pipeline.simulate_round(inputs, [(i, rows[i]) for i in picked], cache)
    alone = [pipeline.simulate_round(inputs, [(i, rows[i])], cache)[0] for i in picked]
    # then every row's values are the same, number for number, and each is simulated
    assert together == alone
    assert all(v["latency_source"] == "simulated" for v in together)
    assert [v["candidate_key"] for v in together] == [
        inputs["candidates"][i]["key"] for i in picked
    ]


def test_a_round_keeps_going_past_a_row_whose_re_sizing_fails(catalog, monkeypatch):
    # given a round of two rows, and a chain that fails on the second row's search alone
    run = sizing_run_start(scenario=make_scenario(**SMALL))
    inputs = run.inputs
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    picked = [i for i, r in enumerate(rows) if pipeline.can_be_simulated(r)][:2]
    cache = _DictCache()
    for i in picked:
        pipeline.search(inputs, i, rows[i], cache)
    real = tails.simulated_rows
    bad_key = inputs["candidates"][picked[1]]["key"]

    def fragile(inputs, searches):
        if any(inputs["candidates"][i]["key"] == bad_key for i, _ in searches):
            raise RuntimeError("chain exploded")
        return real(inputs, searches)

    monkeypatch.setattr(tails, "simulated_rows", fragile)
    # when the round is re-sized
    out = pipeline.simulate_round(inputs, [(i, rows[i]) for i in picked], cache)
    # then the first row is simulated, the second stays analytic with the reason
    assert out[0]["latency_source"] == "simulated"
    assert out[1]["latency_source"] == "analytic"
    assert "chain exploded" in out[1]["derivation"]["simulation_error"]


def test_a_transient_database_error_in_a_round_propagates_for_a_retry(catalog, monkeypatch):
    # given a round whose cache read fails with a transient database error
    from django.db import OperationalError

    run = sizing_run_start(scenario=make_scenario(**SMALL))
    inputs = run.inputs
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    picked = [i for i, r in enumerate(rows) if pipeline.can_be_simulated(r)][:2]

    class Flaky(_DictCache):
        def get(self, key):
            raise OperationalError("server closed the connection unexpectedly")

    # when the round runs as a task does (transient errors passing), then the error reaches
    # the task (Celery retries it) instead of failing the rows for good
    with pytest.raises(OperationalError):
        pipeline.simulate_round(
            inputs, [(i, rows[i]) for i in picked], Flaky(), tasks.TRANSIENT_DB_ERRORS
        )
    # and in process, with nothing passing, each row keeps its reason and the run goes on
    out = pipeline.simulate_round(inputs, [(i, rows[i]) for i in picked], Flaky())
    assert all("OperationalError" in v["derivation"]["simulation_error"] for v in out)
