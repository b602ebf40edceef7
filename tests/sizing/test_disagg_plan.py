"""Disaggregated candidates in a plan (sizing/disagg_plan.py): layout search, pools through
the headroom stage, summed cost, band, break-even, and the tail stage's pool growth."""

import math

import numpy as np
import pytest

from sizing.chain import Candidate
from sizing.derivation import evaluate
from sizing.disagg import size_pools
from sizing.disagg_plan import PoolsGiven, plan_disagg, simulate_pools
from sizing.specs import ApiPrice, Policy, Slo, Traffic
from tests.sizing.specs_catalog import B200, DEEPSEEK_V3, H100, H200, LLAMA_8B, LLAMA_70B

TRAFFIC = Traffic(peak_rps=10, mean_rps=5, prompt_tokens_mean=1000, output_tokens_mean=200)
SLO = Slo(ttft_ms=1000, tpot_ms=50)
POLICY = Policy(target_utilization=0.8, spare_replicas=1, burst_factor=1.0)
API = ApiPrice(0.5, 1.0, label="an API")


def _candidate(model=LLAMA_8B, gpu=H100, precision="bf16"):
    return Candidate(model=model, gpu=gpu, weight_precision=precision, label=model.name)


def test_llama_8b_on_h100_is_one_tp1_worker_per_pool_plus_a_spare_each():
    # given Llama 3.1 8B bf16 on H100 ($2.50/GPU-h), 10 req/s of 1,000 + 200 tokens, u = 0.8
    # when its disaggregated candidate is planned
    [row] = plan_disagg([_candidate()], TRAFFIC, SLO, POLICY, API)
    # then the cheapest layout is TP1 for both pools, one serving worker each, and N+1 per pool:
    # 2 + 2 workers = 4 GPUs, 4 x 2.50 x 730 = $7,300/month
    assert row.mode == "disagg" and row.fits and row.meets_slo
    assert (row.pools["prefill"]["tp"], row.pools["decode"]["tp"]) == (1, 1)
    assert row.pools["prefill"]["serving_workers"] == row.pools["decode"]["serving_workers"] == 1
    assert row.pools["prefill"]["workers"] == row.pools["decode"]["workers"] == 2
    assert (row.replicas, row.gpus, row.serving_replicas) == (4, 4, 2)
    assert row.usd_per_hour == pytest.approx(10.0)
    assert row.usd_per_month == pytest.approx(7300.0)
    # the transfer is the pools' own (size_pools at the same layout and rate)
    layout = {k: np.array([v]) for k, v in dict(tp=1, pp=1, ep=1, dp=1).items()}
    sized = size_pools(LLAMA_8B, H100, layout, layout, layout, "bf16", None, 1000.0, 200.0,
                       10.0, 1.0, 0.05, target_utilization=0.8)  # fmt: skip
    assert row.kv_transfer_ms == pytest.approx(float(sized.kv_transfer_ms[0]))
    # $/M output tokens: $10/h over 5 req/s x 200 tokens x 3,600 s = 3.6M tokens/h
    assert row.usd_per_mtok == pytest.approx(10.0 / 3.6)
    assert row.tokens_per_usd == pytest.approx(3.6e6 / 10.0)
    assert row.latency_source == "analytic" and row.latency_statistic == "p95"
    # the percentile TTFT (the M/D/1 wait quantile on top) is above the mean value
    assert row.ttft_ms > row.mean_value_ttft_ms > 0


@pytest.mark.parametrize("model", [LLAMA_8B, LLAMA_70B, DEEPSEEK_V3], ids=lambda m: m.name)
@pytest.mark.parametrize("gpu", [H100, B200], ids=lambda g: g.name)
def test_every_formula_step_evaluates_to_the_value_shown(model, gpu):
    # given a dense, a GQA 70B and an MLA MoE model, fp8
    [row] = plan_disagg([_candidate(model, gpu, "fp8")], TRAFFIC, SLO, POLICY, API)
    # then every formula step recomputes from its listed inputs to the value shown
    checked = 0
    for s in row.derivation:
        if s.kind != "formula":
            continue
        value = evaluate(s.formula, s.inputs)
        assert math.isclose(value, s.value, rel_tol=1e-9, abs_tol=1e-9), (s.name, s.formula)
        checked += 1
    stages = {s.stage for s in row.derivation}
    if row.fits:
        assert checked > 30
        assert {"KV transfer between the pools", "Prefill pool", "Decode pool"} <= stages
    else:  # DeepSeek-V3 fp8 (671 GB) does not fit 8 x 80 GB: its row says why, not a sizing
        assert "decode worker" in row.reason and "Decode pool" not in stages


@pytest.mark.parametrize("model", [LLAMA_8B, LLAMA_70B, DEEPSEEK_V3], ids=lambda m: m.name)
def test_the_band_contains_the_answer(model):
    [row] = plan_disagg([_candidate(model, B200, "fp8")], TRAFFIC, SLO, POLICY, API)
    assert row.band.replicas[0] <= row.replicas <= row.band.replicas[1]
    assert row.band.gpus[0] <= row.gpus <= row.band.gpus[1]
    low, high = row.band.usd_per_month
    assert low <= row.usd_per_month <= high


def test_a_candidate_sizes_the_same_alone_and_among_others():
    # given one candidate planned alone and beside three others
    alone = plan_disagg([_candidate(LLAMA_70B, H100, "fp8")], TRAFFIC, SLO, POLICY, API)[0]
    crowd = [_candidate(LLAMA_8B), _candidate(LLAMA_70B, H100, "fp8"),
             _candidate(DEEPSEEK_V3, B200, "fp8"), _candidate(LLAMA_70B, H200, "fp8")]  # fmt: skip
    among = plan_disagg(crowd, TRAFFIC, SLO, POLICY, API)[1]
    # then its numbers are the same
    for name in ("replicas", "gpus", "usd_per_month", "ttft_ms", "tpot_ms", "kv_transfer_ms"):
        assert getattr(alone, name) == getattr(among, name), name
    assert alone.pools == among.pools


def test_each_model_priced_against_its_own_api_in_one_call():
    # given an 8B and a 70B candidate, each model with its own API price
    small, large = _candidate(LLAMA_8B), _candidate(LLAMA_70B, H100, "fp8")
    cheap = ApiPrice(0.1, 0.2, label="8B")
    # when planned in one call with a price each, and in calls of their own
    together = plan_disagg([small, large], TRAFFIC, SLO, POLICY, [cheap, API])
    apart = [plan_disagg([small], TRAFFIC, SLO, POLICY, cheap)[0],
             plan_disagg([large], TRAFFIC, SLO, POLICY, API)[0]]  # fmt: skip
    # then every row is the same, break-even against its own model's API
    assert together == apart
    assert together[0].breakeven.api_usd_per_mtok == pytest.approx((1000 * 0.1 + 200 * 0.2) / 1200)


@pytest.mark.parametrize("model", [LLAMA_8B, LLAMA_70B], ids=lambda m: m.name)
def test_h200_never_needs_more_gpus_than_h100(model):
    # H200 is H100's die with more and faster HBM: at the same price it is never worse
    h200 = H200.__class__(**{**H200.__dict__, "usd_per_gpu_hour": H100.usd_per_gpu_hour})
    a = plan_disagg([_candidate(model, H100, "fp8")], TRAFFIC, SLO, POLICY)[0]
    b = plan_disagg([_candidate(model, h200, "fp8")], TRAFFIC, SLO, POLICY)[0]
    assert b.gpus <= a.gpus


def test_pools_given_by_the_tail_stage_come_back_as_the_serving_workers():
    # given the simulation found 3 prefill and 2 decode workers at TP1 (and its latencies)
    table = {"ttft": {"p50": 300.0, "p95": 800.0}, "tpot": {"p50": 20.0, "p95": 30.0}}
    given = PoolsGiven(1, 1, 3, 2, table, True, "ttft")
    [row] = plan_disagg([_candidate()], TRAFFIC, SLO, POLICY, API, given=[given])
    # then the headroom stage gives them back, plus a spare each: 4 + 3 workers
    assert row.pools["prefill"]["serving_workers"] == 3
    assert row.pools["decode"]["serving_workers"] == 2
    assert (row.replicas, row.gpus) == (7, 7)
    assert row.latency_source == "simulated" and row.latency_statistic == "p95"
    assert (row.ttft_ms, row.tpot_ms) == (800.0, 30.0)
    assert row.band.replicas[0] <= 7 <= row.band.replicas[1]


def test_the_tail_stage_grows_the_pool_whose_percentile_misses():
    # given Llama 8B at 10 req/s started from one prefill worker at TP1 with a tight TTFT
    slo = Slo(ttft_ms=150, tpot_ms=60, percentile=95, goodput_target=0.0)
    given, probes = simulate_pools(_candidate(), 1, 1, 1, 1, TRAFFIC, slo, POLICY, 600, 60, 7)
    # then every round that missed TTFT added prefill workers (and never removed any)
    for before, after in zip(probes, probes[1:], strict=False):
        assert not before.meets_slo
        if before.ttft_ms > slo.ttft_ms:
            assert after.prefill_workers > before.prefill_workers
        if before.tpot_ms <= slo.tpot_ms:
            assert after.decode_workers == before.decode_workers or before.ttft_ms <= slo.ttft_ms
    assert given.prefill_workers >= 1 and given.decode_workers >= 1
    if given.meets_slo:
        assert probes[-1].ttft_ms <= slo.ttft_ms and probes[-1].tpot_ms <= slo.tpot_ms
    assert [s.kind for s in given.steps] == ["simulation"] * len(probes)
