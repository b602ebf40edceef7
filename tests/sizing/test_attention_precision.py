"""Attention computes at its KV cache's precision, never at the weights' fp4."""

import numpy as np
import pytest
from specs_catalog import B200, H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.derivation import evaluate
from sizing.precision import attention_compute_precision, attention_peak_flops
from sizing.specs import Policy, Slo, Traffic
from sizing.steptime import prefill_time, stage_cost

# Llama 3.1 8B: QK^T and PV cost 4 * n_h * d FLOPs per query token per attended token per
# layer; a p-token causal prompt attends p / 2 on average: p^2 * 2 * n_h * d * L in all
ATTENTION_PER_SQUARED_TOKEN = 2 * 32 * 128 * 32  # 262,144 FLOP
MATMUL_PARAMS_8B = 8.03e9 - 128256 * 4096  # the untied input embedding is a lookup


@pytest.mark.parametrize(
    ("gpu", "kv", "name", "peak"),
    [
        (B200, "fp8", "fp8", 4500e12),  # TensorRT-LLM FP8 context FMHA / XQA
        (B200, "bf16", "bf16", 2250e12),
        (B200, "fp4", "fp8", 4500e12),  # a 4-bit cache is dequantized into fp8 attention
        (H100, "fp8", "fp8", 1979e12),
        (H100, "bf16", "bf16", 989.5e12),
    ],
)
def test_attention_runs_at_the_cache_precision_peak(gpu, kv, name, peak):
    assert attention_compute_precision(gpu, kv) == name
    assert attention_peak_flops(gpu, kv) == peak


def test_nvfp4_weights_on_b200_attend_at_the_fp8_peak():
    # given Llama 3.1 8B with NVFP4 weights and an fp8 cache on a B200 (fp4 9,000 / fp8 4,500
    # dense TFLOP/s), an 8,000-token prompt in one chunk
    c = CandidateArrays.build(LLAMA_8B, B200, "fp4", kv_precision="fp8")
    st = prefill_time(c, np.array([8000.0])).stage
    eta = c.eta_flop_prefill[0]
    # then attention is 8,000^2 * 262,144 = 1.678e13 FLOP and the GEMMs 2 * 7.505e9 * 8,000
    attention = 8000.0**2 * ATTENTION_PER_SQUARED_TOKEN
    assert st.flops_attention_prefill[0] == pytest.approx(attention)
    assert st.flops_prefill[0] - attention == pytest.approx(2 * MATMUL_PARAMS_8B * 8000)
    # and the GEMMs run at 9,000 TFLOP/s while attention runs at 4,500:
    # (1.2008e14 / 9e15 + 1.6777e13 / 4.5e15) / 0.55 = 31.04 ms (27.65 ms all at fp4)
    expected = (2 * MATMUL_PARAMS_8B * 8000 / 9000e12 + attention / 4500e12) / eta
    assert st.flop_s[0] == pytest.approx(expected)
    assert st.flop_s[0] * 1e3 == pytest.approx(31.04, abs=0.01)


def test_fp8_weights_and_cache_keep_one_peak():
    # H100 fp8 with an fp8 cache: GEMMs and attention share the fp8 peak, one FLOP term
    c = CandidateArrays.build(LLAMA_8B, H100, "fp8", kv_precision="fp8")
    st = prefill_time(c, np.array([8000.0])).stage
    assert c.attention_peak_flops[0] == c.peak_flops[0] == 1979e12
    assert st.flop_s[0] == pytest.approx(st.flops_prefill[0] / (1979e12 * c.eta_flop_prefill[0]))


def test_the_decode_flop_step_shows_the_attention_peak_and_evaluates():
    cand = Candidate(LLAMA_70B, B200, "fp4", kv_precision="fp8")
    row = plan(Traffic(5, 5, 8000, 300), Slo(5000, 60), Policy(), [cand], tails=None).rows[0]
    [step] = [s for s in row.derivation if s.name == "decode_flop_ms"]
    inputs = {x.name: x.value for x in step.inputs}
    assert inputs["F"] == 9000e12 and inputs["F_a"] == 4500e12
    assert inputs["attention_compute_precision"] == "fp8"
    assert "flops_a / F_a" in step.formula
    assert evaluate(step.formula, step.inputs) == pytest.approx(step.value)


def test_a_slower_attention_peak_is_never_predicted_faster():
    # fp4 weights: an fp8 cache attends at 4,500 TFLOP/s, a bf16 one at 2,250: a long prompt's
    # TTFT can only grow as the attention peak falls
    fp8 = predict_rows(LLAMA_70B, B200, 1, 1, 1, 1, "fp4", "fp8", 32000, 200, 1)
    bf16 = predict_rows(LLAMA_70B, B200, 1, 1, 1, 1, "fp4", "bf16", 32000, 200, 1)
    assert bf16.ttft_ms[0] > fp8.ttft_ms[0]


# ---------------------------------------------------------------------- a roofline per kernel
def test_compute_bound_gemms_still_pay_for_the_cache_reads():
    # given Llama 3.1 8B bf16 on an H100 (3.35 TB/s, 989.5 TFLOP/s; eta_mem 0.80, eta_flop
    # 0.60), a decode step of 512 sequences at a 1,024-token context
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16")
    st = stage_cost(c, np.array([512.0]), np.array([1024.0]))
    bw, flops = 3.35e12 * 0.80, 989.5e12 * 0.60
    # the GEMMs: 15.01 GB of weights in 5.60 ms, 2 * 7.505e9 * 512 FLOPs in 12.94 ms
    gemm_mem, gemm_flop = 2 * MATMUL_PARAMS_8B / bw, 2 * MATMUL_PARAMS_8B * 512 / flops
    assert gemm_mem * 1e3 == pytest.approx(5.600, abs=1e-3)
    assert gemm_flop * 1e3 == pytest.approx(12.944, abs=1e-3)
    # attention: 512 * 1,024 * 131,072 B of cache in 25.64 ms, 2.75e11 FLOPs in 0.46 ms
    kv = 512 * 1024 * (2 * 32 * 8 * 128 * 2)
    assert st.attention_mem_s[0] == pytest.approx(kv / bw)
    assert st.attention_flop_s[0] == pytest.approx(512 * 1024 * 16384 * 32 / flops)
    # then the step pays the compute-bound GEMMs plus the memory-bound attention:
    # 12.94 + 25.64 = 38.58 ms, where one roofline over the step gave max(31.24, 13.41)
    assert st.stage_s[0] * 1e3 == pytest.approx(gemm_flop * 1e3 + kv / bw * 1e3)
    assert st.stage_s[0] * 1e3 == pytest.approx(38.58, abs=0.01)
    assert max(st.mem_s[0], st.flop_s[0]) * 1e3 == pytest.approx(31.24, abs=0.01)


def test_a_memory_bound_step_is_the_old_roofline():
    # at 8 sequences both kinds are memory-bound: (weights + cache) / (BW * eta_mem)
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16")
    st = stage_cost(c, np.array([8.0]), np.array([1024.0]))
    assert st.stage_s[0] == pytest.approx(st.mem_s[0])


def test_the_decode_step_shows_attention_apart_and_evaluates():
    cand = Candidate(LLAMA_8B, H100, "bf16")
    row = plan(Traffic(40, 40, 1000, 1000), Slo(5000, 80), Policy(), [cand], tails=None).rows[0]
    steps = {s.name: s for s in row.derivation}
    for name in ("decode_attention_mem_ms", "decode_attention_flop_ms", "pure_decode_step_ms"):
        s = steps[name]
        assert evaluate(s.formula, s.inputs) == pytest.approx(s.value), name
    assert "max(attn_mem, attn_flop)" in steps["pure_decode_step_ms"].formula
