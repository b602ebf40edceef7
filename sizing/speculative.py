"""Speculative decoding: idle bandwidth turned into tokens, and the batch where it stops paying.

A drafter proposes k tokens; the target checks them in one forward pass of ``k + 1`` tokens
per sequence. With a per-position acceptance a, a verify step emits on average
``tau = (1 - a^(k+1)) / (1 - a)`` tokens per sequence (``specs.tokens_per_verify_step``).

Step cost (per DP rank, B sequences decoding; steptime.py's roofline):

- target: ``t_target(B, k + 1)``, the decode step with ``B * (k + 1)`` query tokens; the
  weights and each sequence's cache are read once, FLOPs (and routed-expert tokens and TP
  traffic) grow ``k + 1``-fold;
- drafter: ``k * t_draft(B)``, ``t_draft = max(bytes / (BW * eta_mem), 2 * P_d_active * B /
  (TP * F * eta_flop_decode)) + step_overhead_per_layer_s * L_d``. A draft model
  (``method`` draft) streams its own weights (bf16) and cache; an EAGLE / MTP head
  (``eagle``, ``mtp``) is about one decoder layer at the target's precision with one layer of
  cache. The drafter is sharded over the target's TP (vLLM runs it on the same ranks); its
  all-reduces are left out.

``speed-up(B) = tau * t_plain(B) / t_spec(B)``. While the target is bandwidth-bound the
``k + 1`` tokens cost little more than one and the speed-up approaches tau less the draft's
share; once ``B * (k + 1)`` tokens make the target compute-bound the extra tokens cost their
full FLOPs and the speed-up falls below 1 at the break-even batch ``B*``.

Memory: the drafter's weights per GPU ``P_d * b_d / TP`` and its cache per token
``kv_elements_d * b_kv / TP`` join the fit (memory.py).

Validation (tests/sizing/test_speculative.py): NVIDIA's Llama 3.3 70B FP8 on H200 at batch 1,
51.14 tok/s plain, 181.74 tok/s with a draft model (3.55x; TensorRT-LLM blog,
https://developer.nvidia.com/blog/tensorrt-llm-speculative-decoding-boosts-inference-throughput-by-up-to-3-6x/
as summarized in the reference data, conditions partly from secondary sources).
"""

from __future__ import annotations

import numpy as np

from sizing.candidates import CandidateArrays, row_constant
from sizing.memory import kv_elements_per_token_layer_per_gpu
from sizing.specs import ModelSpec

#: bytes per param of a separate draft model: drafts ship and load in bf16
DRAFT_BYTES_PER_PARAM = 2.0


def default_head_params(model: ModelSpec) -> float:
    """An EAGLE/MTP head's size when not given: one decoder layer of the target,
    ``(active - embedding) / layers`` params (Llama 3.1 8B: ~0.2e9)."""
    return float((model.active_params - model.embedding_params) / max(model.num_layers, 1))


def speculating(c: CandidateArrays) -> np.ndarray:
    return c.spec_tokens > 0


@row_constant
def drafts(c: CandidateArrays) -> bool:
    """Any row drafting (else a step adds no drafter time)."""
    return bool(speculating(c).any())


def verify_tokens_per_sequence(c: CandidateArrays) -> np.ndarray:
    """Query tokens the target processes per sequence per step: ``k + 1`` (1 when off)."""
    return c.spec_tokens + 1.0


def draft_bytes_per_param(c: CandidateArrays) -> np.ndarray:
    """bf16 for a draft model, the target's precision for a head."""
    return np.where(c.spec_draft_layers > 0, DRAFT_BYTES_PER_PARAM, c.weight_bytes_per_param)


def draft_weight_bytes_per_gpu(c: CandidateArrays) -> np.ndarray:
    """``P_d * b_d / TP`` (B); 0 without speculative decoding."""
    return np.where(speculating(c), c.spec_draft_params * draft_bytes_per_param(c) / c.tp, 0.0)


def draft_kv_bytes_per_token_per_gpu(c: CandidateArrays) -> np.ndarray:
    """The drafter's cache per token on one GPU (B/token): a draft model's
    ``kv_elements_d * b_kv / TP``, a head's one target layer; 0 when off."""
    model = c.spec_draft_kv_elements_per_token * c.kv_bytes_per_element / c.tp
    head = kv_elements_per_token_layer_per_gpu(c) * c.kv_bytes_per_element
    per_token = np.where(c.spec_draft_layers > 0, model, head)
    return np.where(speculating(c), per_token, 0.0)


def draft_step_s(c: CandidateArrays, batch: np.ndarray, context_tokens: np.ndarray) -> np.ndarray:
    """One drafter forward pass for ``batch`` sequences at ``context_tokens`` (s)."""
    b = np.asarray(batch, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.float64)
    weights = draft_weight_bytes_per_gpu(c)
    kv = b * ctx * draft_kv_bytes_per_token_per_gpu(c)
    mem_s = (weights + kv) / (c.hbm_bytes_s * c.eta_mem)
    flop_s = 2.0 * c.spec_draft_active_params * b / c.tp / (c.peak_flops * c.eta_flop_decode)
    layers = np.maximum(c.spec_draft_layers, 1.0)
    return np.maximum(mem_s, flop_s) + c.step_overhead_per_layer_s * layers


def drafting_s(c: CandidateArrays, batch: np.ndarray, context_tokens: np.ndarray) -> np.ndarray:
    """``k * t_draft(B)`` added to every decode step (s); 0 without speculative decoding."""
    if not drafts(c):  # no row drafts: skip the drafter's roofline (all 0)
        shape = np.broadcast(batch, context_tokens, c.tp).shape
        return np.zeros(shape)
    return np.where(speculating(c), c.spec_tokens * draft_step_s(c, batch, context_tokens), 0.0)


def without(c: CandidateArrays) -> CandidateArrays:
    """The same rows with speculative decoding off (no drafter, one token per step)."""
    import dataclasses

    n = len(c)
    return dataclasses.replace(
        c, spec_tokens=np.zeros(n), spec_tokens_per_step=np.ones(n), spec_draft_params=np.zeros(n)
    )


def decode_steps(c: CandidateArrays, batch: np.ndarray, context_tokens: np.ndarray) -> tuple:
    """(plain, speculative) pure decode step times for ``batch`` per DP rank (s)."""
    from sizing.steptime import decode_step

    plain = decode_step(without(c), batch, context_tokens).step_s
    return plain, decode_step(c, batch, context_tokens).step_s


def speed_up(c: CandidateArrays, batch: np.ndarray, context_tokens: np.ndarray) -> np.ndarray:
    """``tau * t_plain(B) / t_spec(B)`` for pure decode steps of ``batch`` per DP rank."""
    plain, spec = decode_steps(c, batch, context_tokens)
    return c.spec_tokens_per_step * plain / spec


def break_even_batch(
    c: CandidateArrays, context_tokens: np.ndarray, max_batch: float = 65536.0
) -> np.ndarray:
    """The smallest batch per DP rank at which ``speed_up <= 1`` (sequences), by bisection
    on log B over [1, max_batch]; ``inf`` where it still pays at ``max_batch`` and 1 where it
    never pays."""
    n = len(c)
    lo, hi = np.ones(n), np.full(n, max_batch)
    pays_lo = speed_up(c, lo, context_tokens) > 1.0
    pays_hi = speed_up(c, hi, context_tokens) > 1.0
    for _ in range(30):
        mid = np.sqrt(lo * hi)
        pays = speed_up(c, mid, context_tokens) > 1.0
        lo, hi = np.where(pays, mid, lo), np.where(pays, hi, mid)
    out = np.ceil(hi)
    out = np.where(pays_hi, np.inf, out)
    return np.where(pays_lo, out, 1.0)
