"""Step 2 of the chain: time of a decode step and of a prefill, by roofline plus calibration.

One engine step on one pipeline stage of one DP rank (per GPU, B = bytes, s = seconds):

``stage_s = max(weight_bytes / (BW * eta_mem), gemm_flops_dec / (F * eta_flop_decode)
                + gemm_flops_pre / (F * eta_flop_prefill))
          + max(kv_bytes / (BW * eta_mem), attn_flops_dec / (F_a * eta_flop_decode)
                + attn_flops_pre / (F_a * eta_flop_prefill)) + comm_s``

a roofline per kernel kind: the GEMMs stream the weights, attention streams the cache, in
kernels of their own, so a large batch whose GEMMs are compute-bound still pays its
attention's cache reads (one roofline over the whole step hid them behind the GEMMs' FLOPs:
in sample, TensorRT-LLM's offline throughput 10.8 -> 8.3 % median error). At small batches
both kinds are memory-bound and the sum is the old ``(weights + cache) / (BW * eta_mem)``.

Mixed precision: when a MoE checkpoint's routed experts have their own precision, their
FLOPs ``2 * k * params_per_expert * L_moe * T`` run at that precision's peak ``F_e``
(``precision.peak_flops``: fp4 experts on a B200 run fp4 GEMMs, on an H100 fp8 ones, int4
experts dequantize into bf16 GEMMs) and the rest at ``F``:
``flop_s = (flops - flops_e) / (F * eta) + flops_e / (F_e * eta)``.

Attention (QK^T and PV, decode and prefill) runs at the peak ``F_a`` of its KV cache's
precision (``precision.attention_peak_flops``: an fp8 cache fp8, a bf16 one bf16; no engine
runs fp4 attention), the weights' GEMMs at ``F``:
``flop_s = (flops - flops_a) / (F * eta) + flops_a / (F_a * eta)``. On Hopper with fp8 weights
and cache ``F_a = F``; NVFP4 weights on a B200 run 9 PFLOP/s GEMMs and 4.5 PFLOP/s attention.

Vision-language prompts (``sizing.vision``): each prefilled token carries
``vision_flops_per_prefill_token`` of encoder FLOPs (``2 * P_v * merge`` per image token,
spread over the prompt), added to ``flops_pre`` and timed at the bf16 peak ``F_bf16``.

bytes
    weights touched: non-expert weights minus the input embedding table (only B rows of it
    are read; a tied table is the LM head and is read in full), plus for MoE the expected
    distinct routed experts ``E_distinct = E * (1 - (1 - k/E)^T)`` per MoE layer for the T
    tokens of the step (not all experts, not only k); plus ``B * kv_seq_gpu(c)`` of cache
    (windows respected, see memory.py).
flops
    ``2 * P_a' * T`` (``P_a'`` = active params minus the untied input embedding, which is a
    lookup) plus attention: decode ``4 * n_h * d`` FLOPs per cached token per layer (MLA
    decode runs absorbed over the latent: ``2 * n_h * (2 * r + rope)``); prefill of a
    p-token prompt is causal, ``2 * p^2 * n_h * d`` per full layer, windows capped.
comm_s
    TP: 2 ring all-reduces per layer, ``2 (TP-1)/TP * T * hidden * 2 B / (link_one_way *
    link_efficiency) + latency`` each; EP: a dispatch (8-bit where the experts compute in
    fp8/fp4) and a bf16 combine per MoE layer, each token once per other rank holding one
    of its experts (``ep_alltoall_s``); both on the scale-up link (EP beyond the domain
    reaches the ranks outside it over the scale-out NIC).

Pipeline parallelism: decode keeps PP micro-batches of ``B / PP`` sequences in flight (vLLM's
virtual engines), so each stage reads its ``1/PP`` of the weights for ``B / PP`` sequences and
a token crosses all stages: ``step_s = PP * stage_s + (PP - 1) * hop_s + overhead_s`` with
``overhead_s = step_overhead_s + step_overhead_per_layer_s * num_layers
+ step_overhead_per_moe_layer_s * num_moe_layers + step_overhead_per_seq_s * B`` (host-side
cost: the scheduler loop, kernel launches and their gaps, which grow with the layers and more
with a MoE layer's router and expert kernels, and per running sequence its bookkeeping and
sampling); a step carrying prompt tokens runs eagerly and adds
``prompt_overhead_per_moe_layer_s * num_moe_layers`` (``prompt_overhead_s``).
In steady decode there is no bubble. Per token this costs ``W / BW + B * KV / (PP * BW)``:
each micro-batch re-reads the weights (PP does not shrink the weight term, TP does) while the
cache is spread over PP GPUs' bandwidth; no all-reduces, one activation hop per boundary.
A single prefill is not split: its chunks pipeline through the stages,
``(n_chunks + PP - 1) * stage_s(chunk)``. DP ranks run independent batches in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.candidates import CandidateArrays, row_constant
from sizing.lora import lora_step_s, serves_adapters
from sizing.memory import kv_bytes_per_sequence_per_gpu, nonexpert_weight_bytes
from sizing.precision import PRECISIONS
from sizing.speculative import drafting_s, drafts, verify_tokens_per_sequence

ACTIVATION_BYTES = 2.0  # bf16 activations on the wire
#: expert precisions whose activations are quantised to 8 bits before the dispatch
_LOW_PRECISION_DISPATCH = tuple(PRECISIONS.index(p) for p in ("fp8", "fp4"))


# ---------------------------------------------------------------------------- pure bounds
def ridge_flop_per_byte(peak_flops: np.ndarray, hbm_bytes_s: np.ndarray) -> np.ndarray:
    """Roofline ridge ``F / BW`` (FLOP/byte): H100 bf16 989.5e12 / 3.35e12 = 295.4."""
    return np.asarray(peak_flops) / np.asarray(hbm_bytes_s)


def bandwidth_bound_tokens_per_s(
    weight_bytes: np.ndarray, hbm_bytes_s: np.ndarray, eta_mem: float | np.ndarray = 1.0
) -> np.ndarray:
    """Batch-1 decode bound ``BW * eta_mem / weight_bytes`` (tokens/s per sequence):
    3.35e12 / 141.1e9 = 23.7 tok/s for Llama 3.1 70B bf16 on one H100."""
    return np.asarray(hbm_bytes_s) * eta_mem / np.asarray(weight_bytes)


def expected_distinct_experts(
    num_experts: np.ndarray, experts_per_token: np.ndarray, tokens: np.ndarray
) -> np.ndarray:
    """Expected routed experts hit by T tokens in one MoE layer, ``E * (1 - (1 - k/E)^T)``.

    Uniform independent routing; 0 for a dense model (E = 0). DeepSeek-V3 (E=256, k=8):
    T=1 -> 8, T=32 -> 163.3, T=256 -> 255.9.
    """
    e = np.asarray(num_experts, dtype=np.float64)
    safe_e = np.where(e > 0, e, 1.0)
    miss = np.power(1.0 - np.asarray(experts_per_token) / safe_e, np.asarray(tokens))
    return np.where(e > 0, e * (1.0 - miss), 0.0)


def ring_allreduce_s(
    message_bytes: np.ndarray,
    ranks: np.ndarray,
    link_bytes_s: np.ndarray,
    link_efficiency: np.ndarray,
    latency_s: np.ndarray,
) -> np.ndarray:
    """One ring all-reduce: ``2 (n-1)/n * bytes / (link_one_way * eff) + latency`` (s); 0 at n=1."""
    n = np.asarray(ranks, dtype=np.float64)
    t = 2.0 * (n - 1.0) / n * message_bytes / (link_bytes_s * link_efficiency) + latency_s
    return np.where(n > 1, t, 0.0)


# ---------------------------------------------------------------------------- one stage
@dataclass(frozen=True)
class StageCost:
    """One forward pass of one pipeline stage on one GPU of one DP rank (per GPU)."""

    weight_bytes: np.ndarray  # B streamed from HBM
    kv_bytes: np.ndarray  # B of cache read
    flops_decode: np.ndarray  # FLOP
    flops_prefill: np.ndarray  # FLOP
    mem_s: np.ndarray  # bytes / (BW * eta_mem)
    flop_s: np.ndarray  # flops at the calibrated efficiencies
    comm_s: np.ndarray  # TP all-reduces + EP all-to-alls
    #: max(mem_s - attention_mem_s, flop_s - attention_flop_s)
    #: + max(attention_mem_s, attention_flop_s) + comm_s
    stage_s: np.ndarray
    #: the routed experts' share of flops_decode / flops_prefill, timed at the experts' own
    #: peak (0 unless a MoE row's experts compute at another precision than its weights)
    flops_expert_decode: np.ndarray | float = 0.0
    flops_expert_prefill: np.ndarray | float = 0.0
    #: the routed experts' part of weight_bytes (at their own bytes per param)
    expert_weight_bytes: np.ndarray | float = 0.0
    #: attention's share of flops_decode / flops_prefill (QK^T and PV), timed at the
    #: attention peak ``F_a`` (the KV cache's precision's; ``F`` where they are the same)
    flops_attention_decode: np.ndarray | float = 0.0
    flops_attention_prefill: np.ndarray | float = 0.0
    #: attention's kernels on their own: the cache read (kv_bytes / (BW * eta_mem)) and its
    #: FLOPs at ``F_a`` (parts of mem_s and flop_s)
    attention_mem_s: np.ndarray | float = 0.0
    attention_flop_s: np.ndarray | float = 0.0

    @property
    def bytes(self) -> np.ndarray:
        return self.weight_bytes + self.kv_bytes

    @property
    def memory_bound(self) -> np.ndarray:
        return self.mem_s >= self.flop_s


@row_constant
def untied_embedding_params(c: CandidateArrays) -> np.ndarray:
    """Input-embedding params that a step does not stream (a tied table is the LM head)."""
    return np.where(c.tied_embeddings, 0.0, c.embedding_params)


@row_constant
def streamed_nonexpert_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """Non-expert bytes one GPU reads per step: ``(nonexpert - embedding) / (TP * PP)`` (B)."""
    embed = untied_embedding_params(c) * c.embedding_bytes_per_param
    return (nonexpert_weight_bytes(c) - embed) / (c.tp * c.pp)


def streamed_expert_bytes_per_gpu(
    c: CandidateArrays, tokens: np.ndarray, alone: bool = False
) -> np.ndarray:
    """Routed-expert bytes one GPU reads for ``tokens`` per DP rank and stage (B).

    With EP the experts of all DP ranks' tokens live on the EP group: ``T = tokens * DP``
    (``T = tokens`` when the rank is ``alone``: the other DP ranks bring none),
    ``E_distinct(T) * params_per_expert * b_e * (L_moe / PP) / EP`` (``b_e``: the experts'
    bytes per param, ``b_w`` unless the checkpoint mixes precisions); without EP each rank
    holds TP-sharded copies and only its own tokens route there.
    """
    if not _has_experts(c):  # dense rows only: skip the routing terms (all 0)
        return _zeros(tokens, c.tp)
    group_tokens = tokens if alone else np.where(c.ep > 1, tokens * c.dp, tokens)
    distinct = expected_distinct_experts(c.num_experts, c.experts_per_token, group_tokens)
    shards = np.where(c.ep > 1, c.ep, c.tp)
    return (
        distinct
        * c.params_per_expert
        * c.expert_bytes_per_param
        * c.num_moe_layers
        / (c.pp * shards)
    )


@row_constant
def attention_flops_per_context_token(c: CandidateArrays, absorbed_mla: bool) -> np.ndarray:
    """FLOPs per query token per cached token per layer: ``4 * n_h * d`` (QK^T and PV);
    absorbed MLA decode attends over the latent, ``2 * n_h * (r + rope) + 2 * n_h * r``."""
    standard = 4.0 * c.num_attention_heads * c.head_dim
    if not absorbed_mla:
        return standard
    mla = 2.0 * c.num_attention_heads * (2.0 * c.kv_lora_rank + c.qk_rope_head_dim)
    return np.where(c.kv_lora_rank > 0, mla, standard)


def prefill_mean_context(c: CandidateArrays, prompt_tokens: np.ndarray) -> tuple:
    """Mean attended length per prompt token, (full layers, sliding layers) (tokens).

    Causal: ``p / 2``; a window w caps it: ``(min(p, w)^2 / 2 + max(p - w, 0) * w) / p``.
    """
    p = np.maximum(np.asarray(prompt_tokens, dtype=np.float64), 1.0)
    w = np.where(c.sliding_window > 0, c.sliding_window, p)
    head = np.minimum(p, w)
    windowed = (0.5 * head * head + np.maximum(p - w, 0.0) * w) / p
    return 0.5 * p, windowed


def hbm_read_s(c: CandidateArrays, bytes_per_gpu: np.ndarray) -> np.ndarray:
    """Time to read ``bytes_per_gpu`` from HBM at the achieved bandwidth, ``B / (BW * eta_mem)``
    (s)."""
    return bytes_per_gpu / (c.hbm_bytes_s * c.eta_mem)


def weight_stream_s(c: CandidateArrays, tokens: np.ndarray) -> np.ndarray:
    """A stage's weight read for ``tokens`` per DP rank (s): the non-expert weights and the
    routed experts those tokens hit (``stage_cost``'s GEMM memory time, the same numbers)."""
    expert_bytes = streamed_expert_bytes_per_gpu(c, tokens)
    return hbm_read_s(c, streamed_nonexpert_bytes_per_gpu(c) + expert_bytes)


def stage_cost(
    c: CandidateArrays,
    decode_tokens: np.ndarray,
    decode_context: np.ndarray,
    prefill_tokens: np.ndarray | float = 0.0,
    prompt_tokens: np.ndarray | float = 0.0,
    alone: bool = False,
) -> StageCost:
    """Roofline cost of one stage forward pass per GPU.

    Parameters
    ----------
    decode_tokens : sequences decoding in this micro-batch of one DP rank (tokens)
    decode_context : their mean context (tokens)
    prefill_tokens : prompt tokens riding in the same pass (chunked prefill) (tokens)
    prompt_tokens : length of the prompts those prefill tokens belong to (tokens)
    alone : this DP rank's prompt tokens are the EP group's only work (a prompt prefilled
        alone; decode tokens keep the full-load convention). By default every DP rank brings
        as many tokens, so each GPU runs ``1 / TP`` of its own rank's routed-expert GEMMs'
        worth (``1 / EP`` of the group's ``DP`` ranks' when ``EP = TP * DP``); alone, the
        rank's routed GEMMs run on all ``max(EP, TP)`` GPUs at once. Example: DeepSeek-R1 on
        attention-DP 8, EP 8 (TP 1): the routed experts, 20.4e9 of the 37e9 active params,
        take 1/8 of the time they take under full load; with one DP rank nothing changes.
    """
    seqs = np.asarray(decode_tokens, dtype=np.float64)
    # speculative decoding verifies k + 1 tokens per sequence (1 when off): FLOPs and routed
    # tokens grow with them, each sequence's cache is still read once
    dec = seqs * verify_tokens_per_sequence(c)
    pre = np.asarray(prefill_tokens, dtype=np.float64)
    tokens = dec + pre
    shard = c.tp * c.pp

    expert_bytes = streamed_expert_bytes_per_gpu(c, tokens, alone)
    weight_bytes = streamed_nonexpert_bytes_per_gpu(c) + expert_bytes
    kv_bytes = seqs * kv_bytes_per_sequence_per_gpu(c, decode_context)

    ctx = np.asarray(decode_context, dtype=np.float64)
    ctx_win = np.minimum(ctx, np.where(c.sliding_window > 0, c.sliding_window, ctx))
    attended_dec = c.full_layers * ctx + c.sliding_layers * ctx_win
    mean_full, mean_win = prefill_mean_context(c, prompt_tokens)
    attended_pre = c.full_layers * mean_full + c.sliding_layers * mean_win
    matmul_params = c.active_params - untied_embedding_params(c)
    gemm_dec = 2.0 * matmul_params * dec / shard
    gemm_pre = 2.0 * matmul_params * pre / shard
    # GPUs sharing a token's routed-expert GEMMs (see ``alone``)
    routed_shard = np.maximum(c.ep, c.tp) * c.pp if alone else shard
    if alone and _expert_parallel(c):
        spread = 2.0 * routed_active_params(c) * pre * (1.0 / routed_shard - 1.0 / shard)
        gemm_pre = gemm_pre + spread
    attention_dec = dec * attention_flops_per_context_token(c, True) * attended_dec / shard
    attention_pre = pre * attention_flops_per_context_token(c, False) * attended_pre / shard
    flops_dec = gemm_dec + attention_dec
    flops_pre = gemm_pre + attention_pre

    # a roofline per kernel kind: the GEMMs stream the weights, attention reads the cache in
    # kernels of its own (at its cache's precision's peak), so a step whose GEMMs are
    # compute-bound (a large batch) and whose attention is memory-bound pays for both
    gemm_mem_s = hbm_read_s(c, weight_bytes)
    attention_mem_s = hbm_read_s(c, kv_bytes)
    gemm_flop_s = gemm_dec / (c.peak_flops * c.eta_flop_decode) + gemm_pre / (
        c.peak_flops * c.eta_flop_prefill
    )
    attention_flop_s = (
        attention_dec / c.eta_flop_decode + attention_pre / c.eta_flop_prefill
    ) / c.attention_peak_flops
    if _has_vision(c):
        # vision-language prompts: the encoder's FLOPs ride with the prefill, at bf16
        vision = pre * c.vision_flops_per_prefill_token / shard
        flops_pre = flops_pre + vision
        gemm_flop_s = gemm_flop_s + vision / (c.vision_peak_flops * c.eta_flop_prefill)
    expert_dec = expert_pre = 0.0
    if _experts_at_own_peak(c):
        # the routed experts' GEMMs run at their own precision's peak: re-time that share
        own = (c.num_experts > 0) & (c.expert_peak_flops != c.peak_flops)
        routed = np.where(own, 2.0 * routed_active_params(c) / shard, 0.0)
        routed_pre = routed * (shard / routed_shard) if alone else routed
        expert_dec, expert_pre = routed * dec, routed_pre * pre
        rescale = np.where(own, 1.0 / c.expert_peak_flops - 1.0 / c.peak_flops, 0.0)
        gemm_flop_s = (
            gemm_flop_s
            + (expert_dec / c.eta_flop_decode + expert_pre / c.eta_flop_prefill) * rescale
        )
    comm_s = tp_allreduce_s(c, tokens) + ep_alltoall_s(c, tokens)
    mem_s = gemm_mem_s + attention_mem_s
    flop_s = gemm_flop_s + attention_flop_s
    stage_s = np.maximum(gemm_mem_s, gemm_flop_s) + np.maximum(attention_mem_s, attention_flop_s)
    if adds_communication(c):  # else comm_s is all 0: skip adding it
        stage_s = stage_s + comm_s
    return StageCost(
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        flops_decode=flops_dec,
        flops_prefill=flops_pre,
        mem_s=mem_s,
        flop_s=flop_s,
        comm_s=comm_s,
        stage_s=stage_s,
        flops_expert_decode=expert_dec,
        flops_expert_prefill=expert_pre,
        expert_weight_bytes=expert_bytes,
        flops_attention_decode=attention_dec,
        flops_attention_prefill=attention_pre,
        attention_mem_s=attention_mem_s,
        attention_flop_s=attention_flop_s,
    )


@row_constant
def routed_active_params(c: CandidateArrays) -> np.ndarray:
    """Routed-expert params one token runs through: ``k * params_per_expert * L_moe``
    (gpt-oss-120b: 4 x 24.9e6 x 36 = 3.58e9 of its 5.1e9 active)."""
    return c.experts_per_token * c.params_per_expert * c.num_moe_layers


@row_constant
def _experts_at_own_peak(c: CandidateArrays) -> bool:
    """Any MoE row whose experts compute at another peak than the rest of its weights."""
    moe = c.num_experts > 0
    return bool((moe & (c.expert_peak_flops != c.peak_flops)).any())


@row_constant
def _has_experts(c: CandidateArrays) -> bool:
    """Any MoE row (else the routing terms are all 0)."""
    return bool((c.num_experts > 0).any())


@row_constant
def _tensor_parallel(c: CandidateArrays) -> bool:
    """Any row with TP > 1 (else no all-reduce)."""
    return bool((c.tp > 1).any())


@row_constant
def _expert_parallel(c: CandidateArrays) -> bool:
    """Any row with EP > 1 (else no all-to-all)."""
    return bool((c.ep > 1).any())


@row_constant
def _pipelined(c: CandidateArrays) -> bool:
    """Any row with PP > 1 (else no hop, and a step is its one stage)."""
    return bool((c.pp > 1).any())


def has_experts(c: CandidateArrays) -> bool:
    """Whether any row routes tokens to experts (MoE)."""
    return _has_experts(c)


def adds_communication(c: CandidateArrays) -> bool:
    """Whether a step adds ``comm_s`` (TP all-reduces or EP all-to-alls on some row)."""
    return _tensor_parallel(c) or _expert_parallel(c)


@row_constant
def _has_vision(c: CandidateArrays) -> bool:
    """Any row whose prompts carry images (else no encoder FLOPs)."""
    return bool((c.vision_flops_per_prefill_token > 0).any())


def _zeros(tokens, column: np.ndarray) -> np.ndarray | float:
    """The all-zero result a term's ``np.where(..., 0.0)`` gives, at the same shape: the
    step-time memo calls these per grid cell, and most rows are dense, single-stage, no EP.

    A scalar row (``scalar_row``, the memo's) gets a plain 0.0: only its step times are
    read, and they keep the tokens' shape through the FLOP time, so the weight bytes and
    memory time of a dense row stay at the decodes x context shape instead of the whole
    step grid's (two passes over the grid fewer per core call)."""
    if np.ndim(column) == 0:
        return 0.0
    return np.zeros(np.broadcast(tokens, column).shape)


def tp_allreduce_s(c: CandidateArrays, tokens: np.ndarray) -> np.ndarray:
    """Two all-reduces per layer of this stage over the scale-up link (s)."""
    if not _tensor_parallel(c):  # one GPU per stage on every row: no all-reduce (all 0)
        return _zeros(tokens, c.tp)
    message = tokens * c.hidden_size * ACTIVATION_BYTES
    one = ring_allreduce_s(message, c.tp, c.link_bytes_s, c.link_efficiency, c.allreduce_latency_s)
    return 2.0 * (c.num_layers / c.pp) * one


@row_constant
def ep_remote_ranks_per_token(c: CandidateArrays) -> np.ndarray:
    """Other EP ranks one token is sent to per MoE layer, ``(EP - 1) * (1 - (1 - 1/EP)^k)``.

    A dispatch sends a token once to each rank holding one of its ``k`` experts, not once per
    expert, and the combine returns one partial sum per rank (DeepEP's dispatch layout counts
    ``num_tokens_per_rank`` and ``is_token_in_rank``: deepseek-ai/DeepEP docs/legacy.md,
    "Example use in model training or inference prefilling"); with the experts spread evenly
    over the EP ranks, each other rank is hit with probability ``1 - (1 - 1/EP)^k``.
    DeepSeek-V3 (k = 8): EP 4 -> 2.70 of 3 other ranks, EP 8 -> 4.59 of 7, EP 72 -> 7.52 of
    71; Mixtral (k = 2) on EP 8 -> 1.64.
    """
    ep = np.maximum(np.asarray(c.ep, dtype=np.float64), 1.0)
    return (ep - 1.0) * (1.0 - np.power(1.0 - 1.0 / ep, c.experts_per_token))


@row_constant
def ep_dispatch_bytes_per_element(c: CandidateArrays) -> np.ndarray:
    """Bytes per hidden element a dispatch ships: 1 where the experts compute in 8 bits or
    fewer (fp8, NVFP4: the activations are quantised before they are sent), else 2 (bf16).
    The combine returns bf16 (``ACTIVATION_BYTES``). DeepEP is measured and run this way,
    "FP8 dispatching and BF16 combining" (deepseek-ai/DeepEP README.md, "Performance")."""
    low = np.isin(c.expert_precision_code, _LOW_PRECISION_DISPATCH)
    return np.where(low, 1.0, ACTIVATION_BYTES)


def ep_alltoall_s(c: CandidateArrays, tokens: np.ndarray) -> np.ndarray:
    """Dispatch + combine per MoE layer of this stage (s).

    Each GPU ships its ``tokens / TP`` once to each other rank holding one of their experts
    (``ep_remote_ranks_per_token``): ``r * hidden * b_d`` B out and ``r * hidden * 2 B`` back
    per token (``b_d``: ``ep_dispatch_bytes_per_element``), each way at the link's calibrated
    efficiency plus one latency. When EP spans beyond the scale-up domain the share
    ``(EP - D) / (EP - 1)`` of the destinations sits behind the scale-out NIC, the rest on
    the scale-up link, both moving at once: the slower of the two sets the time.

    Worked: DeepSeek-V3 fp8 (hidden 7168, k 8), 7,373 tokens per rank, EP 8 in one NVLink
    domain: ``r = 4.5947``; dispatch ``7373 * 4.5947 * 7168 * 1 B = 242.8 MB``, combine 485.7 MB
    (counting every expert copy, in bf16 both ways, gives 2.0x that; at EP 4, 3.0x).
    """
    if not _expert_parallel(c):  # no expert parallelism on any row: no all-to-all (all 0)
        return _zeros(tokens, c.ep)
    per_layer = tokens / c.tp * ep_alltoall_s_per_token(c) + 2.0 * c.allreduce_latency_s
    return np.where(c.ep > 1, (c.num_moe_layers / c.pp) * per_layer, 0.0)


@row_constant
def ep_alltoall_s_per_token(c: CandidateArrays) -> np.ndarray:
    """Link time of one token's dispatch and combine in one MoE layer, latencies aside (s):
    ``r * hidden * (b_d + 2 B)`` at the slower of the scale-up share and the NIC share of the
    destinations (see ``ep_alltoall_s``). A row's own constant: the simulator's step-time
    memo calls ``ep_alltoall_s`` ~1,000 times per row."""
    ep = np.maximum(np.asarray(c.ep, dtype=np.float64), 1.0)
    outside = np.clip((ep - c.scale_up_domain_gpus) / np.maximum(ep - 1.0, 1.0), 0.0, 1.0)
    inside_s = (1.0 - outside) / (c.link_bytes_s * c.link_efficiency)
    outside_s = outside / (c.scale_out_bytes_s * c.link_efficiency)
    bytes_per_token = (
        ep_remote_ranks_per_token(c)
        * c.hidden_size
        * (ep_dispatch_bytes_per_element(c) + ACTIVATION_BYTES)
    )
    return bytes_per_token * np.maximum(inside_s, outside_s)


def pp_hop_s(c: CandidateArrays, tokens: np.ndarray) -> np.ndarray:
    """Activations across one stage boundary, ``T * hidden * 2 B / (link * eff) + latency``;
    on the NIC when the instance spans beyond the scale-up domain (s)."""
    if not _pipelined(c):  # one stage on every row: no hop (all 0)
        return _zeros(tokens, c.pp)
    inside = c.tp * c.pp * c.dp <= c.scale_up_domain_gpus
    link = np.where(inside, c.link_bytes_s, c.scale_out_bytes_s)
    t = tokens * c.hidden_size * ACTIVATION_BYTES / (link * c.link_efficiency)
    return np.where(c.pp > 1, t + c.allreduce_latency_s, 0.0)


# ---------------------------------------------------------------------------- engine steps
def step_overhead_total_s(c: CandidateArrays, sequences: np.ndarray | float = 0.0) -> np.ndarray:
    """Host cost of one engine step of ``sequences`` decoding sequences (s):

    ``step_overhead_s + step_overhead_per_layer_s * L + step_overhead_per_moe_layer_s * L_moe
    + step_overhead_per_seq_s * B``, a fixed part (scheduler loop), one that grows with the
    kernels a step launches, i.e. with the layers (8B: 32 layers, 405B: 126) and more with
    the MoE layers (DeepSeek-V3: 58 of 61), and one per running sequence (its slot's
    bookkeeping, sampling and detokenizing its token). A prefill-only step has B = 0.
    """
    fixed = c.step_overhead_s + c.step_overhead_per_layer_s * c.num_layers
    fixed = fixed + c.step_overhead_per_moe_layer_s * c.num_moe_layers
    return fixed + c.step_overhead_per_seq_s * np.asarray(sequences, dtype=np.float64)


def prompt_overhead_s(c: CandidateArrays) -> np.ndarray:
    """Extra host cost of a step that carries prompt tokens (s):
    ``prompt_overhead_per_moe_layer_s * num_moe_layers``. Decode-only steps replay CUDA
    graphs; prompt steps run eagerly, and a MoE layer's router, permutes and expert launches
    then cost host time (0 for a dense model)."""
    return c.prompt_overhead_per_moe_layer_s * c.num_moe_layers


@dataclass(frozen=True)
class StepTime:
    """A full engine step (all PP stages) for one DP rank; ``stage`` holds the per-GPU parts."""

    stage: StageCost
    hop_s: np.ndarray  # one pipeline hop
    overhead_s: np.ndarray  # fixed per step (scheduler, launches, sampling)
    step_s: np.ndarray  # PP * stage_s + (PP - 1) * hop_s + overhead_s (+ draft_s)
    #: added kernels outside the base model's passes: speculative drafting (k drafter passes,
    #: speculative.py) and batched LoRA adapters (lora.py)
    draft_s: np.ndarray | float = 0.0


def decode_step(
    c: CandidateArrays,
    batch_per_rank: np.ndarray,
    context_tokens: np.ndarray,
    prefill_tokens_per_rank: np.ndarray | float = 0.0,
    prompt_tokens: np.ndarray | float = 0.0,
    alone: bool = False,
) -> StepTime:
    """Decode step of ``batch_per_rank`` sequences at mean ``context_tokens``, optionally
    carrying ``prefill_tokens_per_rank`` chunked-prefill tokens (s); ``alone``: the other DP
    ranks of the EP group bring no tokens (``stage_cost``).

    ``step_s = PP * stage_s(B / PP, c, P / PP) + (PP - 1) * hop_s + overhead_s``
    (``step_overhead_total_s``).
    """
    b = np.asarray(batch_per_rank, dtype=np.float64)
    pre = np.asarray(prefill_tokens_per_rank, dtype=np.float64)
    stage = stage_cost(c, b / c.pp, context_tokens, pre / c.pp, prompt_tokens, alone)
    hop = pp_hop_s(c, (b * verify_tokens_per_sequence(c) + pre) / c.pp)
    overhead = step_overhead_total_s(c, b)
    if np.any(pre > 0):  # decode-only grids skip the all-zero term
        overhead = overhead + np.where(pre > 0, prompt_overhead_s(c), 0.0)
    step = _pipeline_s(c, stage.stage_s, hop) + overhead
    draft = 0.0
    if drafts(c) or serves_adapters(c):  # else both are all 0: skip adding them
        draft = drafting_s(c, b, context_tokens) + lora_step_s(
            c, b * verify_tokens_per_sequence(c) + pre
        )
        step = step + draft
    return StepTime(stage=stage, hop_s=hop, overhead_s=overhead, step_s=step, draft_s=draft)


def _pipeline_s(c: CandidateArrays, stage_s: np.ndarray, hop_s: np.ndarray) -> np.ndarray:
    """``PP * stage_s + (PP - 1) * hop_s`` (s): ``stage_s`` itself when every row has one
    stage (``1 * x + 0`` is ``x`` exactly), two passes fewer over a step-time grid."""
    if not _pipelined(c):
        return stage_s
    return c.pp * stage_s + (c.pp - 1) * hop_s


@dataclass(frozen=True)
class PrefillTime:
    """A prompt prefilled alone on one DP rank (no decode batch riding along)."""

    chunk_tokens: np.ndarray
    n_chunks: np.ndarray
    stage: StageCost  # one chunk through one stage
    prefill_s: np.ndarray  # (n_chunks + PP - 1) * (stage_s + hop) + n_chunks * overhead


def prefill_time(c: CandidateArrays, prompt_tokens: np.ndarray) -> PrefillTime:
    """Time to prefill a ``prompt_tokens`` prompt alone, in chunks of the token budget (s).

    ``n = ceil(p / min(p, max_num_batched_tokens))``;
    ``prefill_s = (n + PP - 1) * (stage_s(chunk) + hop_s) + n * overhead_s`` where a
    stage holds ``1/PP`` of the layers and ``stage_s`` is compute-bound for any real chunk.
    """
    p = np.maximum(np.asarray(prompt_tokens, dtype=np.float64), 1.0)
    chunk = np.minimum(p, c.max_num_batched_tokens)
    n_chunks = np.ceil(p / chunk)
    # the whole chunk crosses every stage; no other DP rank shares its experts' GPUs
    stage = stage_cost(c, 0.0, 0.0, chunk, p, alone=True)
    hop = pp_hop_s(c, chunk)
    overhead = step_overhead_total_s(c) + prompt_overhead_s(c)
    total = (n_chunks + c.pp - 1) * (stage.stage_s + hop) + n_chunks * overhead
    return PrefillTime(chunk_tokens=chunk, n_chunks=n_chunks, stage=stage, prefill_s=total)
