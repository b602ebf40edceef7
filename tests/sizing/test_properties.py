"""Monotonicity properties of the chain (hypothesis)."""

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from specs_catalog import B200, DEEPSEEK_V3, GPT_OSS_120B, H100, H200, L40S, LLAMA_8B, LLAMA_70B

from sizing import cost, headroom
from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan
from sizing.memory import fit_memory, weights_bytes_per_gpu
from sizing.specs import Parallelism, Policy, Slo, Traffic
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
