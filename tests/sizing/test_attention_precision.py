"""Attention computes at its KV cache's precision, never at the weights' fp4."""

import numpy as np
import pytest
from specs_catalog import B200, H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.derivation import evaluate
from sizing.precision import attention_compute_precision, attention_peak_flops
from sizing.specs import Policy, Slo, Traffic
from sizing.steptime import prefill_time

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
