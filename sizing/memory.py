"""Step 1 of the chain: does a candidate fit, and how many users does its KV budget hold?

All functions take a ``CandidateArrays`` and return arrays (one value per row). GB = 1e9 B.

Weights
-------
``weights_bytes = (P - P_hp) * b_w + P_hp * max(b_w, 2)`` where ``P_hp`` (input embedding + a
separate LM head) stays in bf16 in quantized checkpoints (vLLM and ModelOpt keep both
unquantized; Llama 3.1 70B fp8 then loads as 72.7 GB, vLLM's "67.7 GiB").
Mixed-precision checkpoints give components their own bytes: the routed experts ``P_e * b_e``
and the embedding/LM head ``P_hp * b_emb`` (``b_emb`` replaces ``max(b_w, 2)``), so
``(P - P_hp - P_e) * b_w + P_hp * b_emb + P_e * b_e``.
Per GPU: the non-expert part splits over TP*PP; the routed experts
(``P_routed = E * params_per_expert * num_moe_layers``) over EP*PP when EP > 1, else TP*PP.

KV cache
--------
Per token per layer, whole model: GQA/MHA ``2 * n_kv * d`` elements, MLA ``kv_lora_rank +
qk_rope_head_dim``. Per GPU: GQA heads split while ``n_kv >= TP`` and are copied below that
(``max(n_kv / TP, 1)`` heads per rank); the MLA latent is replicated on every TP rank; PP
splits layers. A sequence at context ``c`` holds
``(full_layers * c + sliding_layers * min(c, window)) * per_layer + linear_layers * state``.

Budget
------
``kv_budget = HBM * gpu_memory_utilization - weights - workspace - runtime_overhead`` per GPU,
``workspace = max_num_batched_tokens * hidden * workspace_bytes_per_token_hidden`` (24 B:
about 12 hidden-wide bf16 tensors alive at the peak of a layer during a full-budget prefill
step; not divided by TP, since the residual stream is replicated on every rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.candidates import CandidateArrays, row_constant

GB = 1e9

# Reason codes, in the order they are checked (the first failing one is reported).
OK = 0
R_NUM_GPUS = 1
R_TP_HEADS = 2
R_TP_KV_HEADS = 3
R_TP_DOMAIN = 4
R_EP = 5
R_PP_LAYERS = 6
R_CONTEXT = 7
R_NO_PEAK = 8
R_WEIGHTS = 9
R_NO_KV_ROOM = 10
R_ONE_SEQUENCE = 11
# Engine-setting codes (numbered after the others so stored codes keep their meaning; each
# is checked next to the rule it refines): a request longer than ``max_model_len``, and a
# ``max_model_len`` sequence that the KV budget cannot hold (vLLM then refuses to start).
R_MODEL_LEN = 12
R_MODEL_LEN_KV = 13


# ---------------------------------------------------------------------------- weights
def routed_expert_params(c: CandidateArrays) -> np.ndarray:
    """All routed experts of all MoE layers: ``E * params_per_expert * num_moe_layers``."""
    return c.num_experts * c.params_per_expert * c.num_moe_layers


def high_precision_params(c: CandidateArrays) -> np.ndarray:
    """Input embedding plus an untied LM head: kept in bf16 by quantized checkpoints."""
    return c.embedding_params * np.where(c.tied_embeddings, 1.0, 2.0)


def nonexpert_weight_bytes(c: CandidateArrays) -> np.ndarray:
    """Bytes of everything but the routed experts (B): attention, dense MLPs, shared experts
    and norms at ``b_w``; embedding and LM head at ``b_emb`` (their own precision when the
    checkpoint states one, else ``max(b_w, 2)``)."""
    p_hp = high_precision_params(c)
    p_rest = c.total_params - routed_expert_params(c) - p_hp
    return p_rest * c.weight_bytes_per_param + p_hp * c.embedding_bytes_per_param


def expert_weight_bytes(c: CandidateArrays) -> np.ndarray:
    """Bytes of the routed experts (B): ``P_routed * b_e`` (``b_e`` = their own precision's
    bytes when the checkpoint mixes precisions, else ``b_w``)."""
    return routed_expert_params(c) * c.expert_bytes_per_param


#: bytes per param of a vision encoder: engines leave the vision tower unquantized (bf16)
VISION_BYTES_PER_PARAM = 2.0


def vision_weight_bytes(c: CandidateArrays) -> np.ndarray:
    """The vision encoder's bytes when the prompts carry images, ``P_v * 2`` (B; 0 without
    images). It runs once per image, in the prefill, so decode steps do not stream it."""
    if not np.any(c.image_tokens > 0):
        return np.zeros(len(c))
    return np.where(c.image_tokens > 0, c.vision_params * VISION_BYTES_PER_PARAM, 0.0)


def weights_bytes_total(c: CandidateArrays) -> np.ndarray:
    """Whole-model weight bytes (B); 70.55e9 params x 2 B = 141.1e9 B for Llama 3.1 70B bf16.
    A vision-language model serving images adds its encoder (``vision_weight_bytes``)."""
    return nonexpert_weight_bytes(c) + expert_weight_bytes(c) + vision_weight_bytes(c)


def expert_shards(c: CandidateArrays) -> np.ndarray:
    """GPUs one MoE layer's routed experts are spread over: EP if EP > 1, else TP."""
    return np.where(c.ep > 1, c.ep, c.tp)


def weights_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """``nonexpert / (TP*PP) + experts / (shards*PP)`` bytes resident on one GPU (B)."""
    return (nonexpert_weight_bytes(c) + vision_weight_bytes(c)) / (
        c.tp * c.pp
    ) + expert_weight_bytes(c) / (expert_shards(c) * c.pp)


# ---------------------------------------------------------------------------- KV cache
def kv_elements_per_token_layer(c: CandidateArrays) -> np.ndarray:
    """Cache elements per token per attention layer, whole model (MLA: the shared latent)."""
    mla = c.kv_lora_rank + c.qk_rope_head_dim
    return np.where(c.kv_lora_rank > 0, mla, 2.0 * c.num_kv_heads * c.head_dim)


def kv_heads_per_gpu(c: CandidateArrays) -> np.ndarray:
    """``max(n_kv / TP, 1)``: heads split while n_kv >= TP, copied on every rank below that."""
    return np.maximum(c.num_kv_heads / c.tp, 1.0)


@row_constant
def kv_elements_per_token_layer_per_gpu(c: CandidateArrays) -> np.ndarray:
    """Per GPU: GQA ``2 * d * max(n_kv/TP, 1)``; MLA latent replicated on every TP rank."""
    mla = c.kv_lora_rank + c.qk_rope_head_dim
    return np.where(c.kv_lora_rank > 0, mla, 2.0 * c.head_dim * kv_heads_per_gpu(c))


def attention_layers(c: CandidateArrays) -> np.ndarray:
    """Layers that keep a per-token cache (full plus sliding-window)."""
    return c.full_layers + c.sliding_layers


def kv_bytes_per_token(c: CandidateArrays) -> np.ndarray:
    """KV bytes one token adds, for the whole model: all attention layers, summed over GPUs,
    before any replication (B/token). Llama 3.1 70B bf16: 2*80*8*128*2 = 327,680."""
    return attention_layers(c) * kv_elements_per_token_layer(c) * c.kv_bytes_per_element


def kv_bytes_per_token_per_gpu(c: CandidateArrays) -> np.ndarray:
    """KV bytes one token adds on one GPU, replication included, layers split over PP."""
    layers = attention_layers(c) / c.pp
    return layers * kv_elements_per_token_layer_per_gpu(c) * c.kv_bytes_per_element


def kv_bytes_per_sequence_per_gpu(c: CandidateArrays, context_tokens: np.ndarray) -> np.ndarray:
    """Cache one sequence at ``context_tokens`` holds on one GPU (B).

    ``[(full * c + sliding * min(c, window)) * per_layer_gpu + linear * state / TP] * b_kv / PP``
    """
    ctx = np.asarray(context_tokens, dtype=np.float64)
    windowed = np.minimum(ctx, np.where(c.sliding_window > 0, c.sliding_window, ctx))
    token_elems = (c.full_layers * ctx + c.sliding_layers * windowed) * (
        kv_elements_per_token_layer_per_gpu(c)
    )
    state_elems = c.linear_layers * c.linear_state_elements / c.tp
    return (token_elems + state_elems) * c.kv_bytes_per_element / c.pp


def allocated_context(c: CandidateArrays, context_tokens: np.ndarray) -> np.ndarray:
    """Context rounded up to whole paged-attention blocks (tokens)."""
    return np.ceil(np.asarray(context_tokens, dtype=np.float64) / c.block_size) * c.block_size


# ---------------------------------------------------------------------------- prefix cache
def cached_prefix_tokens(c: CandidateArrays, prompt_tokens: np.ndarray) -> np.ndarray:
    """Tokens a prefix-cache hit skips: whole blocks of the shared prefix, at most the
    prompt's whole blocks before its last token, ``min(floor(P / blk), floor((p - 1) / blk))
    * blk`` (tokens; the simulator's rule). 2,000-token prefix, 16-token blocks: 2,000."""
    p = np.asarray(prompt_tokens, dtype=np.float64)
    prefix = np.floor(c.prefix_tokens / c.block_size)
    prompt = np.floor(np.maximum(p - 1.0, 0.0) / c.block_size)
    return np.minimum(prefix, prompt) * c.block_size


def expected_cached_tokens(c: CandidateArrays, prompt_tokens: np.ndarray) -> np.ndarray:
    """``hit_rate * cached_prefix_tokens``: prefill tokens a request skips on average."""
    return c.prefix_hit_rate * cached_prefix_tokens(c, prompt_tokens)


def pinned_prefix_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """KV of the shared prefix, held once per replica (per DP rank) while it is hit (B):
    its whole blocks at the per-GPU token cost; 0 without hits."""
    tokens = np.floor(c.prefix_tokens / c.block_size) * c.block_size
    pinned = kv_bytes_per_sequence_per_gpu(c, tokens) - kv_bytes_per_sequence_per_gpu(c, 0.0)
    return np.where(c.prefix_hit_rate > 0, pinned, 0.0)


def kv_bytes_per_request_per_gpu(c: CandidateArrays, context_tokens: np.ndarray) -> np.ndarray:
    """A request's own KV at ``context_tokens`` (B): a hit shares the pinned prefix blocks,
    ``h * kv(alloc(c - cached)) + (1 - h) * kv(alloc(c))``; without hits ``kv(alloc(c))``."""
    ctx = np.asarray(context_tokens, dtype=np.float64)
    miss = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, ctx))
    draft = draft_kv_bytes_per_token_per_gpu(c)
    if not np.any(c.prefix_hit_rate > 0) and not np.any(draft > 0):
        return miss  # the common case, at the cost it always had
    hit = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, ctx - cached_prefix_tokens(c, ctx)))
    h = c.prefix_hit_rate
    own = np.where(h > 0, h * hit + (1.0 - h) * miss, miss)
    # speculative decoding: the drafter caches every token of the sequence too
    return own + allocated_context(c, ctx) * draft


# ---------------------------------------------------------------------------- budget
def usable_bytes_per_gpu(
    c: CandidateArrays, reserved_bytes: np.ndarray | float = 0.0
) -> np.ndarray:
    """Memory the engine may fill per GPU (B), weights and KV pool included.

    vLLM (``gpu_memory_utilization``) and SGLang (``mem_fraction_static``) take a share u of
    all HBM: ``HBM * u`` (80 GB * 0.90 = 72.0 GB on an H100). TensorRT-LLM's KV pool is
    ``free_gpu_memory_fraction`` of the memory still free once the model is loaded ("90 %
    of free GPU memory", NVIDIA TensorRT-LLM docs, How to Change KV Cache Behavior), so
    with ``reserved_bytes`` R (weights + workspace + runtime, held first) the KV budget
    ``usable - R`` is ``u (HBM - R)``: ``usable = HBM * u + (1 - u) * R``. For Llama 3.1 70B
    fp8 on one H100 (R = 76.3 GB of 85.5 GB) that is 8.3 GB of KV instead of 0.7 GB.
    """
    u = c.gpu_memory_utilization
    of_free = c.memory_bytes * u + (1.0 - u) * np.asarray(reserved_bytes, dtype=np.float64)
    return np.where(c.kv_share_of_free > 0, of_free, c.memory_bytes * u)


def workspace_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """Activation peak of a full prefill-budget step: ``tokens * hidden * 24 B`` (B)."""
    return c.max_num_batched_tokens * c.hidden_size * c.workspace_bytes_per_token_hidden


def structural_reason_codes(
    c: CandidateArrays, context_tokens: np.ndarray, num_gpus: np.ndarray | None = None
) -> np.ndarray:
    """First failing layout rule per row (``OK`` if none): parallel degrees vs the model and
    the GPU's scale-up domain, context vs the model's maximum, a known compute peak."""
    n = len(c)
    code = np.zeros(n, dtype=np.int64)

    def mark(cond: np.ndarray, value: int) -> None:
        code[(code == OK) & cond] = value

    if num_gpus is not None:
        mark(np.asarray(num_gpus) != c.tp * c.pp * c.dp, R_NUM_GPUS)
    mark(c.num_attention_heads % c.tp != 0, R_TP_HEADS)
    gqa = c.kv_lora_rank <= 0
    kv_split_bad = np.where(
        c.num_kv_heads >= c.tp,
        c.num_kv_heads % c.tp != 0,
        c.tp % np.maximum(c.num_kv_heads, 1) != 0,
    )
    mark(gqa & kv_split_bad, R_TP_KV_HEADS)
    mark(c.tp > c.scale_up_domain_gpus, R_TP_DOMAIN)
    moe = c.num_experts > 0
    ep_bad = (c.ep > 1) & (
        ~moe | (np.fmod(c.num_experts, np.maximum(c.ep, 1)) != 0) | (c.ep > c.tp * c.dp)
    )
    mark(ep_bad | (c.ep < 1) | (c.tp < 1) | (c.pp < 1) | (c.dp < 1), R_EP)
    mark(c.pp > c.num_layers, R_PP_LAYERS)
    mark(np.asarray(context_tokens) > c.max_context, R_CONTEXT)
    limited = c.max_model_len > 0
    mark(limited & (np.asarray(context_tokens) > c.max_model_len), R_MODEL_LEN)
    mark(limited & (c.max_model_len > c.max_context), R_CONTEXT)
    mark(~(c.peak_flops > 0), R_NO_PEAK)
    mark((c.num_experts > 0) & ~(c.expert_peak_flops > 0), R_NO_PEAK)
    return code


@dataclass(frozen=True)
class MemoryFit:
    """Memory verdict per row. Per-GPU quantities are for the fullest GPU of the instance;
    ``kv_capacity_tokens`` and ``max_concurrency`` are per instance (times DP).

    Attributes
    ----------
    weights_bytes_total, weights_bytes_per_gpu : B
    usable_bytes_per_gpu, workspace_bytes_per_gpu, runtime_overhead_bytes : B per GPU
    kv_budget_bytes_per_gpu : B, ``usable - weights - workspace - runtime`` (may be < 0)
    kv_bytes_per_token : B/token, whole model before replication
    kv_bytes_per_token_per_gpu : B/token on one GPU, replication included
    kv_capacity_tokens : tokens the instance caches, ``floor(budget / per_token_gpu) * DP``
    context_tokens : the per-sequence context the fit was checked at
    kv_bytes_per_sequence_per_gpu : B at ``context_tokens`` (windows respected, block-rounded)
    max_concurrency : sequences at ``context_tokens``, ``floor(budget / per_seq_gpu) * DP``
    fits : bool; ``reason_code`` : first failing rule (memory.R_*), 0 when it fits
    """

    weights_bytes_total: np.ndarray
    weights_bytes_per_gpu: np.ndarray
    usable_bytes_per_gpu: np.ndarray
    workspace_bytes_per_gpu: np.ndarray
    runtime_overhead_bytes: np.ndarray
    kv_budget_bytes_per_gpu: np.ndarray
    kv_bytes_per_token: np.ndarray
    kv_bytes_per_token_per_gpu: np.ndarray
    kv_capacity_tokens: np.ndarray
    context_tokens: np.ndarray
    kv_bytes_per_sequence_per_gpu: np.ndarray
    max_concurrency: np.ndarray
    fits: np.ndarray
    reason_code: np.ndarray
    # what the serving techniques take per GPU (B; 0 when unused): the pinned shared prefix,
    # the speculative drafter's weights and cache per token, the resident LoRA adapters
    pinned_prefix_bytes_per_gpu: np.ndarray
    draft_weight_bytes_per_gpu: np.ndarray
    draft_kv_bytes_per_token_per_gpu: np.ndarray
    lora_resident_bytes_per_gpu: np.ndarray

    @property
    def weights_gb_per_gpu(self) -> np.ndarray:
        return self.weights_bytes_per_gpu / GB

    def take(self, rows: np.ndarray) -> MemoryFit:
        """The verdict of ``rows`` only (an index array, as ``CandidateArrays.take``)."""
        return MemoryFit(**{k: np.asarray(v)[rows] for k, v in vars(self).items()})

    def reason(self, c: CandidateArrays, i: int) -> str:
        """Why row ``i`` does not fit, with its numbers ('' when it fits)."""
        return reason_text(c, self, i)

    def reasons(self, c: CandidateArrays) -> np.ndarray:
        """Object array of reason strings ('' where it fits); formats only the misfits."""
        out = np.full(len(c), "", dtype=object)
        for i in np.flatnonzero(self.reason_code):
            out[i] = reason_text(c, self, int(i))
        return out


def fit_memory(
    c: CandidateArrays, context_tokens: np.ndarray, num_gpus: np.ndarray | None = None
) -> MemoryFit:
    """Memory fit per row at ``context_tokens`` per sequence (prompt + output, tokens).

    ``max_concurrency = floor(kv_budget / kv_seq_gpu(ceil(c / block) * block)) * DP``.
    A row fits when its layout is valid, the weights leave room for workspace, runtime and
    at least one sequence at ``context_tokens``.
    """
    ctx = np.broadcast_to(np.asarray(context_tokens, dtype=np.float64), (len(c),))
    code = structural_reason_codes(c, ctx, num_gpus)
    weights_total = weights_bytes_total(c)
    weights_gpu = weights_bytes_per_gpu(c)
    workspace = workspace_bytes_per_gpu(c)
    usable = usable_bytes_per_gpu(c, weights_gpu + workspace + c.runtime_overhead_bytes)
    budget = usable - weights_gpu - workspace - c.runtime_overhead_bytes
    pinned, draft_w = pinned_prefix_bytes_per_gpu(c), draft_weight_bytes_per_gpu(c)
    draft_kv, adapters = draft_kv_bytes_per_token_per_gpu(c), lora_resident_bytes_per_gpu(c)
    budget = budget - pinned - draft_w
    budget = budget - adapters
    per_token_gpu = kv_bytes_per_token_per_gpu(c) + draft_kv
    per_seq_gpu = kv_bytes_per_request_per_gpu(c, ctx)
    positive = np.maximum(budget, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        capacity = np.floor(positive / per_token_gpu) * c.dp
        concurrency = np.floor(positive / per_seq_gpu) * c.dp
    capacity = np.where(np.isfinite(capacity), capacity, 0.0)
    concurrency = np.where(np.isfinite(concurrency), concurrency, 0.0)
    code[(code == OK) & (weights_gpu > usable)] = R_WEIGHTS
    code[(code == OK) & (budget <= 0)] = R_NO_KV_ROOM
    code[(code == OK) & (concurrency < 1)] = R_ONE_SEQUENCE
    longest = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, c.max_model_len))
    code[(code == OK) & (c.max_model_len > 0) & (longest > positive)] = R_MODEL_LEN_KV
    fits = code == OK
    return MemoryFit(
        weights_bytes_total=weights_total,
        weights_bytes_per_gpu=weights_gpu,
        usable_bytes_per_gpu=usable,
        workspace_bytes_per_gpu=workspace,
        runtime_overhead_bytes=c.runtime_overhead_bytes,
        kv_budget_bytes_per_gpu=budget,
        kv_bytes_per_token=kv_bytes_per_token(c),
        kv_bytes_per_token_per_gpu=per_token_gpu,
        kv_capacity_tokens=np.where(fits, capacity, 0.0),
        context_tokens=ctx,
        kv_bytes_per_sequence_per_gpu=per_seq_gpu,
        max_concurrency=np.where(fits, concurrency, 0.0),
        fits=fits,
        reason_code=code,
        pinned_prefix_bytes_per_gpu=pinned,
        draft_weight_bytes_per_gpu=draft_w,
        draft_kv_bytes_per_token_per_gpu=draft_kv,
        lora_resident_bytes_per_gpu=adapters,
    )


def _layout(c: CandidateArrays, i: int) -> str:
    parts = [f"TP{c.tp[i]}", f"PP{c.pp[i]}"]
    if c.ep[i] > 1:
        parts.append(f"EP{c.ep[i]}")
    if c.dp[i] > 1:
        parts.append(f"DP{c.dp[i]}")
    return " x ".join(parts)


def reason_text(c: CandidateArrays, fit: MemoryFit, i: int) -> str:
    """Human reason for row ``i``'s reason code, with the numbers that decided it."""
    code = int(fit.reason_code[i])
    gpu, model = c.gpu_name(i), c.model_name(i)
    tp, pp, ep, dp = int(c.tp[i]), int(c.pp[i]), int(c.ep[i]), int(c.dp[i])
    n_gpus = tp * pp
    where = f"one {gpu}" if n_gpus == 1 else f"each of {n_gpus} {gpu} ({_layout(c, i)})"
    usable_gb = fit.usable_bytes_per_gpu[i] / GB
    if code == OK:
        return ""
    if code == R_NUM_GPUS:
        return f"GPU count is not a multiple of TP{tp} x PP{pp}"
    if code == R_TP_HEADS:
        return f"TP {tp} does not divide {model}'s {c.num_attention_heads[i]} attention heads"
    if code == R_TP_KV_HEADS:
        kv = c.num_kv_heads[i]
        if kv >= tp:
            return f"TP {tp} does not divide {model}'s {kv} KV heads"
        return f"TP {tp} is not a multiple of {model}'s {kv} KV heads (KV replication)"
    if code == R_TP_DOMAIN:
        return (
            f"TP {tp} exceeds the {c.scale_up_domain_gpus[i]}-GPU "
            f"{c.gpus[c.gpu_index[i]].scale_up_link} domain of {gpu}"
        )
    if code == R_EP:
        e = int(c.num_experts[i])
        if e == 0:
            return f"EP {ep} on dense model {model} (no experts)"
        if ep > tp * dp:
            return f"EP {ep} > TP{tp} x DP{dp} = {tp * dp} GPUs per pipeline stage"
        return f"EP {ep} does not divide {model}'s {e} routed experts"
    if code == R_PP_LAYERS:
        return f"PP {pp} > {int(c.num_layers[i])} layers"
    if code == R_CONTEXT and c.max_model_len[i] > c.max_context[i]:
        return f"max_model_len {int(c.max_model_len[i]):,} > {model}'s maximum " + (
            f"{int(c.max_context[i]):,}"
        )
    if code == R_CONTEXT:
        return (
            f"context {int(fit.context_tokens[i]):,} tokens > {model}'s maximum "
            f"{int(c.max_context[i]):,}"
        )
    if code == R_NO_PEAK:
        which = c.weight_precision(i) if c.peak_flops[i] > 0 else ""
        which = c.expert_precision(i) + " expert" if which else c.weight_precision(i)
        return f"no dense TFLOP/s known for {which} weights on {gpu}"
    if code == R_WEIGHTS:
        per = "" if n_gpus == 1 else " per GPU"
        return (
            f"weights {fit.weights_bytes_per_gpu[i] / GB:.1f} GB{per} > {usable_gb:.1f} GB "
            f"usable on {where}"
        )
    if code == R_NO_KV_ROOM:
        w = fit.weights_bytes_per_gpu[i] / GB
        ws = fit.workspace_bytes_per_gpu[i] / GB
        rt = fit.runtime_overhead_bytes[i] / GB
        return (
            f"weights {w:.1f} GB + workspace {ws:.1f} GB + runtime {rt:.1f} GB = "
            f"{w + ws + rt:.1f} GB > {usable_gb:.1f} GB usable on {where}: no room for KV cache"
        )
    if code == R_MODEL_LEN:
        return (
            f"context {int(fit.context_tokens[i]):,} tokens > max_model_len "
            f"{int(c.max_model_len[i]):,}"
        )
    if code == R_MODEL_LEN_KV:
        longest = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, c.max_model_len))[i]
        return (
            f"one max_model_len {int(c.max_model_len[i]):,}-token sequence needs "
            f"{longest / GB:.2f} GB of KV per GPU > {fit.kv_budget_bytes_per_gpu[i] / GB:.2f} "
            f"GB KV budget on {where} (the engine would refuse to start)"
        )
    if code == R_ONE_SEQUENCE:
        return (
            f"one {int(fit.context_tokens[i]):,}-token sequence needs "
            f"{fit.kv_bytes_per_sequence_per_gpu[i] / GB:.2f} GB of KV per GPU > "
            f"{fit.kv_budget_bytes_per_gpu[i] / GB:.2f} GB KV budget on {where}"
        )
    return f"unknown reason {code}"


def draft_weight_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """The speculative drafter's weights on one GPU (B); see sizing.speculative."""
    from sizing.speculative import draft_weight_bytes_per_gpu as draft

    return draft(c)


def draft_kv_bytes_per_token_per_gpu(c: CandidateArrays) -> np.ndarray:
    """The speculative drafter's cache per token on one GPU (B/token); sizing.speculative."""
    from sizing.speculative import draft_kv_bytes_per_token_per_gpu as draft

    return draft(c)


def lora_resident_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """Resident LoRA adapter slots on one GPU (B); see sizing.lora."""
    from sizing.lora import resident_bytes_per_gpu

    return resident_bytes_per_gpu(c)
