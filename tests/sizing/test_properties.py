"""Monotonicity properties of the chain (hypothesis)."""

import csv
import functools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from specs_catalog import B200, DEEPSEEK_V3, GPT_OSS_120B, H100, H200, L40S, LLAMA_8B, LLAMA_70B

from sizing import calibrate as cal
from sizing import cost, headroom
from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan
from sizing.memory import fit_memory, weights_bytes_per_gpu
from sizing.operating import closed_loop
from sizing.specs import Calibration, GpuSpec, Parallelism, Policy, Slo, Traffic
from sizing.steptime import decode_step

MODELS = [LLAMA_8B, LLAMA_70B, DEEPSEEK_V3, GPT_OSS_120B]
GPUS = [H100, H200, B200, L40S]
models = st.sampled_from(MODELS)
gpus = st.sampled_from(GPUS)
tps = st.sampled_from([1, 2, 4, 8])
precisions = st.sampled_from(["bf16", "fp8", "int4", "fp4", "int8"])


@settings(max_examples=200, deadline=None)
@given(
    peak=st.floats(0.0, 1e4),
    extra=st.floats(0.0, 1e4),
    cap=st.floats(0.01, 1e3),
    util=st.floats(0.05, 1.0),
    burst=st.floats(1.0, 3.0),
)
def test_more_traffic_never_needs_fewer_replicas(peak, extra, cap, util, burst):
    lo = headroom.serving_replicas(peak, cap, util, burst)
    hi = headroom.serving_replicas(peak + extra, cap, util, burst)
    assert hi >= lo


@settings(max_examples=15, deadline=None)
@given(peak=st.floats(0.5, 50.0), factor=st.floats(1.0, 5.0), model=models, gpu=gpus, tp=tps)
def test_more_traffic_never_needs_fewer_replicas_through_plan(peak, factor, model, gpu, tp):
    cand = [Candidate(model, gpu, "fp8", Parallelism(tp=tp))]
    slo = Slo(ttft_ms=3000, tpot_ms=80)

    def replicas(p):
        t = Traffic(peak_rps=p, mean_rps=p / 2, prompt_tokens_mean=1000, output_tokens_mean=200)
        return plan(t, slo, Policy(), cand).rows[0].replicas

    assert replicas(peak * factor) >= replicas(peak)


@settings(max_examples=150, deadline=None)
@given(
    model=models,
    gpu=gpus,
    tp=tps,
    w=precisions,
    ctx=st.integers(1, 100_000),
    extra=st.integers(0, 100_000),
)
def test_longer_context_never_admits_more_users(model, gpu, tp, w, ctx, extra):
    c = CandidateArrays.build(model, gpu, w, tp=tp).take(np.zeros(2, dtype=int))
    fit = fit_memory(c, np.array([ctx, ctx + extra], dtype=float))
    assert fit.max_concurrency[1] <= fit.max_concurrency[0]


@settings(max_examples=150, deadline=None)
@given(
    model=models,
    gpu=gpus,
    tp=tps,
    w=precisions,
    batch=st.integers(1, 2048),
    ctx=st.integers(0, 64_000),
    more_bw=st.floats(1.0, 4.0),
)
def test_more_hbm_bandwidth_never_lengthens_a_decode_step(model, gpu, tp, w, batch, ctx, more_bw):
    faster = replace(gpu, hbm_bandwidth_tb_s=gpu.hbm_bandwidth_tb_s * more_bw)
    c = CandidateArrays.build(model, [gpu, faster], w, tp=tp)
    steps = decode_step(c, float(batch), float(ctx), 512.0, 2048.0).step_s
    assert steps[1] <= steps[0]


@settings(max_examples=200, deadline=None)
@given(
    replicas=st.integers(1, 100),
    gpus_=st.integers(1, 72),
    price=st.floats(0.1, 20),
    more=st.floats(0.0, 20),
    tok_s=st.floats(1.0, 1e6),
    util=st.floats(0.01, 1.0),
)
def test_a_higher_gpu_price_never_lowers_cost(replicas, gpus_, price, more, tok_s, util):
    lo = cost.usd_per_hour(replicas, gpus_, price)
    hi = cost.usd_per_hour(replicas, gpus_, price + more)
    assert hi >= lo
    assert cost.usd_per_mtok(hi, tok_s, util) >= cost.usd_per_mtok(lo, tok_s, util)


@settings(max_examples=10, deadline=None)
@given(price=st.floats(0.5, 10.0), more=st.floats(0.01, 10.0), model=models, gpu=gpus)
def test_a_higher_gpu_price_never_lowers_plan_cost(price, more, model, gpu):
    t = Traffic(peak_rps=10, mean_rps=5, prompt_tokens_mean=1000, output_tokens_mean=200)
    rows = plan(
        t,
        Slo(3000, 80),
        Policy(),
        [
            Candidate(model, replace(gpu, usd_per_gpu_hour=price), "fp8", Parallelism(tp=8)),
            Candidate(model, replace(gpu, usd_per_gpu_hour=price + more), "fp8", Parallelism(tp=8)),
        ],
    ).rows
    by_price = sorted(rows, key=lambda r: r.usd_per_month)
    if rows[0].fits:
        assert by_price[0].usd_per_mtok <= by_price[1].usd_per_mtok


@settings(max_examples=200, deadline=None)
@given(
    usd_h=st.floats(0.1, 1e4),
    tok_s=st.floats(1.0, 1e6),
    u=st.floats(0.01, 1.0),
    du=st.floats(0.0, 1.0),
)
def test_cost_per_token_falls_as_utilization_rises(usd_h, tok_s, u, du):
    higher = min(u + du, 1.0)
    assert cost.usd_per_mtok(usd_h, tok_s, higher) <= cost.usd_per_mtok(usd_h, tok_s, u)


@settings(max_examples=200, deadline=None)
@given(
    model=models,
    tp=tps,
    pp=st.sampled_from([1, 2]),
    total=st.floats(1e9, 2e12),
    embed_share=st.floats(0.0, 0.2),
)
def test_fp8_weights_never_use_more_memory_than_bf16(model, tp, pp, total, embed_share):
    m = replace(
        model,
        total_params=max(
            total, model.num_experts * model.params_per_expert * model.num_moe_layers * 1.01
        ),
        embedding_params=total * embed_share / 2,
    )
    c = CandidateArrays.build(m, H100, ["bf16", "fp8", "int4", "fp4"], tp=tp, pp=pp)
    w = weights_bytes_per_gpu(c)
    assert w[1] <= w[0]
    assert w[2] <= w[1]
    assert w[3] <= w[1]


# ---------------------------------------------------------------- monotonic physics (catalog)
CATALOG_GPUS = Path(__file__).resolve().parents[2] / "fleets" / "catalog" / "gpus.csv"
PEAK_COLUMNS = {
    "bf16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "fp4": "fp4_tflops",
    "int8": "int8_tops",
}


def catalog_gpus() -> dict[str, GpuSpec]:
    """Every shipped GPU, as ``fleets.selectors.gpu_spec`` builds it (blank peaks left out)."""
    out = {}
    with CATALOG_GPUS.open(newline="") as handle:
        for row in csv.DictReader(handle):
            peaks = {k: float(row[c]) for k, c in PEAK_COLUMNS.items() if row[c].strip()}
            out[row["slug"]] = GpuSpec(
                name=row["name"], memory_gb=float(row["memory_gb"]),
                hbm_bandwidth_tb_s=float(row["hbm_bandwidth_tb_s"]), dense_tflops=peaks,
                scale_up_link=row["scale_up_link"], scale_up_bw_gb_s=float(row["scale_up_bw_gb_s"]),
                gpus_per_node=int(row["gpus_per_node"]),
                scale_up_domain_gpus=int(row["scale_up_domain_gpus"]),
            )  # fmt: skip
    return out


def dominates(a: GpuSpec, b: GpuSpec, precision: str) -> bool:
    """``a`` is at least as good as ``b`` on HBM bytes, bandwidth, the precision's FLOP/s
    (the peak the engine computes in), link bandwidth and scale-up domain."""
    peak_a = CandidateArrays.build(LLAMA_8B, a, precision).peak_flops[0]
    peak_b = CandidateArrays.build(LLAMA_8B, b, precision).peak_flops[0]
    return (
        a.memory_gb >= b.memory_gb
        and a.hbm_bandwidth_tb_s >= b.hbm_bandwidth_tb_s
        and peak_a >= peak_b > 0
        and a.scale_up_bw_gb_s >= b.scale_up_bw_gb_s
        and a.scale_up_domain_gpus >= b.scale_up_domain_gpus
    )


GPUS_ALL = catalog_gpus()
NAMED_PAIRS = [("h200_sxm", "h100_sxm"), ("b300", "b200"), ("gb200", "b200"), ("mi325x", "mi300x")]


def test_the_named_pairs_dominate_on_the_datasheet():
    # the pairs are dominance pairs of the catalog (so the property below covers them)
    for better, worse in NAMED_PAIRS:
        assert dominates(GPUS_ALL[better], GPUS_ALL[worse], "fp8"), (better, worse)
        assert GPUS_ALL[better].memory_gb > GPUS_ALL[worse].memory_gb


@functools.cache
def dominance_pairs(precision: str) -> list[tuple[str, str]]:
    # cached: the catalog is fixed for the session, and each hypothesis example asks again
    return [
        (a, b)
        for a in GPUS_ALL
        for b in GPUS_ALL
        if a != b and dominates(GPUS_ALL[a], GPUS_ALL[b], precision)
    ]


def _point(gpu, model, precision, tp, isl, osl, conc, calibration):
    c = CandidateArrays.build(model, gpu, precision, tp=tp, calibration=calibration)
    fit = fit_memory(c, isl + osl)
    return fit, closed_loop(c, fit, isl, osl, conc)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from([LLAMA_8B, LLAMA_70B, DEEPSEEK_V3]),
    precision=st.sampled_from(["bf16", "fp8", "fp4"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    isl=st.sampled_from([128, 1024, 8192]),
    osl=st.sampled_from([128, 1024]),
    conc=st.sampled_from([1.0, 16.0, 256.0, np.nan]),
    calibration=st.sampled_from([cal.PHYSICS, Calibration()]),
)
def test_a_dominating_gpu_is_never_slower_and_never_holds_fewer_sequences(
    model, precision, tp, isl, osl, conc, calibration
):
    # given every catalog pair where one GPU is at least as good on every datasheet number
    points = {}  # a GPU sits in several pairs: size its point once per example

    def point(slug):
        if slug not in points:
            points[slug] = _point(GPUS_ALL[slug], model, precision, tp, isl, osl, conc, calibration)
        return points[slug]

    for better, worse in dominance_pairs(precision):
        fit_b, op_b = point(better)
        fit_w, op_w = point(worse)
        # then it fits whenever the other does, holds at least as many sequences, and is
        # never slower (same constants: the same generation's profile, or physics)
        if not fit_w.fits[0]:
            continue
        pair = (better, worse, model.name, precision, tp, isl, osl, conc)
        assert fit_b.fits[0], pair
        assert op_b.batch_max[0] >= op_w.batch_max[0], pair
        # (the max-throughput batch is found by a scan refined to ~4 % in B: 0.1 % in rate)
        if np.isnan(conc):
            assert op_b.output_tokens_per_s[0] >= op_w.output_tokens_per_s[0] * (1 - 1e-3), pair
            continue  # max throughput: a bigger batch is allowed to be slower per request
        if op_b.batch[0] != op_w.batch[0]:
            continue  # known gap: see test_known_gap_more_admitted_sequences_can_lower_rate
        assert op_b.output_tokens_per_s[0] >= op_w.output_tokens_per_s[0] * (1 - 1e-9), pair
        # the same clients finish sooner end to end (residence = C / X in closed loop); with
        # the same batch running, every token is as fast (a GPU that admits more clients
        # may run them at a larger batch instead of queueing them: TPOT may then be higher)
        assert op_b.residence_s[0] <= op_w.residence_s[0] * (1 + 1e-9), pair
        if op_b.batch[0] == op_w.batch[0]:
            assert op_b.tpot_s[0] <= op_w.tpot_s[0] * (1 + 1e-9), pair
            assert op_b.ttft_s[0] <= op_w.ttft_s[0] * (1 + 1e-9), pair


@settings(max_examples=8, deadline=None)
@given(
    model=st.sampled_from([LLAMA_8B, LLAMA_70B, DEEPSEEK_V3]),
    rps=st.sampled_from([1.0, 100.0, 10_000.0]),
    tp=st.sampled_from([1, 4, 8]),
)
def test_a_dominating_gpu_never_needs_more_gpus(model, rps, tp):
    # given a traffic and SLO, each named pair under the same (physics) constants
    traffic = Traffic(peak_rps=rps, mean_rps=rps / 2, prompt_tokens_mean=2000,
                      output_tokens_mean=300)  # fmt: skip
    slo = Slo(ttft_ms=2000, tpot_ms=60)

    def gpus_needed(slug):
        row = plan(traffic, slo, Policy(), [Candidate(model, GPUS_ALL[slug], "fp8",
                                                      Parallelism(tp=tp))]).rows[0]  # fmt: skip
        return row.replicas * row.gpus_per_replica if row.fits else math.inf

    # then the better GPU never needs more GPUs
    for better, worse in NAMED_PAIRS:
        assert gpus_needed(better) <= gpus_needed(worse), (better, worse, model.name, rps, tp)


def test_shipped_profiles_give_the_gpus_of_one_generation_the_same_constants():
    # given the shipped profiles fixture, selected through the one walk
    records = json.loads((CATALOG_GPUS.parent / "calibration_profiles.json").read_text())
    table = {
        cal.ProfileKey(
            r["gpu_slug"] or f"gen:{r['generation']}", r["engine_family"] or cal.ANY,
            r["precision"] or cal.ANY, r.get("engine_version") or cal.ANY,
        ): Calibration(name=r["name"], **r["constants"])
        for r in records
    }  # fmt: skip
    generation = {"h100_sxm": "hopper", "h200_sxm": "hopper", "b200": "blackwell",
                  "b300": "blackwell", "gb200": "blackwell", "mi300x": "cdna3",
                  "mi325x": "cdna3"}  # fmt: skip
    # then each named pair reads one profile per engine x precision (so physics orders them)
    for better, worse in NAMED_PAIRS:
        for engine in ("vllm", "sglang", "trtllm"):
            for precision in ("bf16", "fp8", "fp4"):
                a = cal.select_profile(table, better, engine, precision, generation[better])
                b = cal.select_profile(table, worse, engine, precision, generation[worse])
                assert a == b, (better, worse, engine, precision)


def test_more_admitted_sequences_never_lower_the_rate():
    # given 8k prompts and 128-token outputs at 256 clients, B300 admits 137 sequences where
    # B200 admits 73 (the rest queue); the mean-value rate at a fixed batch falls past ~96
    # sequences (prefill saturates the token budget and its wait grows), so the engine runs
    # at the envelope: the best batch up to what it admits, the other sequences waiting
    # for their prefill. Then B300 is at least as fast as B200 at every concurrency.
    b300 = _point(GPUS_ALL["b300"], LLAMA_70B, "bf16", 2, 8192, 128, 256.0, Calibration())[1]
    b200 = _point(GPUS_ALL["b200"], LLAMA_70B, "bf16", 2, 8192, 128, 256.0, Calibration())[1]
    assert b300.output_tokens_per_s[0] >= b200.output_tokens_per_s[0]
    assert b300.batch_max[0] == 137 and b200.batch_max[0] == 73
    # and the rate never falls as clients are added (the envelope is non-decreasing in C)
    rates = [
        _point(GPUS_ALL["b300"], LLAMA_70B, "bf16", 2, 8192, 128, conc, Calibration())[
            1
        ].output_tokens_per_s[0]
        for conc in (64.0, 96.0, 128.0, 137.0, 256.0)
    ]
    assert all(b >= a * (1 - 1e-3) for a, b in zip(rates, rates[1:], strict=False)), rates
