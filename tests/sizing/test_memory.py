"""Memory fit: weights, KV layout rules, budget and misfit reasons."""

from dataclasses import replace

import numpy as np
import pytest
from specs_catalog import DEEPSEEK_V3, GPT_OSS_120B, H100, L40S, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.memory import (
    R_EP,
    R_TP_DOMAIN,
    R_TP_HEADS,
    R_TP_KV_HEADS,
    R_WEIGHTS,
    fit_memory,
    kv_bytes_per_sequence_per_gpu,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    weights_bytes_per_gpu,
    weights_bytes_total,
)
from sizing.specs import EngineSettings

EMBED_70B = 128256 * 8192  # 1,050,673,152 params


def test_70b_bf16_on_one_h100_does_not_fit_with_reason():
    # given 141.1 GB of weights and 80 GB * 0.90 = 72.0 GB usable
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16")
    fit = fit_memory(c, 2048)
    # then it does not fit, and the reason carries both numbers
    assert not fit.fits[0]
    assert fit.reason_code[0] == R_WEIGHTS
    assert fit.reason(c, 0) == "weights 141.1 GB > 72.0 GB usable on one H100 SXM"
    assert fit.max_concurrency[0] == 0


def test_70b_bf16_tp8_budget_capacity_and_concurrency():
    # given TP8 on H100: weights 141.1e9 / 8 = 17.6375e9 B per GPU
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16", tp=8)
    fit = fit_memory(c, 2048)
    assert fit.weights_bytes_per_gpu[0] == pytest.approx(17.6375e9)
    # workspace 8192 tokens * 8192 hidden * 24 B = 1,610,612,736 B
    assert fit.workspace_bytes_per_gpu[0] == 1_610_612_736
    # budget 72e9 - 17.6375e9 - 1.610612736e9 - 2e9 = 50,751,887,264 B
    assert fit.kv_budget_bytes_per_gpu[0] == pytest.approx(50_751_887_264, abs=1)
    # per GPU one KV head: 2 * 80 * 1 * 128 * 2 = 40,960 B/token
    assert fit.kv_bytes_per_token_per_gpu[0] == 40_960
    # capacity floor(50,751,887,264 / 40,960) = 1,239,059 tokens
    assert fit.kv_capacity_tokens[0] == 1_239_059
    # at 2,048 tokens per sequence: 83,886,080 B -> floor(605.01) = 605 users
    assert fit.max_concurrency[0] == 605


def test_tensorrt_llm_sizes_its_kv_pool_from_the_memory_the_model_leaves_free():
    # given the same TP8 layout on TensorRT-LLM, whose free_gpu_memory_fraction 0.90 is a
    # share of the memory left once weights (17.6375 GB), workspace (1.610612736 GB) and
    # runtime (2 GB) are loaded: 0.9 * (80e9 - 21.248112736e9) = 52,876,698,537.6 B
    trt = CandidateArrays.build(LLAMA_70B, H100, "bf16", tp=8, engine=EngineSettings("trtllm"))
    fit = fit_memory(trt, 2048)
    assert fit.kv_budget_bytes_per_gpu[0] == pytest.approx(52_876_698_537.6, abs=1)
    # then floor(52,876,698,537.6 / 40,960) = 1,290,935 tokens and 630 users at 2,048 tokens,
    # against vLLM's 1,239,059 and 605 (a share of all HBM, weights inside it)
    assert fit.kv_capacity_tokens[0] == 1_290_935
    assert fit.max_concurrency[0] == 630
    # and Llama 3.1 70B fp8 (72.7 GB) fits this 80 GB H100 on TensorRT-LLM, not on vLLM
    one_trt = CandidateArrays.build(LLAMA_70B, H100, "fp8", engine=EngineSettings("trtllm"))
    one_vllm = CandidateArrays.build(LLAMA_70B, H100, "fp8")
    assert fit_memory(one_trt, 2048).fits[0]
    assert not fit_memory(one_vllm, 2048).fits[0]


def test_quantized_weights_keep_embedding_and_lm_head_in_bf16():
    # given fp8 70B: (70.55e9 - 2 * E) * 1 B + 2 * E * 2 B, E = 1,050,673,152
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8")
    # then 70.55e9 + 2 * 1,050,673,152 = 72,651,346,304 B (vLLM reports 67.7 GiB)
    assert weights_bytes_total(c)[0] == pytest.approx(70.55e9 + 2 * EMBED_70B)


def test_int4_and_fp4_carry_block_scale_overhead():
    c = CandidateArrays.build(replace(LLAMA_70B, embedding_params=0.0), H100, ["int4", "fp4"])
    # int4: 0.5 + 4/128 = 0.53125 B/param; fp4 (NVFP4): 0.5 + 1/16 = 0.5625 B/param
    assert weights_bytes_total(c) == pytest.approx([70.55e9 * 0.53125, 70.55e9 * 0.5625])


def test_tp_must_divide_attention_heads():
    # given 64 heads and TP 3 (a custom 8-GPU domain still allows 3 GPUs)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=3)
    fit = fit_memory(c, 2048)
    assert not fit.fits[0]
    assert fit.reason_code[0] == R_TP_HEADS
    assert "TP 3 does not divide" in fit.reason(c, 0)
    assert "64 attention heads" in fit.reason(c, 0)


def test_tp_beyond_scale_up_domain_is_rejected():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=16)
    fit = fit_memory(c, 2048)
    assert fit.reason_code[0] == R_TP_DOMAIN
    assert "exceeds the 8-GPU nvlink domain of H100 SXM" in fit.reason(c, 0)


def test_tp_above_kv_heads_replicates_kv():
    # given a GQA model with 2 KV heads (16 query heads), TP 4
    small = replace(LLAMA_70B, name="tiny", num_attention_heads=16, num_kv_heads=2)
    c = CandidateArrays.build(small, H100, "bf16", tp=[1, 2, 4])
    per_gpu = kv_bytes_per_token_per_gpu(c)
    # TP1: 2*80*2*128*2 = 81,920; TP2: one head per rank = 40,960;
    # TP4: heads cannot split further, each rank keeps a copy = 40,960 (not 20,480)
    assert per_gpu.tolist() == [81_920, 40_960, 40_960]
    # the exposed whole-model number never includes the replication
    assert kv_bytes_per_token(c).tolist() == [81_920] * 3


def test_tp_not_multiple_of_kv_heads_is_rejected():
    odd = replace(LLAMA_70B, name="odd", num_attention_heads=48, num_kv_heads=3)
    c = CandidateArrays.build(odd, H100, "bf16", tp=[2, 4])
    fit = fit_memory(c, 1024)
    assert fit.reason_code.tolist() == [R_TP_KV_HEADS, R_TP_KV_HEADS]


def test_mla_latent_is_replicated_on_every_tp_rank():
    # DeepSeek-V3 fp8 cache: 61 * 576 * 1 = 35,136 B/token whole model and per GPU at TP8
    c = CandidateArrays.build(DEEPSEEK_V3, H100, "fp8", tp=8)
    assert kv_bytes_per_token(c)[0] == 35_136
    assert kv_bytes_per_token_per_gpu(c)[0] == 35_136


def test_moe_experts_split_over_ep_else_tp():
    # DeepSeek-V3 routed experts: 256 * 3*7168*2048 * 58 = 653,723,549,696 params
    routed = 256 * 3 * 7168 * 2048 * 58
    embed = 129280 * 7168
    c = CandidateArrays.build(DEEPSEEK_V3, H100, "fp8", tp=[8, 8, 1], ep=[1, 8, 8], dp=[1, 1, 8])
    nonexp = (671.03e9 - routed - 2 * embed) * 1 + 2 * embed * 2
    w = weights_bytes_per_gpu(c)
    # TP8: everything / 8; TP8 EP8: the same split; DP8 EP8: non-expert replicated
    assert w[0] == pytest.approx(nonexp / 8 + routed / 8)
    assert w[1] == pytest.approx(nonexp / 8 + routed / 8)
    assert w[2] == pytest.approx(nonexp + routed / 8)


def test_ep_must_divide_experts_and_fit_the_stage():
    c = CandidateArrays.build(
        [DEEPSEEK_V3, DEEPSEEK_V3, LLAMA_70B], H100, "fp8", tp=[8, 4, 8], ep=[3, 8, 8]
    )
    fit = fit_memory(c, 2048)
    assert fit.reason_code.tolist() == [R_EP, R_EP, R_EP]
    assert "does not divide" in fit.reason(c, 0)
    assert "GPUs per pipeline stage" in fit.reason(c, 1)
    assert "dense model" in fit.reason(c, 2)


def test_sliding_window_layers_hold_at_most_window_tokens():
    # gpt-oss-120b: 18 full + 18 sliding(128) layers, 8 KV heads * 64 dim, fp8 cache (fp4 weights)
    c = CandidateArrays.build(GPT_OSS_120B, H100, "fp4")
    per_layer = 2 * 8 * 64  # 1,024 elements/token/layer, 1 B each
    seq = kv_bytes_per_sequence_per_gpu(c, np.array([100.0]))[0]
    assert seq == (18 * 100 + 18 * 100) * per_layer
    seq = kv_bytes_per_sequence_per_gpu(c, np.array([10_000.0]))[0]
    assert seq == (18 * 10_000 + 18 * 128) * per_layer


def test_linear_attention_layers_add_constant_state():
    hybrid = replace(
        LLAMA_70B,
        name="hybrid",
        full_attention_layers=20,
        linear_attention_layers=60,
        linear_state_elements=1_000_000,
    )
    c = CandidateArrays.build(hybrid, H100, "bf16", tp=2)
    a, b = kv_bytes_per_sequence_per_gpu(c.take(np.array([0, 0])), np.array([1000.0, 2000.0]))
    # per GPU per layer 2*4*128 = 1,024 elements; state 60 * 1e6 / 2 ranks; 2 B each
    assert a == (20 * 1000 * 1024 + 60 * 1_000_000 / 2) * 2
    assert b - a == 20 * 1000 * 1024 * 2


def test_no_room_for_kv_and_one_sequence_reasons():
    # 70B fp8 on one H100: 72.65 GB of weights > 72.0 usable
    c = CandidateArrays.build(LLAMA_70B, [H100, L40S], "fp8", tp=[1, 2])
    fit = fit_memory(c, 2048)
    assert fit.reason(c, 0) == "weights 72.7 GB > 72.0 GB usable on one H100 SXM"
    # L40S TP2: 36.3 GB per GPU + 1.6 workspace + 2.0 runtime = 39.9 <= 43.2 usable: fits
    assert fit.fits[1]
    # but a 131,072-token sequence needs 131,072 * 2*80*4*128*1 B = 10.7 GB > budget
    long = fit_memory(c, 131_072)
    assert not long.fits[1]
    assert long.reason(c, 1).startswith("one 131,072-token sequence needs 10.74 GB of KV per GPU")


def test_context_beyond_model_maximum_is_rejected():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8)
    fit = fit_memory(c, 200_000)
    assert not fit.fits[0]
    assert fit.reason(c, 0) == "context 200,000 tokens > Llama 3.1 70B's maximum 131,072"
