"""Decode and prefill step times: roofline terms, MoE routing, links, PP, precisions."""

from dataclasses import replace

import numpy as np
import pytest
from specs_catalog import B200, DEEPSEEK_V3, H100, L40S, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.precision import compute_precision, peak_flops
from sizing.specs import Calibration
from sizing.steptime import (
    decode_step,
    expected_distinct_experts,
    prefill_time,
    prompt_overhead_s,
    ring_allreduce_s,
    stage_cost,
)

EMBED_70B = 128256 * 8192


def test_expected_distinct_experts():
    # E (1 - (1 - k/E)^T): T=1 -> k; T=0 -> 0; dense -> 0; large T -> E
    e = expected_distinct_experts(np.array([256, 256, 0, 256]), 8, np.array([1, 0, 50, 4096]))
    assert e[0] == pytest.approx(8.0)
    assert e[1] == 0.0
    assert e[2] == 0.0
    assert e[3] == pytest.approx(256.0, abs=1e-9)
    # T=32: 256 * (1 - (248/256)^32) = 256 * (1 - 0.36204) = 163.31
    assert expected_distinct_experts(256, 8, 32) == pytest.approx(163.31, abs=0.01)


def test_batch1_decode_of_70b_is_weights_over_bandwidth():
    # given 70B bf16 on one H100 (step time does not need the memory fit), eta_mem 1
    cal = Calibration(eta_mem=1.0, step_overhead_s=0.0)
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16", calibration=cal)
    st = decode_step(c, 1.0, 0.0)
    # bytes: 141.1e9 minus the input embedding (1,050,673,152 * 2 B), read once
    streamed = 141.1e9 - 2 * EMBED_70B
    assert st.stage.weight_bytes[0] == pytest.approx(streamed)
    # memory-bound: 139.0e9 / 3.35e12 = 41.49 ms -> 24.1 tok/s
    assert st.stage.memory_bound[0]
    assert st.step_s[0] == pytest.approx(streamed / 3.35e12)


def test_decode_flops_are_2_pa_b_plus_attention():
    c = CandidateArrays.build(LLAMA_70B, H100, "bf16", tp=8)
    s = stage_cost(c, np.array([64.0]), np.array([2048.0]))
    # (2 * (70.55e9 - E) * 64 + 64 * 4 * 64 * 128 * 80 * 2048) / 8
    expected = (2 * (70.55e9 - EMBED_70B) * 64 + 64 * 4 * 64 * 128 * 80 * 2048) / 8
    assert s.flops_decode[0] == pytest.approx(expected)


def test_moe_decode_reads_distinct_experts_not_all():
    # DeepSeek-V3 fp8 TP8 at batch 1: 8 experts per MoE layer of 256
    c = CandidateArrays.build(DEEPSEEK_V3, H100, "fp8", tp=8)
    one = stage_cost(c, np.array([1.0]), np.array([0.0]))
    big = stage_cost(c, np.array([4096.0]), np.array([0.0]))
    per_expert = 3 * 7168 * 2048 * 1.0  # fp8
    expert_bytes_b1 = 8 * per_expert * 58 / 8
    expert_bytes_all = 256 * per_expert * 58 / 8
    nonexp = one.weight_bytes[0] - expert_bytes_b1
    assert big.weight_bytes[0] - nonexp == pytest.approx(expert_bytes_all, rel=1e-6)


def test_mla_decode_attention_is_absorbed_over_the_latent():
    c = CandidateArrays.build(DEEPSEEK_V3, H100, "fp8", tp=8)
    no_ctx = stage_cost(c, np.array([1.0]), np.array([0.0]))
    ctx = stage_cost(c, np.array([1.0]), np.array([1000.0]))
    # 2 * 128 * (2*512 + 64) FLOPs per cached token per layer, 61 layers, / TP8
    assert ctx.flops_decode[0] - no_ctx.flops_decode[0] == pytest.approx(
        2 * 128 * (2 * 512 + 64) * 61 * 1000 / 8
    )


def test_more_batch_never_shortens_the_step():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    b = np.array([1, 2, 8, 32, 128, 512, 1024], dtype=float)
    steps = decode_step(c.take(np.zeros(7, dtype=int)), b, 3000.0).step_s
    assert np.all(np.diff(steps) > 0)


def test_ring_allreduce_on_pcie_vs_nvlink():
    # one token of hidden 8192 in bf16 = 16,384 B over TP8, 70% link efficiency, 8 us latency
    # L40S PCIe 64 GB/s bidirectional -> 32e9 one way: 2*7/8*16384/(32e9*0.7) + 8e-6
    pcie = ring_allreduce_s(16384.0, 8, 32e9, 0.7, 8e-6)
    assert pcie == pytest.approx(2 * 7 / 8 * 16384 / 22.4e9 + 8e-6)
    # H100 NVLink 900 -> 450e9 one way
    nvl = ring_allreduce_s(16384.0, 8, 450e9, 0.7, 8e-6)
    assert nvl < pcie
    assert ring_allreduce_s(16384.0, 1, 450e9, 0.7, 8e-6) == 0.0


def test_tp8_prefill_on_l40s_pays_for_pcie():
    c = CandidateArrays.build(LLAMA_70B, [H100, L40S], "fp8", tp=8)
    s = stage_cost(c, np.array([0.0, 0.0]), np.array([0.0, 0.0]), 4096.0, 4096.0)
    # 160 all-reduces of 4096*8192*2 B: L40S 160 * (1.75 * 67.1e6 / 22.4e9 + 8e-6) = 0.840 s
    assert s.comm_s[1] == pytest.approx(160 * (1.75 * 4096 * 8192 * 2 / 22.4e9 + 8e-6))
    assert s.comm_s[1] > 10 * s.comm_s[0]


def test_pipeline_parallel_decode_model():
    # given 70B fp8, memory-bound, PP1 vs PP2 (PP keeps 2 micro-batches of B/2 in flight)
    cal = Calibration(step_overhead_s=0.0)
    big = replace(H100, memory_gb=200)  # step time does not care whether it fits
    c = CandidateArrays.build(LLAMA_70B, big, "fp8", pp=[1, 2], calibration=cal)
    b, ctx = 8.0, 4000.0
    st = decode_step(c, np.array([b, b]), np.array([ctx, ctx]))
    assert st.stage.memory_bound.all()
    bw = 3.35e12 * 0.8
    w = st.stage.weight_bytes[0]  # PP1 stage = whole model minus the input embedding
    kv = 2 * 80 * 8 * 128 * 1.0 * ctx  # one sequence's cache, all layers, fp8
    # PP1: W/BW + B*KV/BW. PP2: each tick a stage reads W/2 and (B/2) sequences' half-layer
    # cache; a token takes 2 ticks: 2 * (W/2 + (B/2) * KV/2) / BW + hop = W/BW + B*KV/(2 BW)
    assert st.step_s[0] == pytest.approx((w + b * kv) / bw)
    assert st.step_s[1] == pytest.approx((w + b * kv / 2) / bw + st.hop_s[1])
    # the hop: (B/2) * 8192 * 2 B over NVLink one way at 70% + 8 us
    assert st.hop_s[1] == pytest.approx(4 * 8192 * 2 / (450e9 * 0.7) + 8e-6)


def test_prefill_is_compute_bound_and_quadratic():
    cal = Calibration(step_overhead_s=0.0)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8, calibration=cal)
    pf = prefill_time(c.take(np.zeros(2, dtype=int)), np.array([4096.0, 8192.0]))
    assert not pf.stage.memory_bound.any()
    # flops per GPU for p tokens: (2 Pa' p + 2 p^2 n_h d L) / TP
    p = 8192.0
    flops = (2 * (70.55e9 - EMBED_70B) * p + 2 * p * p * 64 * 128 * 80) / 8
    assert pf.stage.flops_prefill[1] == pytest.approx(flops)
    assert pf.n_chunks.tolist() == [1, 1]


def test_long_prompt_is_chunked_by_the_token_budget():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8)
    pf = prefill_time(c, np.array([20000.0]))
    # chunk = 8192 tokens, ceil(20000 / 8192) = 3 chunks
    assert pf.chunk_tokens[0] == 8192
    assert pf.n_chunks[0] == 3


@pytest.mark.parametrize(
    ("gpu", "weights", "name", "tflops"),
    [
        (H100, "fp8", "fp8", 1979),
        (H100, "fp4", "fp8", 1979),  # no fp4 tensor cores on Hopper
        (B200, "fp4", "fp4", 9000),
        (H100, "int4", "bf16", 989.5),  # weight-only, dequantized to bf16
        (H100, "int8", "int8", 1979),
        (L40S, "int8", "bf16", 362.05),  # no int8 peak in the spec: bf16
        (H100, "bf16", "bf16", 989.5),
        (replace(H100, dense_tflops={"bf16": 312.0}), "fp4", "bf16", 312.0),
    ],
)
def test_compute_precision_fallbacks(gpu, weights, name, tflops):
    assert compute_precision(gpu, weights) == name
    assert peak_flops(gpu, weights) == tflops * 1e12


def test_a_dense_single_stage_row_costs_the_same_alone_as_beside_moe_and_pp_rows():
    # given Llama 70B fp8 TP4 (dense, one stage, no EP) alone, and the same row beside
    # DeepSeek-V3 with EP 8 and a PP 2 row (so every routing and hop term is evaluated)
    alone = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    mixed = CandidateArrays.build(
        [LLAMA_70B, DEEPSEEK_V3, LLAMA_70B], [H100, B200, H100], "fp8",
        tp=[4, 1, 4], pp=[1, 1, 2], ep=[1, 8, 1], dp=[1, 8, 1],
    )  # fmt: skip
    decodes = np.arange(0.0, 65.0)[:, None]
    # when a step with decodes and a prompt chunk is costed both ways
    one = decode_step(alone, decodes, 1500.0, 512.0, 700.0)
    many = decode_step(mixed, decodes, 1500.0, 512.0, 700.0)
    # then the dense row's short-cut terms (all zero) give bit-identical times
    np.testing.assert_array_equal(one.step_s[:, 0], many.step_s[:, 0])
    np.testing.assert_array_equal(one.stage.comm_s[:, 0], many.stage.comm_s[:, 0])
    # and the rows beside it do pay their all-to-all and pipeline hop
    assert np.all(many.stage.comm_s[:, 1] > 0) and np.all(many.hop_s[:, 2] > 0)


def test_step_overhead_grows_with_the_running_sequences():
    # given 1 ms fixed + 10 us per layer + 20 us per decoding sequence, 70B (80 layers)
    cal = Calibration(
        step_overhead_s=1e-3, step_overhead_per_layer_s=1e-5, step_overhead_per_seq_s=2e-5
    )
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8, calibration=cal)
    st = decode_step(c.take(np.zeros(3, dtype=int)), np.array([1.0, 64.0, 0.0]), 1000.0)
    # then a step of B sequences costs 1 ms + 80 * 10 us + B * 20 us on the host:
    # B = 1: 1.82 ms; B = 64: 1.8 + 1.28 = 3.08 ms; a prefill-only step (B = 0): 1.8 ms
    assert st.overhead_s == pytest.approx([1.82e-3, 3.08e-3, 1.8e-3])
    assert st.step_s[1] - st.step_s[0] > 63 * 2e-5


def test_a_scalar_rows_remembered_terms_stay_with_that_row():
    # given Llama 70B fp8 TP4's scalar row, costed once (it keeps its row-only terms)
    row = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4).scalar_row()
    decodes = np.arange(0.0, 65.0)
    first = decode_step(row, decodes, 1500.0, 512.0, 700.0).step_s
    # when a TP2 row is derived from it and both are costed
    tp2 = replace(row, tp=np.int64(2))
    again = decode_step(row, decodes, 1500.0, 512.0, 700.0).step_s
    derived = decode_step(tp2, decodes, 1500.0, 512.0, 700.0).step_s
    # then each has its own numbers: the derived row none of the TP4 row's terms
    fresh = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(derived, decode_step(fresh, decodes, 1500.0, 512.0, 700.0).step_s)
    assert not np.array_equal(derived, first)


def test_moe_layers_add_their_own_step_cost_and_more_on_prompt_steps():
    # given DeepSeek-V3 (61 layers, 58 of them MoE) on 8x B200 fp8, with 1 ms fixed, 20 us
    # per layer, 40 us per MoE layer on every step and 0.8 ms per MoE layer on prompt steps
    cal = Calibration(
        step_overhead_s=1e-3,
        step_overhead_per_layer_s=2e-5,
        step_overhead_per_moe_layer_s=4e-5,
        prompt_overhead_per_moe_layer_s=8e-4,
    )
    c = CandidateArrays.build(DEEPSEEK_V3, B200, "fp8", tp=8, calibration=cal)
    rows = c.take(np.zeros(2, dtype=int))
    # when one decode-only step and one carrying a 512-token chunk are costed
    st = decode_step(rows, np.array([8.0, 8.0]), 1000.0, np.array([0.0, 512.0]), 512.0)
    # then the decode step's host cost is 1 ms + 61 * 20 us + 58 * 40 us = 4.54 ms, and the
    # prompt step's adds 58 * 0.8 ms = 46.4 ms (eager MoE layers): 50.94 ms
    assert st.overhead_s == pytest.approx([4.54e-3, 50.94e-3])
    assert prompt_overhead_s(c) == pytest.approx([46.4e-3])
    # and a prompt prefilled alone pays it once per chunk
    alone = prefill_time(c, np.array([512.0]))
    assert alone.n_chunks == pytest.approx([1.0])
    no_prompt_cost = prefill_time(
        CandidateArrays.build(
            DEEPSEEK_V3,
            B200,
            "fp8",
            tp=8,
            calibration=replace(cal, prompt_overhead_per_moe_layer_s=0.0),
        ),
        np.array([512.0]),
    )
    assert alone.prefill_s - no_prompt_cost.prefill_s == pytest.approx([46.4e-3])


def test_a_dense_model_pays_no_moe_step_cost():
    # given Llama 70B (dense) with the MoE terms set
    cal = Calibration(
        step_overhead_s=1e-3,
        step_overhead_per_moe_layer_s=4e-5,
        prompt_overhead_per_moe_layer_s=8e-4,
    )
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8, calibration=cal)
    st = decode_step(c, np.array([4.0]), 1000.0, np.array([512.0]), 512.0)
    # then its host cost is the fixed 1 ms alone, on prompt steps too
    assert st.overhead_s == pytest.approx([1e-3])


def _ep_prefill_comm_s(gpu, precision: str, ep: int, tokens: float) -> float:
    """The all-to-all time of one prefill step of ``tokens`` per rank, TP1 x EP x DP=EP."""
    cal = Calibration(link_efficiency=0.5, allreduce_latency_s=1e-5)
    c = CandidateArrays.build(DEEPSEEK_V3, gpu, precision, tp=1, ep=ep, dp=ep, calibration=cal)
    return float(stage_cost(c, 0.0, 0.0, tokens, tokens).comm_s[0])


def test_ep_dispatch_sends_a_token_once_per_rank_in_8_bits():
    # given DeepSeek-V3 (hidden 7168, top-8 of 256 experts, 58 MoE layers) fp8 on B200, EP8,
    # 1,000 prompt tokens per rank; NVLink 1800/2 = 900 GB/s one way at efficiency 0.5
    # when the step's all-to-alls are timed
    comm = _ep_prefill_comm_s(B200, "fp8", 8, 1000.0)
    # then each token goes to r = 7 * (1 - (7/8)^8) = 4.5947 other ranks (not 8 * 7/8 = 7),
    # dispatched at 1 B (fp8) and combined at 2 B: 58 * (3 * 1000 * r * 7168 / 450e9 + 2e-5)
    r = 7 * (1 - (7 / 8) ** 8)
    assert r == pytest.approx(4.5947, abs=1e-4)
    assert comm == pytest.approx(58 * (3 * 1000 * r * 7168 / 450e9 + 2e-5))
    assert comm == pytest.approx(13.895e-3, rel=1e-4)
    # a bf16 checkpoint dispatches at 2 B: 4 B per element both ways instead of 3
    bf16 = _ep_prefill_comm_s(B200, "bf16", 8, 1000.0)
    assert bf16 == pytest.approx(58 * (4 * 1000 * r * 7168 / 450e9 + 2e-5))


def test_a_prompt_alone_spreads_its_routed_experts_over_every_ep_gpu():
    # given DeepSeek-V3 fp8 on B200 with attention-DP 8 and EP 8 (TP 1): a token runs
    # k * params_per_expert * L_moe = 8 * (3 * 7168 * 2048) * 58 = 20,434,649,088 routed params
    c = CandidateArrays.build(DEEPSEEK_V3, B200, "fp8", tp=1, ep=8, dp=8)
    routed = 8 * 3 * 7168 * 2048 * 58
    assert routed == 20_434_649_088
    # when a 1,000-token prompt step is costed under full load (every DP rank brings 1,000
    # tokens) and alone (the other ranks idle)
    full = stage_cost(c, 0.0, 0.0, 1000.0, 1000.0)
    alone = stage_cost(c, 0.0, 0.0, 1000.0, 1000.0, alone=True)
    # then alone each GPU runs 1/8 of the rank's routed GEMMs instead of all of them:
    # 2 * routed * 1000 * (1 - 1/8) = 3.5761e13 FLOPs fewer, the rest of the step the same
    saved = 2 * routed * 1000 * (1 - 1 / 8)
    assert saved == pytest.approx(3.5761e13, rel=1e-4)
    assert full.flops_prefill - alone.flops_prefill == pytest.approx([saved])
    assert alone.comm_s == pytest.approx(full.comm_s)
    assert alone.stage_s < full.stage_s
    # and a prompt prefilled alone (prefill_time) is that step
    lone = prefill_time(c, np.array([1000.0]))
    assert lone.stage.flops_prefill == pytest.approx(alone.flops_prefill)
    # while one DP rank (TP 8 x EP 8, or TP 8 x EP 2) already spreads them over its 8 GPUs
    for ep in (8, 2):
        tp8 = CandidateArrays.build(DEEPSEEK_V3, B200, "fp8", tp=8, ep=ep)
        same = stage_cost(tp8, 0.0, 0.0, 1000.0, 1000.0, alone=True)
        assert same.stage_s == pytest.approx(stage_cost(tp8, 0.0, 0.0, 1000.0, 1000.0).stage_s)


def test_ep_beyond_the_node_reaches_the_other_node_over_the_nic():
    # given H100 nodes of 8 GPUs (NVLink 450 GB/s one way, NIC 50 GB/s), EP16 over two nodes
    comm = _ep_prefill_comm_s(H100, "fp8", 16, 1000.0)
    # then r = 15 * (1 - (15/16)^8) = 6.3936 other ranks, 8 of the 15 behind the NIC: the NIC
    # side, (8/15) / (50e9 * 0.5) s per byte, is slower than NVLink's (7/15) / (450e9 * 0.5)
    r = 15 * (1 - (15 / 16) ** 8)
    per_byte = (8 / 15) / 25e9
    assert comm == pytest.approx(58 * (3 * 1000 * r * 7168 * per_byte + 2e-5))
    # and the same EP inside one 16-GPU domain moves at NVLink speed throughout
    domain = replace(H100, scale_up_domain_gpus=16)
    # (1 / 225e9 s per byte against (8/15) / 25e9: 4.8x less, the latencies aside)
    assert _ep_prefill_comm_s(domain, "fp8", 16, 1000.0) < comm / 4
