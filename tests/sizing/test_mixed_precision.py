"""Per-component precision: routed experts at their own precision, the rest at the weights'."""

import numpy as np
import pytest
from specs_catalog import B200, GPT_OSS_120B, H100, LLAMA_8B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.derivation import evaluate
from sizing.memory import expert_weight_bytes, fit_memory, weights_bytes_total
from sizing.specs import Policy, Slo, Traffic
from sizing.steptime import (
    prefill_time,
    streamed_expert_bytes_per_gpu,
    streamed_nonexpert_bytes_per_gpu,
)

EXPERTS = 128 * 3 * 2880 * 2880 * 36  # gpt-oss-120b routed expert params: 114.66e9


def test_gpt_oss_120b_mxfp4_experts_with_bf16_attention_against_its_checkpoint():
    # OpenAI's gpt-oss model card: the 120b checkpoint is 60.8 GiB (65.3 GB), MXFP4 experts
    # and bf16 everything else, and it runs on one 80 GB GPU.
    c = CandidateArrays.build(GPT_OSS_120B, H100, "bf16", expert_precision="mxfp4")
    total = weights_bytes_total(c)[0]
    # MXFP4: 4-bit elements and one 8-bit scale per 32 (0.53125 B/param)
    assert expert_weight_bytes(c)[0] == pytest.approx(EXPERTS * (0.5 + 1 / 32))
    assert total == pytest.approx(65.3e9, rel=0.005)
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


# ---------------------------------------------------------------------------- per component
ROUTED_ACTIVE = 4 * 3 * 2880 * 2880 * 36  # gpt-oss-120b: top-4 of 24.88e6-param experts x 36


def _prefill(expert_precision, gpu=B200, tokens=8000.0):
    c = CandidateArrays.build(GPT_OSS_120B, gpu, "bf16", expert_precision=expert_precision)
    return c, prefill_time(c, np.array([tokens]))


def test_fp4_experts_compute_at_the_fp4_peak_on_b200():
    # given gpt-oss-120b with bf16 attention and fp4 experts on a B200 (bf16 2,250 / fp4
    # 9,000 dense TFLOP/s), an 8,000-token prompt in one chunk
    c, pf = _prefill("fp4")
    _, plain = _prefill(None)
    st, eta = pf.stage, c.eta_flop_prefill[0]
    # then the experts' share is 2 * 3.583e9 * 8,000 = 5.733e13 FLOP
    assert st.flops_expert_prefill[0] == pytest.approx(2 * ROUTED_ACTIVE * 8000)
    assert st.flops_expert_prefill[0] == pytest.approx(5.7331e13, rel=1e-4)
    # and it runs at 9,000 TFLOP/s while the rest runs at 2,250
    rest = st.flops_prefill[0] - st.flops_expert_prefill[0]
    expected = (rest / 2250e12 + st.flops_expert_prefill[0] / 9000e12) / eta
    assert st.flop_s[0] == pytest.approx(expected)
    # the same FLOPs at the bf16 peak (what the weights' precision alone gave): 74.2 ms;
    # with the experts at fp4: 39.5 ms
    assert st.flops_prefill[0] == pytest.approx(plain.stage.flops_prefill[0])
    assert plain.stage.flop_s[0] * 1e3 == pytest.approx(74.21, abs=0.01)
    assert st.flop_s[0] * 1e3 == pytest.approx(39.46, abs=0.01)


def test_experts_without_a_faster_peak_keep_one_flop_term():
    # int4 experts are weight-only (w4a16): they dequantize into bf16 GEMMs, the same peak
    c, pf = _prefill("int4", H100)
    _, plain = _prefill(None, H100)
    assert c.expert_peak_flops[0] == c.peak_flops[0] == 989.5e12
    assert pf.stage.flops_expert_prefill == 0.0
    assert pf.stage.flop_s[0] == plain.stage.flop_s[0]
    # fp4 experts on an H100 (no fp4 peak) run fp8 GEMMs: 1,979 TFLOP/s
    c, _ = _prefill("fp4", H100)
    assert c.expert_peak_flops[0] == 1979e12


def test_embedding_precision_sets_the_embedding_and_lm_head_bytes():
    # given Llama 3.1 8B fp8: by default its embedding and LM head stay bf16
    default = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    fp8 = CandidateArrays.build(LLAMA_8B, H100, "fp8", embedding_precision="fp8")
    p_hp = 2 * 128256 * 4096  # untied: input embedding + LM head
    assert weights_bytes_total(default)[0] == pytest.approx((8.03e9 - p_hp) * 1 + p_hp * 2)
    # then an fp8 embedding costs 1 B/param: the whole model at 8.03 GB
    assert weights_bytes_total(fp8)[0] == pytest.approx(8.03e9)
    # and the LM head a decode step streams shrinks by the same bytes (the input table is
    # a lookup, not streamed)
    lm_head = 128256 * 4096
    saved = streamed_nonexpert_bytes_per_gpu(default)[0] - streamed_nonexpert_bytes_per_gpu(fp8)[0]
    assert saved == pytest.approx(lm_head * (2 - 1))


def test_mixed_precision_steps_show_each_component_and_evaluate():
    cand = Candidate(GPT_OSS_120B, B200, "bf16", expert_precision="fp4", embedding_precision="bf16")
    row = plan(Traffic(5, 5, 2000, 300), Slo(2000, 50), Policy(), [cand], tails=None).rows[0]
    steps = {s.name: s for s in row.derivation}
    for name in ("weights_bytes_total", "decode_weights_touched_per_gpu_stage", "decode_flop_ms"):
        s = steps[name]
        assert evaluate(s.formula, s.inputs) == pytest.approx(s.value), name
    names = {x.name for x in steps["decode_flop_ms"].inputs}
    assert {"flops_e", "F_e", "expert_compute_precision"} <= names
    assert {x.name: x.value for x in steps["decode_flop_ms"].inputs}["F_e"] == 9000e12
    touched = {x.name: x.value for x in steps["decode_weights_touched_per_gpu_stage"].inputs}
    assert touched["b_e"] == pytest.approx(0.5625) and touched["b_w"] == 2.0


def test_predict_rows_takes_the_embedding_precision():
    a = predict_rows(LLAMA_8B, H100, 1, 1, 1, 1, "fp8", None, 1000, 200, 8)
    b = predict_rows(LLAMA_8B, H100, 1, 1, 1, 1, "fp8", None, 1000, 200, 8,
                     embedding_precision="fp8")  # fmt: skip
    assert b.weights_gb_per_gpu[0] < a.weights_gb_per_gpu[0]
    assert b.tpot_ms[0] < a.tpot_ms[0]


def test_in_one_batch_of_rows_only_the_rows_with_a_faster_expert_peak_split():
    c = CandidateArrays.build([GPT_OSS_120B, GPT_OSS_120B], [H100, B200], "bf16",
                              expert_precision=["int4", "fp4"])  # fmt: skip
    st = prefill_time(c, np.array([8000.0, 8000.0])).stage
    assert st.flops_expert_prefill[0] == 0.0  # int4 on H100: bf16 GEMMs, one term
    assert st.flops_expert_prefill[1] == pytest.approx(2 * ROUTED_ACTIVE * 8000)
