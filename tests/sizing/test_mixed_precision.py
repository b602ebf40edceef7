"""Per-component precision: routed experts at their own precision, the rest at the weights'."""

import numpy as np
import pytest
from specs_catalog import GPT_OSS_120B, H100, LLAMA_8B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.derivation import evaluate
from sizing.memory import expert_weight_bytes, fit_memory, weights_bytes_total
from sizing.specs import Policy, Slo, Traffic
from sizing.steptime import streamed_expert_bytes_per_gpu

EXPERTS = 128 * 3 * 2880 * 2880 * 36  # gpt-oss-120b routed expert params: 114.66e9


def test_gpt_oss_120b_mxfp4_experts_with_bf16_attention_against_its_checkpoint():
    # OpenAI's gpt-oss model card: the 120b checkpoint is 60.8 GiB (65.3 GB), MXFP4 experts
    # and bf16 everything else, and it runs on one 80 GB GPU.
    c = CandidateArrays.build(GPT_OSS_120B, H100, "bf16", expert_precision="mxfp4")
    total = weights_bytes_total(c)[0]
    assert expert_weight_bytes(c)[0] == pytest.approx(EXPERTS * (0.5 + 1 / 16))
    # 68.8 GB: +5.4 % (we charge NVFP4's 1/16 scale overhead; MXFP4's is 1/32)
    assert total == pytest.approx(65.3e9, rel=0.06)
    assert fit_memory(c, 2000).fits[0]
    assert not fit_memory(CandidateArrays.build(GPT_OSS_120B, H100, "bf16"), 2000).fits[0]


def test_no_expert_precision_is_the_weight_precision():
    a = CandidateArrays.build(GPT_OSS_120B, H100, "fp8")
    b = CandidateArrays.build(GPT_OSS_120B, H100, "fp8", expert_precision=[None])
    assert weights_bytes_total(a)[0] == weights_bytes_total(b)[0]
    dense = CandidateArrays.build(LLAMA_8B, H100, "bf16", expert_precision="fp4")
    assert (
        weights_bytes_total(dense)[0]
        == weights_bytes_total(CandidateArrays.build(LLAMA_8B, H100, "bf16"))[0]
    )  # no routed experts: nothing changes


def test_decode_streams_the_experts_at_their_precision():
    bf16 = CandidateArrays.build(GPT_OSS_120B, H100, "bf16")
    mixed = CandidateArrays.build(GPT_OSS_120B, H100, "bf16", expert_precision="fp4")
    t = np.array([32.0])
    ratio = streamed_expert_bytes_per_gpu(mixed, t)[0] / streamed_expert_bytes_per_gpu(bf16, t)[0]
    assert ratio == pytest.approx((0.5 + 1 / 16) / 2.0)
    fast = predict_rows(GPT_OSS_120B, H100, 8, 8, 1, 1, "bf16", None, 1000, 1000, 16,
                        expert_precision="fp4")  # fmt: skip
    slow = predict_rows(GPT_OSS_120B, H100, 8, 8, 1, 1, "bf16", None, 1000, 1000, 16)
    assert fast.tpot_ms[0] < slow.tpot_ms[0]


def test_the_weights_step_shows_both_precisions_and_evaluates():
    cand = Candidate(GPT_OSS_120B, H100, "bf16", expert_precision="fp4")
    row = plan(Traffic(5, 5, 1000, 300), Slo(2000, 50), Policy(), [cand], tails=None).rows[0]
    [w] = [s for s in row.derivation if s.name == "weights_bytes_total"]
    assert "P_e * b_e" in w.formula
    assert evaluate(w.formula, w.inputs) == pytest.approx(w.value)
