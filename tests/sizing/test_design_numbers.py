"""Every number in DESIGN.md's table, reproduced exactly by the core."""

import numpy as np
import pytest
from specs_catalog import DEEPSEEK_V3, H100, LLAMA_70B

from sizing import cost, littles
from sizing.candidates import CandidateArrays
from sizing.memory import kv_bytes_per_token, weights_bytes_total
from sizing.steptime import bandwidth_bound_tokens_per_s, ridge_flop_per_byte


def test_h100_ridge_is_about_295_flop_per_byte():
    # given the H100 SXM dense bf16 peak 989.5 TFLOP/s and 3.35 TB/s of HBM
    # when the ridge is F / BW
    ridge = ridge_flop_per_byte(989.5e12, 3.35e12)
    # then 989.5e12 / 3.35e12 = 295.37 FLOP/byte
    assert ridge == pytest.approx(295.373, abs=1e-3)


def test_llama_70b_bf16_weights_are_141_gb():
    # given Llama 3.1 70B (70.55e9 params) in bf16 (2 B/param)
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16")
    # then 70.55e9 * 2 = 141.1e9 B
    assert weights_bytes_total(c)[0] == pytest.approx(141.1e9, rel=1e-12)


def test_llama_70b_batch1_decode_on_one_h100_is_about_24_tok_s():
    # given 141.1e9 B of weights and 3.35e12 B/s, eta_mem = 1, no overhead
    # when every decode step streams every weight once
    tok_s = bandwidth_bound_tokens_per_s(141.1e9, 3.35e12, eta_mem=1.0)
    # then 3.35e12 / 141.1e9 = 23.74 tokens/s
    assert tok_s == pytest.approx(23.742, abs=1e-3)


def test_llama_70b_kv_per_token_and_per_128k_sequence():
    # given 80 layers, 8 KV heads, head_dim 128, bf16 cache
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16")
    per_token = kv_bytes_per_token(c)[0]
    # then 2 * 80 * 8 * 128 * 2 = 327,680 B/token
    assert per_token == 327_680
    # and 131,072 tokens * 327,680 = 42,949,672,960 B, about 43 GB
    assert per_token * 131_072 == 42_949_672_960


def test_using_attention_heads_instead_of_kv_heads_is_8x():
    # given the same model with num_kv_heads wrongly set to num_attention_heads (64)
    from dataclasses import replace

    wrong = replace(LLAMA_70B, num_kv_heads=LLAMA_70B.num_attention_heads)
    c = CandidateArrays.build([LLAMA_70B, wrong], H100, "bf16")
    right_b, wrong_b = kv_bytes_per_token(c)
    # then 2 * 80 * 64 * 128 * 2 = 2,621,440 B/token, 8x too big
    assert wrong_b == 2_621_440
    assert wrong_b / right_b == 8.0


def test_littles_law_50_rps_for_20_s_is_1000_in_flight():
    assert littles.in_flight(50.0, 20.0) == 1000.0


def test_8_gpus_at_2_50_serving_2000_tok_s():
    # given 8 GPUs at $2.50/GPU-h = $20/h, 2,000 tokens/s
    usd_h = cost.usd_per_hour(1, 8, 2.50)
    assert usd_h == 20.0
    # then 20 / 3600 / 2000 * 1e6 = $2.7778 per M tokens
    assert cost.usd_per_mtok(usd_h, 2000.0) == pytest.approx(2.7778, abs=1e-4)
    # and at 40% utilization 2.7778 / 0.4 = $6.9444
    assert cost.usd_per_mtok(usd_h, 2000.0, 0.4) == pytest.approx(6.9444, abs=1e-4)
    assert round(float(cost.usd_per_mtok(usd_h, 2000.0)), 2) == 2.78
    assert round(float(cost.usd_per_mtok(usd_h, 2000.0, 0.4)), 2) == 6.94


def test_deepseek_v3_mla_cache_is_4_66x_smaller_than_70b_gqa():
    # given DeepSeek-V3: 61 layers * (512 + 64) latent elements * 2 B (bf16 cache)
    c = CandidateArrays.build([DEEPSEEK_V3, LLAMA_70B], H100, "bf16", kv_precision="bf16")
    mla, gqa = kv_bytes_per_token(c)
    # then 61 * 576 * 2 = 70,272 B/token vs 327,680: 327,680 / 70,272 = 4.663x
    assert mla == 70_272
    assert gqa / mla == pytest.approx(4.663, abs=1e-3)
    assert 4.0 < gqa / mla < 5.0


def test_kv_per_token_array_is_numpy():
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16")
    assert isinstance(kv_bytes_per_token(c), np.ndarray)
