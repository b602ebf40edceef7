"""Public entry points of the sizing core: ``predict_rows`` and ``plan``.

``predict_rows`` evaluates arrays of measured-benchmark-shaped rows (model, GPU, GPU count,
TP/PP/EP, precisions, ISL/OSL, concurrency) in one vectorized pass: memory fit, closed-loop
operating point, throughput and latencies. ``plan`` runs the whole chain forward from
traffic (memory -> step time -> SLO operating point -> Little -> headroom -> cost ->
break-even) for a list of candidates and ranks them; every row carries its derivation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sizing import headroom, routing, vision
from sizing.candidates import CandidateArrays, expert_precision_of
from sizing.chunking import chunk_frontier
from sizing.derivation import Step, q, staged, step
from sizing.engine_settings import binding_settings
from sizing.fleet import Band, BreakEvenResult, breakeven, error_band, size_fleet
from sizing.memory import (
    GB,
    MemoryFit,
    allocated_context,
    expert_shards,
    expert_weight_bytes,
    fit_memory,
    high_precision_params,
    kv_bytes_per_request_per_gpu,
    kv_elements_per_token_layer_per_gpu,
    nonexpert_weight_bytes,
    routed_expert_params,
    vision_weight_bytes,
)
from sizing.operating import (
    BINDING_NAMES,
    OperatingPoint,
    admitted_context_tokens,
    closed_loop,
    kv_sequences_live,
    slo_operating_point,
    with_open_loop_rows,
)
from sizing.specs import (
    ApiPrice,
    Calibration,
    EngineSettings,
    GpuSpec,
    ModelSpec,
    Parallelism,
    Policy,
    Slo,
    Traffic,
)
from sizing.tail_model import DEFAULT_TAILS, Lengths, TailConstants, TailModel
from sizing.technique_steps import (
    EngineArrays,
    draft_input,
    draft_term,
    engine_arrays,
    engine_steps,
    frontier_rows,
    lora_fleet_step,
    lora_steps,
    precision_steps,
    prefix_steps,
    routing_steps,
    speculative_arrays,
    speculative_steps,
)


# ============================================================================ predict_rows
@dataclass(frozen=True)
class Predictions:
    """Arrays, one value per input row (n rows). Units in the names; per-instance values
    cover all ``num_gpus`` of the row.

    fits : bool; reason : object array of str ('' where it fits)
    weights_gb_per_gpu : GB resident per GPU
    kv_bytes_per_token : B/token, whole model, before replication
    kv_capacity_tokens : tokens the instance's KV budget holds (all DP ranks)
    max_concurrency : sequences of ``isl + osl`` tokens that fit (all DP ranks)
    batch : sequences decoding together at the operating point
    total_output_tok_s, output_tok_s_per_gpu : output tokens/s, instance and per GPU
    ttft_ms, tpot_ms : mean time to first token, mean time per output token
    """

    fits: np.ndarray
    reason: np.ndarray
    weights_gb_per_gpu: np.ndarray
    kv_bytes_per_token: np.ndarray
    kv_capacity_tokens: np.ndarray
    max_concurrency: np.ndarray
    batch: np.ndarray
    total_output_tok_s: np.ndarray
    output_tok_s_per_gpu: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    candidates: CandidateArrays = field(repr=False)
    memory: MemoryFit = field(repr=False)
    operating: OperatingPoint = field(repr=False)

    COLUMNS = (
        "fits",
        "reason",
        "weights_gb_per_gpu",
        "kv_bytes_per_token",
        "kv_capacity_tokens",
        "max_concurrency",
        "batch",
        "total_output_tok_s",
        "output_tok_s_per_gpu",
        "ttft_ms",
        "tpot_ms",
    )

    def __len__(self) -> int:
        return len(self.fits)

    def records(self) -> list[dict[str, Any]]:
        """One dict per row with the COLUMNS (Python scalars; NaN where undefined)."""
        cols = [getattr(self, k).tolist() for k in self.COLUMNS]
        return [dict(zip(self.COLUMNS, vals, strict=True)) for vals in zip(*cols, strict=True)]

    def derivation(self, i: int) -> tuple[Step, ...]:
        """The chain of named steps behind row ``i``."""
        return derive(self.candidates, self.memory, self.operating, i)


def default_dp(num_gpus: np.ndarray, tp: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """``dp = num_gpus / (TP * PP)`` (>= 1); a non-integer ratio is reported as a misfit."""
    return np.maximum(np.asarray(num_gpus) // (np.asarray(tp) * np.asarray(pp)), 1)


def predict_rows(
    models: ModelSpec | Sequence[ModelSpec],
    gpus: GpuSpec | Sequence[GpuSpec],
    num_gpus: Any,
    tp: Any,
    pp: Any,
    ep: Any,
    weight_precision: str | Sequence[str],
    kv_precision: str | Sequence[str | None] | None,
    isl: Any,
    osl: Any,
    concurrency: Any,
    engine: EngineSettings | Sequence[EngineSettings] | None = None,
    calibration: Calibration | Sequence[Calibration] | None = None,
    prefix_tokens: Any = 0.0,
    prefix_hit_rate: Any = 0.0,
    expert_precision: str | Sequence[str | None] | None = None,
    embedding_precision: str | Sequence[str | None] | None = None,
    images_per_request: Any = 0.0,
    tokens_per_image: Any = 0.0,
    lengths_drawn: Any = False,
    request_rate: Any = np.nan,
    run_requests: Any = np.nan,
) -> Predictions:
    """Predict throughput and latency for n benchmark-shaped rows at once.

    Parameters
    ----------
    models, gpus : one spec (broadcast) or a sequence of n specs
    num_gpus, tp, pp, ep : ints or int arrays; ``dp = num_gpus / (tp * pp)`` is data
        parallelism inside the instance (MoE attention-DP with experts over ``ep``):
        throughput multiplies by dp and the concurrency splits over the dp ranks
    weight_precision, kv_precision : names (aliases accepted); kv None/''/'auto' -> bf16,
        or fp8 for fp8/fp4 weights
    isl, osl : prompt and output tokens per request
    concurrency : closed-loop clients per instance; NaN -> max throughput (largest batch
        that fits, capped by max_num_seqs per DP rank)
    engine, calibration : one object or a sequence of n (defaults: vLLM-like, physics)
    prefix_tokens, prefix_hit_rate : a shared prompt prefix and the share of requests that
        find it cached (0: none); prefill skips it, its KV is pinned once per instance
    expert_precision : the routed experts' precision per row, for checkpoints with 4-bit
        experts and 8/16-bit attention (None/'': as published, ``expert_precision_of``: the
        checkpoint's own where only its experts are quantized, else weight_precision)
    embedding_precision : the embedding and LM head's precision per row (None/'':
        ``max(b_w, 2)``)
    images_per_request, tokens_per_image : vision-language input (``sizing.vision``): the
        image tokens join the prompt (prefill, KV, TTFT) and the vision encoder's FLOPs the
        prefill; ``tokens_per_image`` 0 derives it from the model's vision config
    lengths_drawn : bool per row: the clients draw their lengths (e.g. a benchmark's
        random range ratio), so closed-loop re-arrivals drift apart and the prefill step
        holds a share ``prefill_wave_fraction`` of the lock-step group
        (``operating.prefill_group_tokens``); False: equal lengths, the whole group
    request_rate, run_requests : open-loop Poisson arrivals per instance (req/s; NaN: the
        row is closed loop at ``concurrency`` or offline) and the requests the run sent
        (NaN: unknown); such rows take ``operating.open_loop``'s operating point

    Returns
    -------
    Predictions
        Arrays (see the class); misfit rows have fits False, a reason, zero throughput and
        NaN latencies. 100,000 rows take well under a second.
    """
    n_gpus = np.asarray(num_gpus, dtype=np.int64)
    tp_a, pp_a = np.asarray(tp, dtype=np.int64), np.asarray(pp, dtype=np.int64)
    dp = default_dp(n_gpus, tp_a, pp_a)
    c = CandidateArrays.build(
        models, gpus, weight_precision, kv_precision, tp_a, pp_a, ep, dp, engine, calibration,
        expert_precision=expert_precision, embedding_precision=embedding_precision,
    )  # fmt: skip
    if np.any(np.asarray(prefix_hit_rate) > 0):
        c = c.with_prefix(prefix_tokens, prefix_hit_rate)
    n = len(c)
    isl_a = np.broadcast_to(np.asarray(isl, dtype=np.float64), (n,))
    osl_a = np.broadcast_to(np.asarray(osl, dtype=np.float64), (n,))
    images = np.broadcast_to(np.asarray(images_per_request, dtype=np.float64), (n,))
    if np.any(images > 0):  # vision-language prompts: image tokens join the prompt
        given = np.broadcast_to(np.asarray(tokens_per_image, dtype=np.float64), (n,))
        derived = np.array(
            [vision.derived_tokens_per_image(m, 1, vision.DEFAULT_TILE_PX) for m in c.models]
        )[c.model_index]
        image = images * np.where(given > 0, given, np.nan_to_num(derived))
        isl_a = isl_a + image
        c = vision.with_images(c, image, isl_a)
    fit = fit_memory(c, isl_a + osl_a, np.broadcast_to(n_gpus, (n,)))
    rate = np.broadcast_to(np.asarray(request_rate, dtype=np.float64), (n,))
    open_rows = np.isfinite(rate)  # their closed-loop point is replaced: evaluate it at 1
    concurrency = np.where(open_rows, 1.0, np.asarray(concurrency, dtype=np.float64))
    op = closed_loop(c, fit, isl_a, osl_a, concurrency, lengths_drawn=lengths_drawn)
    op = with_open_loop_rows(c, fit, isl_a, osl_a, op, rate, run_requests)
    ok = fit.fits
    nan = np.nan
    return Predictions(
        fits=ok,
        reason=fit.reasons(c),
        weights_gb_per_gpu=fit.weights_gb_per_gpu,
        kv_bytes_per_token=fit.kv_bytes_per_token,
        kv_capacity_tokens=fit.kv_capacity_tokens,
        max_concurrency=fit.max_concurrency,
        batch=op.batch,
        total_output_tok_s=op.output_tokens_per_s,
        output_tok_s_per_gpu=op.output_tokens_per_s / c.gpus_per_instance,
        ttft_ms=np.where(ok, op.ttft_s * 1e3, nan),
        tpot_ms=np.where(ok, op.tpot_s * 1e3, nan),
        candidates=c,
        memory=fit,
        operating=op,
    )


# ============================================================================ derivation
def derive(c: CandidateArrays, fit: MemoryFit, op: OperatingPoint, i: int) -> tuple[Step, ...]:
    """Named steps (formula, inputs with units, result with unit) for row ``i``, read from
    the same arrays the outputs come from, so every shown number is the computed one.
    ``formula`` steps evaluate on their inputs (``derivation.evaluate``; a test checks every
    catalog model); ``model`` steps name a vectorized stage whose equations are in its module.
    """
    return tuple(
        _memory_steps(c, fit, i) + (_operating_steps(c, fit, op, i) if fit.fits[i] else [])
    )


def _usable_step(c: CandidateArrays, fit: MemoryFit, i: int) -> Step:
    """What the engine may fill per GPU: a share of all HBM, or (TensorRT-LLM) the weights
    plus a share of what they leave free (``memory.usable_bytes_per_gpu``)."""
    inputs = [
        q("HBM_bytes", c.memory_bytes[i], "B"),
        q("gpu_memory_utilization", c.gpu_memory_utilization[i], ""),
    ]
    if c.kv_share_of_free[i] <= 0:
        return step("usable_gb_per_gpu", "HBM_bytes * gpu_memory_utilization / 1e9", inputs,
                    fit.usable_bytes_per_gpu[i] / GB, "GB")  # fmt: skip
    reserved = (
        fit.weights_bytes_per_gpu[i]
        + fit.workspace_bytes_per_gpu[i]
        + fit.runtime_overhead_bytes[i]
    )
    return step(
        "usable_gb_per_gpu",
        "(HBM_bytes * gpu_memory_utilization + (1 - gpu_memory_utilization) * reserved) / 1e9",
        [*inputs, q("reserved", reserved, "B (weights + workspace + runtime, loaded first)")],
        fit.usable_bytes_per_gpu[i] / GB,
        "GB",
        "TensorRT-LLM sizes its KV pool as free_gpu_memory_fraction of the memory left after "
        "the model loads",
    )


def _memory_steps(c: CandidateArrays, fit: MemoryFit, i: int) -> list[Step]:
    s: list[Step] = []
    b_w, b_kv = c.weight_bytes_per_param[i], c.kv_bytes_per_element[i]
    tp, pp, dp = int(c.tp[i]), int(c.pp[i]), int(c.dp[i])
    weights_in = [
        q("P", c.total_params[i], "params"),
        q("P_hp", high_precision_params(c)[i], "params (embedding + LM head)"),
        q("b_w", b_w, "B/param"),
        q("weight_precision", c.weight_precision(i), ""),
    ]
    weights_formula = "(P - P_hp) * b_w + P_hp * max(b_w, 2)"
    if c.mixed_precision(i):  # components at their own precision (a mixed checkpoint)
        weights_formula = "(P - P_hp - P_e) * b_w + P_hp * b_emb + P_e * b_e"
        emb = c.embedding_precision(i) or f"max(b_w, 2): {c.embedding_bytes_per_param[i]:g} B"
        weights_in += [
            q("P_e", routed_expert_params(c)[i], "params (routed experts)"),
            q("b_e", c.expert_bytes_per_param[i], "B/param"),
            q("expert_precision", c.expert_precision(i), ""),
            q("b_emb", c.embedding_bytes_per_param[i], "B/param (embedding and LM head)"),
            q("embedding_precision", emb, ""),
        ]
    vision_w = float(vision_weight_bytes(c)[i])
    if vision_w > 0:  # a vision-language model serving images: its encoder, in bf16
        weights_formula += " + P_v * 2"
        weights_in.append(q("P_v", c.vision_params[i], "params (vision encoder, bf16)"))
    s.append(
        step(
            "weights_bytes_total",
            weights_formula,
            weights_in,
            fit.weights_bytes_total[i],
            "B",
            "quantized checkpoints keep the embedding and LM head in bf16",
        )
    )
    s.append(
        step(
            "weights_gb_per_gpu",
            "((nonexpert + vision) / (TP * PP) + experts / (shards * PP)) / 1e9"
            if vision_w > 0
            else "(nonexpert / (TP * PP) + experts / (shards * PP)) / 1e9",
            [
                *([q("vision", vision_w, "B (vision encoder)")] if vision_w > 0 else []),
                q("nonexpert", nonexpert_weight_bytes(c)[i], "B"),
                q("experts", expert_weight_bytes(c)[i], "B (routed experts x b_e)"),
                q("TP", tp, ""),
                q("PP", pp, ""),
                q("shards", expert_shards(c)[i], "GPUs (EP if EP > 1 else TP)"),
            ],
            fit.weights_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
    s.append(_usable_step(c, fit, i))
    s.append(
        step(
            "workspace_gb_per_gpu",
            "max_num_batched_tokens * hidden * bytes_per_token_hidden / 1e9",
            [
                q("max_num_batched_tokens", c.max_num_batched_tokens[i], "tokens"),
                q("hidden", c.hidden_size[i], ""),
                q("bytes_per_token_hidden", c.workspace_bytes_per_token_hidden[i], "B"),
            ],
            fit.workspace_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
    budget_in = [
        q("usable", fit.usable_bytes_per_gpu[i], "B"),
        q("weights", fit.weights_bytes_per_gpu[i], "B"),
        q("workspace", fit.workspace_bytes_per_gpu[i], "B"),
        q("runtime_overhead", fit.runtime_overhead_bytes[i], "B"),
    ]
    pinned = float(fit.pinned_prefix_bytes_per_gpu[i])
    terms = ["usable", "weights", "workspace", "runtime_overhead"]
    if pinned > 0:
        budget_in.append(q("pinned_prefix", pinned, "B (shared prefix KV, once per replica)"))
        terms.append("pinned_prefix")
    draft_w = float(fit.draft_weight_bytes_per_gpu[i])
    if draft_w > 0:
        budget_in.append(q("draft_weights", draft_w, "B (speculative drafter, / TP)"))
        terms.append("draft_weights")
    adapters = float(fit.lora_resident_bytes_per_gpu[i])
    if adapters > 0:
        budget_in.append(q("lora_resident", adapters, "B (resident LoRA adapter slots)"))
        terms.append("lora_resident")
    budget_formula = f"({' - '.join(terms)}) / 1e9"
    s.append(
        step(
            "kv_budget_gb_per_gpu",
            budget_formula,
            budget_in,
            fit.kv_budget_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
    layers = [q("layers", c.full_layers[i] + c.sliding_layers[i], "attention layers")]
    if c.kv_lora_rank[i] > 0:
        per_layer = "(kv_lora_rank + qk_rope_head_dim)"
        kv_in = [
            q("kv_lora_rank", c.kv_lora_rank[i], ""),
            q("qk_rope_head_dim", c.qk_rope_head_dim[i], ""),
        ]
        per_layer_gpu, note_gpu = per_layer, "MLA: the latent is kept on every TP rank"
    else:
        per_layer = "2 * n_kv * head_dim"
        kv_in = [q("n_kv", c.num_kv_heads[i], "heads"), q("head_dim", c.head_dim[i], "")]
        per_layer_gpu = "2 * max(n_kv / TP, 1) * head_dim"
        note_gpu = "KV heads split over TP while n_kv >= TP, copied on every rank below that"
    b_kv_in = [q("b_kv", b_kv, "B"), q("kv_precision", c.kv_precision(i), "")]
    s.append(
        step(
            "kv_bytes_per_token",
            f"layers * {per_layer} * b_kv",
            [*layers, *kv_in, *b_kv_in],
            fit.kv_bytes_per_token[i],
            "B/token",
            "whole model, summed over GPUs, no replication",
        )
    )
    per_token_in = [*layers, *kv_in, q("b_kv", b_kv, "B"), q("TP", tp, ""), q("PP", pp, "")]
    per_token_formula = f"layers / PP * {per_layer_gpu} * b_kv"
    draft_kv = float(fit.draft_kv_bytes_per_token_per_gpu[i])
    if draft_kv > 0:
        per_token_in.append(q("draft_kv", draft_kv, "B/token (speculative drafter's cache)"))
        per_token_formula += " + draft_kv"
    s.append(
        step(
            "kv_bytes_per_token_per_gpu",
            per_token_formula,
            per_token_in,
            fit.kv_bytes_per_token_per_gpu[i],
            "B/token",
            note_gpu,
        )
    )
    fits = q("fits", 1.0 if fit.fits[i] else 0.0, "1 if the candidate fits")
    budget = q("kv_budget", fit.kv_budget_bytes_per_gpu[i], "B")
    s.append(
        step(
            "kv_capacity_tokens",
            "floor(max(kv_budget, 0) / kv_bytes_per_token_per_gpu) * DP * fits",
            [
                budget,
                q("kv_bytes_per_token_per_gpu", fit.kv_bytes_per_token_per_gpu[i], "B/token"),
                q("DP", dp, ""),
                fits,
            ],
            fit.kv_capacity_tokens[i],
            "tokens",
        )
    )
    ctx = allocated_context(c, fit.context_tokens[i : i + 1])[0]
    window = c.sliding_window[i] if c.sliding_window[i] > 0 else ctx
    s.append(
        step(
            "kv_bytes_per_sequence_per_gpu",
            "((full * ctx + sliding * min(ctx, window)) * elements_per_token_layer_gpu"
            " + linear * state / TP) * b_kv / PP" + (" + draft_kv * ctx" if draft_kv > 0 else ""),
            [
                *([q("draft_kv", draft_kv, "B/token (speculative drafter)")] if draft_kv else []),
                q("ctx", ctx, "tokens (context rounded up to KV blocks)"),
                q("full", c.full_layers[i], "layers"),
                q("sliding", c.sliding_layers[i], "layers"),
                q("window", window, "tokens"),
                q(
                    "elements_per_token_layer_gpu",
                    kv_elements_per_token_layer_per_gpu(c)[i],
                    "elements",
                ),
                q("linear", c.linear_layers[i], "linear-attention layers"),
                q("state", c.linear_state_elements[i], "elements per sequence per layer"),
                q("b_kv", b_kv, "B"),
                q("TP", tp, ""),
                q("PP", pp, ""),
            ],
            fit.kv_bytes_per_sequence_per_gpu[i],
            "B",
            ""
            if c.prefix_hit_rate[i] <= 0
            else "a hit shares the pinned prefix: h * kv(ctx - cached) + (1 - h) * kv(ctx)",
            kind="formula" if c.prefix_hit_rate[i] <= 0 else "model",
        )
    )
    s.append(
        step(
            "max_concurrency",
            "floor(max(kv_budget, 0) / kv_per_sequence) * DP * fits",
            [
                budget,
                q("kv_per_sequence", fit.kv_bytes_per_sequence_per_gpu[i], "B"),
                q("DP", dp, ""),
                fits,
            ],
            fit.max_concurrency[i],
            "sequences",
        )
    )
    if not fit.fits[i]:
        s.append(
            step(
                "fits",
                "layout valid and memory holds one sequence",
                [],
                "no",
                "",
                fit.reason(c, i),
                kind="model",
            )
        )
    return s


#: one stage's step: a roofline per kernel kind (steptime.stage_cost), the GEMMs' (the
#: totals less attention's) plus attention's, then the links, the hops and the host
STAGE_FORMULA = (
    "PP * (max(mem - attn_mem, flop - attn_flop) + max(attn_mem, attn_flop) + comm)"
    " + (PP - 1) * hop + overhead"
)


def _attention_inputs(st, i: int) -> list:
    shape = np.shape(st.stage_s)
    return [
        q("attn_mem", float(np.broadcast_to(st.attention_mem_s, shape)[i]) * 1e3, "ms"),
        q("attn_flop", float(np.broadcast_to(st.attention_flop_s, shape)[i]) * 1e3, "ms"),
    ]


def _attention_steps(c: CandidateArrays, st, i: int) -> list[Step]:
    """Attention's own kernels in a decode step: its cache read and its FLOPs (parts of the
    memory and FLOP totals above, timed apart from the GEMMs)."""
    shape = np.shape(st.stage_s)
    flops_a = float(np.broadcast_to(st.flops_attention_decode, shape)[i])
    return [
        step(
            "decode_attention_mem_ms",
            "kv_read / (BW * eta_mem) * 1e3",
            [
                q("kv_read", st.kv_bytes[i], "B"),
                q("BW", c.hbm_bytes_s[i], "B/s"),
                q("eta_mem", c.eta_mem[i], ""),
            ],
            float(np.broadcast_to(st.attention_mem_s, shape)[i]) * 1e3,
            "ms",
        ),
        step(
            "decode_attention_flop_ms",
            "flops_a / (F_a * eta_flop_decode) * 1e3",
            [
                q("flops_a", flops_a, "FLOP per GPU (QK^T and PV over the context)"),
                q("F_a", c.attention_peak_flops[i], "FLOP/s"),
                q("attention_compute_precision", c.attention_compute_precision(i), ""),
                q("eta_flop_decode", c.eta_flop_decode[i], ""),
            ],
            float(np.broadcast_to(st.attention_flop_s, shape)[i]) * 1e3,
            "ms",
        ),
    ]


def _operating_steps(
    c: CandidateArrays, fit: MemoryFit, op: OperatingPoint, i: int, spec: dict | None = None
) -> list:
    s: list[Step] = []
    pure, mixed, prefill = op.pure_step, op.mixed_step, op.prefill_step
    dp, pp = int(c.dp[i]), int(c.pp[i])
    b_rank = q("B_rank", op.batch_per_rank[i], "sequences per DP rank")
    isl, osl = q("isl", op.isl_tokens[i], "tokens"), q("osl", op.osl_tokens[i], "tokens")
    if c.prefix_hit_rate[i] > 0:
        s += prefix_steps(c, op, i)
        isl = q("isl", op.prefill_isl_tokens[i], "tokens prefilled (cached prefix skipped)")
    n_chunks = q("n_chunks", op.n_chunks[i], "steps")
    live = kv_sequences_live(c, fit, op.isl_tokens, op.osl_tokens)
    s.append(
        step(
            "kv_sequences_live",
            "max(floor(max(kv_budget, 0) / kv_per_live_sequence) * DP, max_concurrency)",
            [
                q("kv_budget", fit.kv_budget_bytes_per_gpu[i], "B"),
                q(
                    "kv_per_live_sequence",
                    _kv_per_live_sequence(c, op, i),
                    _claimed_label(c, i),
                ),
                q("DP", dp, ""),
                q("max_concurrency", fit.max_concurrency[i], "sequences at the full context"),
            ],
            live[i],
            "sequences",
            _claimed_note(c, i),
        )
    )
    s.append(
        step(
            "batch",
            "min(concurrency, kv_sequences_live, max_num_seqs * DP)",
            [
                q("concurrency", op.concurrency[i], "sequences"),
                q("kv_sequences_live", live[i], "sequences"),
                q("max_num_seqs", c.max_num_seqs[i], "sequences"),
                q("DP", dp, ""),
            ],
            op.batch[i],
            "sequences",
        )
    )
    s.append(
        step(
            "prefill_chunk_tokens",
            "max(min(isl, max(max_num_batched_tokens - B_rank, 64)), 1)",
            [isl, q("max_num_batched_tokens", c.max_num_batched_tokens[i], "tokens"), b_rank],
            op.chunk_tokens[i],
            "tokens",
        )
    )
    s.append(
        step(
            "n_chunks",
            "ceil(isl / chunk)",
            [isl, q("chunk", op.chunk_tokens[i], "tokens")],
            op.n_chunks[i],
            "steps",
        )
    )
    tau = float(c.spec_tokens_per_step[i])
    steps_out = "osl" if tau == 1.0 else "(osl / tau)"  # decode steps per request
    tau_in = [] if tau == 1.0 else [q("tau", tau, "tokens per speculative verify step")]
    s.append(
        step(
            "decode_seqs_per_step",
            f"B_rank * {steps_out} / (n_chunks + {steps_out})",
            [b_rank, osl, n_chunks, *tau_in],
            op.decode_seqs_per_step[i],
            "sequences",
        )
    )
    s.append(
        step(
            "prefill_tokens_per_step",
            f"B_rank * isl / (n_chunks + {steps_out})",
            [b_rank, isl, osl, n_chunks, *tau_in],
            op.prefill_tokens_per_step[i],
            "tokens",
        )
    )
    st = pure.stage
    mixed_row = bool(c.mixed_precision(i) and c.num_experts[i] > 0)
    if mixed_row:
        s += precision_steps(c, st, i)
    s.append(
        step(
            "decode_bytes_per_gpu_stage",
            "weights_touched + kv_read",
            [
                q("weights_touched", st.weight_bytes[i], "B"),
                q("kv_read", st.kv_bytes[i], "B"),
                q("mean_context", op.context_tokens[i], "tokens"),
            ],
            st.bytes[i],
            "B",
            "MoE: expected distinct experts E*(1-(1-k/E)^T); no input embedding",
        )
    )
    s.append(
        step(
            "decode_mem_ms",
            "bytes / (BW * eta_mem) * 1e3",
            [
                q("bytes", st.bytes[i], "B"),
                q("BW", c.hbm_bytes_s[i], "B/s"),
                q("eta_mem", c.eta_mem[i], ""),
            ],
            st.mem_s[i] * 1e3,
            "ms",
        )
    )
    flop_formula = "flops / (F * eta_flop_decode) * 1e3"
    flop_in = [
        q("flops", st.flops_decode[i], "FLOP per GPU (2 * P_a * T + attention)"),
        q("F", c.peak_flops[i], "FLOP/s"),
        q("compute_precision", c.compute_precision(i), ""),
        q("eta_flop_decode", c.eta_flop_decode[i], ""),
    ]
    flops_e = float(np.broadcast_to(st.flops_expert_decode, np.shape(st.flop_s))[i])
    flops_a = float(np.broadcast_to(st.flops_attention_decode, np.shape(st.flop_s))[i])
    own_attention = c.attention_peak_flops[i] != c.peak_flops[i]
    gemm, parts = "flops", []
    if flops_e > 0:  # the routed experts' FLOPs at their own peak
        gemm, parts = gemm + " - flops_e", [*parts, "flops_e / F_e"]
        flop_in += [
            q("flops_e", flops_e, "FLOP per GPU (2 * k * params_per_expert * L_moe * T)"),
            q("F_e", c.expert_peak_flops[i], "FLOP/s"),
            q("expert_compute_precision", c.expert_compute_precision(i), ""),
        ]
    if own_attention and flops_a > 0:  # attention at its cache's precision's peak
        gemm, parts = gemm + " - flops_a", [*parts, "flops_a / F_a"]
        flop_in += [
            q("flops_a", flops_a, "FLOP per GPU (attention: QK^T and PV over the context)"),
            q("F_a", c.attention_peak_flops[i], "FLOP/s"),
            q("attention_compute_precision", c.attention_compute_precision(i), ""),
        ]
    if parts:
        terms = " + ".join([f"({gemm}) / F", *parts])
        flop_formula = f"({terms}) / eta_flop_decode * 1e3"
    s.append(step("decode_flop_ms", flop_formula, flop_in, st.flop_s[i] * 1e3, "ms"))
    s += _attention_steps(c, st, i)
    s.append(
        step(
            "decode_comm_ms",
            "TP: 2 ring all-reduces per layer; EP: a dispatch and a combine per MoE layer, "
            "each token once per other rank holding one of its experts (steptime.py)",
            [
                q("TP", int(c.tp[i]), ""),
                q("EP", int(c.ep[i]), ""),
                q("link_one_way", c.link_bytes_s[i], "B/s"),
                q("link_efficiency", c.link_efficiency[i], ""),
            ],
            st.comm_s[i] * 1e3,
            "ms",
            kind="model",
        )
    )
    s.append(
        step(
            "pure_decode_step_ms",
            STAGE_FORMULA + draft_term(pure, i),
            [
                q("mem", st.mem_s[i] * 1e3, "ms"),
                q("flop", st.flop_s[i] * 1e3, "ms"),
                *_attention_inputs(st, i),
                q("comm", st.comm_s[i] * 1e3, "ms"),
                q("hop", pure.hop_s[i] * 1e3, "ms"),
                q("overhead", pure.overhead_s[i] * 1e3, "ms"),
                q("PP", pp, ""),
                *draft_input(pure, i),
            ],
            pure.step_s[i] * 1e3,
            "ms",
        )
    )
    s.append(_prefill_group_step(c, op, i, b_rank, isl))
    for name, st_time, what in (
        ("mixed_step_ms", mixed, "a decode step carrying one prompt chunk"),
        ("prefill_step_ms", prefill, "the step that prefills a prompt (chunk + co-released)"),
    ):
        s.append(
            step(
                name,
                STAGE_FORMULA + draft_term(st_time, i),
                [
                    q("mem", st_time.stage.mem_s[i] * 1e3, "ms"),
                    q("flop", st_time.stage.flop_s[i] * 1e3, "ms (decode + prefill FLOPs)"),
                    *_attention_inputs(st_time.stage, i),
                    q("comm", st_time.stage.comm_s[i] * 1e3, "ms"),
                    q("hop", st_time.hop_s[i] * 1e3, "ms"),
                    q("overhead", st_time.overhead_s[i] * 1e3, "ms"),
                    q("PP", pp, ""),
                    *draft_input(st_time, i),
                ],
                st_time.step_s[i] * 1e3,
                "ms",
                what,
            )
        )
    s.append(
        step(
            "mean_tpot_ms",
            "(1 - f) * pure_step + f * mixed_step, blended toward grouped prefill steps "
            "once prompts outnumber one chunk per step (operating.py)",
            [
                q("f", op.mixed_step_fraction[i], "share of mixed steps"),
                q("pure_step", pure.step_s[i] * 1e3, "ms"),
                q("mixed_step", mixed.step_s[i] * 1e3, "ms"),
                q("prefill_step", prefill.step_s[i] * 1e3, "ms"),
            ],
            op.tpot_s[i] * 1e3,
            "ms",
            kind="model",
        )
    )
    s.append(
        step(
            "mean_ttft_ms",
            "frontend + residual + recv_wait + (n_chunks - 1 + wait_steps) * prefill_step"
            " + last_step + swap_in + queue",
            [
                q("frontend", op.frontend_s[i] * 1e3, "ms (engine front end)"),
                q("residual", op.arrival_residual_s[i] * 1e3, "ms (step in progress)"),
                q("recv_wait", op.recv_wait_s[i] * 1e3, "ms (scheduler's next poll)"),
                n_chunks,
                q("wait_steps", op.prefill_wait_steps[i], "steps (M/D/1, damped, or wave)"),
                q("prefill_step", prefill.step_s[i] * 1e3, "ms"),
                q("last_step", op.last_prefill_step_s[i] * 1e3, "ms (the prompt's last chunk)"),
                q("swap_in", op.swap_in_s[i] * 1e3, "ms (LoRA adapter)"),
                q("queue", op.queue_s[i] * 1e3, "ms"),
            ],
            op.ttft_s[i] * 1e3,
            "ms",
        )
    )
    if c.lora_rank[i] > 0:
        s += lora_steps(c, fit, op, i)
    if c.spec_tokens[i] > 0:
        if spec is None:  # one row (predict's derivation): evaluate it alone
            one = slice(i, i + 1)
            arrays = speculative_arrays(
                c.take(np.array([i])), op.decode_seqs_per_step[one], op.context_tokens[one]
            )
            s += speculative_steps(c, op, i, arrays, 0)
        else:
            s += speculative_steps(c, op, i, spec, i)
    ttft, tpot = q("TTFT", op.ttft_s[i], "s"), q("TPOT", op.tpot_s[i], "s")
    s.append(step("residence_s", "TTFT + osl * TPOT", [ttft, osl, tpot], op.residence_s[i], "s"))
    s.append(
        step(
            "mean_value_rps_per_replica",
            "B_rank * DP / (TTFT - queue + osl * TPOT)",
            [b_rank, q("DP", dp, ""), ttft, q("queue", op.queue_s[i], "s"), osl, tpot],
            op.requests_per_s[i],
            "req/s",
            "Little's law: X = B / W over all DP ranks",
        )
    )
    s.append(
        step(
            "mean_value_output_tok_s_per_replica",
            "requests_per_s * osl",
            [q("requests_per_s", op.requests_per_s[i], "req/s"), osl],
            op.output_tokens_per_s[i],
            "tokens/s",
        )
    )
    return s


def _prefill_group_step(c: CandidateArrays, op: OperatingPoint, i: int, b_rank, isl) -> Step:
    """The prompt tokens of the step that prefills a request (``prefill_group_tokens``)."""
    lock = "min(B_rank * isl, budget - dec)"
    apart = "min(chunk + P, budget - dec, B_rank * isl)"
    return step(
        "prefill_step_tokens",
        f"max({lock} - (1 - q) * ({lock} - {apart}), chunk)",
        [
            b_rank,
            isl,
            q("budget", c.max_num_batched_tokens[i], "tokens (max_num_batched_tokens)"),
            q("dec", op.decode_seqs_per_step[i], "sequences"),
            q("chunk", op.chunk_tokens[i], "tokens"),
            q("P", op.prefill_tokens_per_step[i], "tokens arriving per step"),
            q("q", op.prefill_group_coherence[i], "share of the lock-step group"),
        ],
        op.prefill_step_tokens[i],
        "tokens",
        "equal lengths keep closed-loop clients in lock step (q = 1); drawn lengths drift "
        "them apart (q = prefill_wave_fraction)",
    )


# ============================================================================ plan
@dataclass(frozen=True)
class Candidate:
    """One deployable configuration to size."""

    model: ModelSpec
    gpu: GpuSpec
    weight_precision: str = "bf16"
    parallelism: Parallelism = Parallelism()
    kv_precision: str | None = None
    engine: EngineSettings = EngineSettings()
    calibration: Calibration = Calibration()
    label: str = ""
    #: the routed experts' precision when the checkpoint mixes them (None: as published,
    #: ``candidates.expert_precision_of``: the checkpoint's own, else weight_precision)
    expert_precision: str | None = None
    #: the embedding and LM head's precision (None: max(b_w, 2), i.e. bf16 when quantized)
    embedding_precision: str | None = None


@dataclass(frozen=True)
class PlanRow:
    """One candidate through the whole chain. Money in USD; ``inf``/NaN where undefined."""

    rank: int
    label: str
    model: str
    gpu: str
    weight_precision: str
    kv_precision: str
    tp: int
    pp: int
    ep: int
    dp: int
    gpus_per_replica: int
    fits: bool
    reason: str
    weights_gb_per_gpu: float
    kv_bytes_per_token: float
    kv_capacity_tokens: float
    max_concurrency: float
    batch: float
    ttft_ms: float
    tpot_ms: float
    requests_per_s_per_replica: float
    output_tok_s_per_replica: float
    in_flight_at_peak: float
    serving_replicas: int
    replicas: int
    gpus: int
    utilization: float
    usd_per_hour: float
    usd_per_month: float
    usd_per_mtok: float  # output tokens
    usd_per_mtok_total: float  # input + output tokens
    tokens_per_usd: float  # output tokens
    binding: str
    meets_slo: bool
    breakeven: BreakEvenResult | None
    derivation: tuple[Step, ...] = field(repr=False)
    latency_source: str = "analytic"  # "simulated" or "analytic"
    latency_statistic: str = "mean"  # what ttft_ms / tpot_ms are: "p95", ... or "mean"
    latency_ms: dict = field(default_factory=dict)  # {"ttft": {"p50":..}, "tpot": {..}}
    mean_value_rps: float = math.nan  # the mean-value operating point's req/s per replica
    mean_value_ttft_ms: float = math.nan
    mean_value_tpot_ms: float = math.nan
    band: Band | None = None  # replicas and cost at the profile's error, on the final sizing
    profile: str = "physics defaults"  # calibration profile used
    engine_binding: str = ""  # which engine setting decides the memory outcome
    #: speculative decoding: "" not asked; "on" / "off" which the plan kept (the cheaper)
    speculative: str = ""
    #: the chunk-budget sweep: ({"max_num_batched_tokens", "ttft_long_ms", "tpot_stall_ms"},..)
    chunk_frontier: tuple = ()
    #: the warm pool in ``replicas``: from the burst when the policy states one, else typed
    warm_pool_replicas: int = 0
    #: the prefix-cache hit rate the row was sized at (the routing policy's when it has one)
    prefix_hit_rate: float = 0.0
    #: "agg" (one engine runs both phases) or "disagg" (sizing.disagg_plan: separate pools)
    mode: str = "agg"
    #: the routed experts' own precision: the candidate's, else the published checkpoint's
    #: (``candidates.expert_precision_of``); '' when they are at ``weight_precision``
    expert_precision: str = ""
    #: disaggregated rows: per pool ("prefill", "decode") tp, pp, ep, dp, workers, gpus
    pools: dict = field(default_factory=dict)
    #: disaggregated rows: the KV transfer one request's first token waits for (ms)
    kv_transfer_ms: float = math.nan


@dataclass(frozen=True)
class Plan:
    """Ranked rows (SLO-meeting first, then by $/month, then $/M tokens) and the cheapest
    SLO-meeting row per GPU SKU name."""

    rows: tuple[PlanRow, ...]
    cheapest_per_gpu: dict[str, PlanRow]
    traffic: Traffic
    slo: Slo
    policy: Policy

    @property
    def best(self) -> PlanRow | None:
        return self.rows[0] if self.rows and self.rows[0].meets_slo else None


def candidate_arrays(candidates: Sequence[Candidate]) -> CandidateArrays:
    """``CandidateArrays`` for a list of ``Candidate`` (one row each)."""
    cands = list(candidates)
    return CandidateArrays.build(
        [k.model for k in cands],
        [k.gpu for k in cands],
        [k.weight_precision for k in cands],
        [k.kv_precision for k in cands],
        [k.parallelism.tp for k in cands],
        [k.parallelism.pp for k in cands],
        [k.parallelism.ep for k in cands],
        [k.parallelism.dp for k in cands],
        [k.engine for k in cands],
        [k.calibration for k in cands],
        expert_precision=[k.expert_precision for k in cands],
        embedding_precision=[k.embedding_precision for k in cands],
    )


def _finite_int(x: float) -> int:
    return int(x) if math.isfinite(x) else 0


@dataclass(frozen=True)
class Capacity:
    """A replica's capacity and tail latencies from outside the closed forms (the simulator):
    one entry per candidate, None where the chain's own analytic model should be used.

    ``rate_rps``: highest request rate per replica meeting the SLO percentile and goodput;
    ``latency_ms``: {"ttft": {"p50": ...}, "tpot": {...}} at the fleet's peak load per replica;
    ``meets_slo``, ``binding``; ``steps``: the derivation of how it was found (kind
    ``simulation``), inserted before the headroom stage.
    """

    rate_rps: float
    latency_ms: dict
    meets_slo: bool
    binding: str
    source: str = "simulated"
    steps: tuple[Step, ...] = ()
    #: the prefix-cache hit rate the simulation ran at (the routing policy's, from
    #: ``analytic_choices``); None: the traffic's. The chain then uses the same one.
    prefix_hit_rate: float | None = None
    #: "on" / "off": whether the simulation kept speculative decoding (the analytic plan's
    #: choice); "" when the candidate does not speculate
    speculative: str = ""


QUANTILES = (0.5, 0.95, 0.99)
STAGE_VISION = "Vision input"
STAGE_MEMORY = "Memory fit"
STAGE_ENGINE = "Engine settings"
STAGE_ROUTING = "Routing and prefix cache"
STAGE_OPERATING = "Step time and mean-value operating point"
STAGE_TAILS = "Tail latency and capacity per replica"
STAGE_FLEET = "Little's law, headroom and cost"
STAGE_BAND = "Error band"
STAGE_BREAKEVEN = "Break-even against the API"


def plan(
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    candidates: Sequence[Candidate],
    api_price: ApiPrice | Sequence[ApiPrice | None] | None = None,
    tails: TailConstants | None = DEFAULT_TAILS,
    capacity: Sequence[Capacity | None] | None = None,
) -> Plan:
    """Size every candidate for ``traffic`` under ``slo`` and ``policy`` and rank them.

    Memory fit at the mean request (``prompt + output`` tokens) for capacity; the p95
    lengths, when given, must also fit as one sequence. The mean-value operating point
    (``operating.slo_operating_point``: the largest batch meeting both *mean* latencies) is
    derived for every row. The capacity per replica that sizes the fleet is, per row:
    ``capacity[i]`` when given (the simulator's, ``latency_source`` "simulated"); else the
    analytic percentile model's (``sizing.tail_model``, fitted to the simulator: the rate
    meeting the SLO percentile and goodput; "analytic"); with ``tails=None`` the mean-value
    rate itself (statistic "mean", for checks against the closed forms). That capacity enters
    the one headroom -> cost -> break-even -> band stage (``sizing.fleet``). ``api_price``:
    one for every candidate, or one per candidate (each model's own API: a run sizes all its
    models in one call, since a row's numbers depend on its own inputs only).
    """
    cands = list(candidates)
    if not cands:
        return Plan((), {}, traffic, slo, policy)
    api_price = api_prices(api_price, len(cands))
    if traffic.images_per_request > 0 and traffic.image_tokens <= 0:
        # vision-language prompts: each model's image tokens join its prompt (sizing.vision)
        groups: dict[float, list[int]] = {}
        for i, k in enumerate(cands):
            groups.setdefault(vision.tokens_per_image(k.model, traffic), []).append(i)
        rows: list = [None] * len(cands)
        for per_image, idx in groups.items():
            given = None if capacity is None else [capacity[i] for i in idx]
            prices = [api_price[i] for i in idx]
            sub = _plan_unranked([cands[i] for i in idx], vision.fold_images(traffic, per_image),
                                 slo, policy, prices, tails, given)  # fmt: skip
            for i, row in zip(idx, sub, strict=True):
                rows[i] = row
        return _ranked(rows, traffic, slo, policy)
    rows = _plan_unranked(cands, traffic, slo, policy, api_price, tails, capacity)
    return _ranked(rows, traffic, slo, policy)


def api_prices(
    api_price: ApiPrice | Sequence[ApiPrice | None] | None, n: int
) -> list[ApiPrice | None]:
    """One API alternative per candidate: ``api_price`` for all ``n``, or the list given
    (its length checked)."""
    if api_price is None or isinstance(api_price, ApiPrice):
        return [api_price] * n
    prices = list(api_price)
    if len(prices) != n:
        raise ValueError(f"api_price: {len(prices)} prices for {n} candidates")
    return prices


def _plan_unranked(cands, traffic, slo, policy, api_price, tails, capacity) -> list[PlanRow]:
    args = (traffic, slo, policy, api_price, tails, capacity)
    rows = _plan_rows(cands, *args)
    rows, routed = _route(rows, cands, *args)
    return _speculative_choice(rows, cands, *args, routed)


def _plan_rows(
    cands: list[Candidate],
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    api_price: Sequence[ApiPrice | None],
    tails: TailConstants | None,
    capacity: Sequence[Capacity | None] | None,
    routed: _Routed | None = None,
) -> list[PlanRow]:
    """Every candidate through the chain (unranked). ``api_price``: each candidate's API
    alternative (or None). ``routed``: the prefix hit rate and load imbalance the routing
    policy gives each row (``_route``), else the traffic's."""
    c = candidate_arrays(cands)
    n = len(c)
    hit = routed.hit_rate if routed is not None else np.full(n, traffic.prefix_hit_rate)
    if traffic.shared_prefix_tokens > 0 and np.any(hit > 0):
        c = c.with_prefix(traffic.shared_prefix_tokens, hit)
    imbalance = routed.imbalance if routed is not None else np.ones(n)
    isl, osl = float(traffic.prompt_tokens_mean), float(traffic.output_tokens_mean)
    if traffic.image_tokens > 0:  # image tokens folded into the prompt (sizing.vision)
        c = vision.with_images(c, traffic.image_tokens, isl)
    fit, reasons = _fit_with_tails(c, traffic)
    sp = slo_operating_point(c, fit, isl, osl, slo.tpot_ms / 1e3, slo.ttft_ms / 1e3)
    op = sp.point
    given = list(capacity) if capacity is not None else [None] * n
    stage = _capacity_stage(c, fit, sp, traffic, slo, policy, tails, given)
    fleet = size_fleet(
        stage.rate_rps / imbalance,  # affinity routing: the hottest replica sets the count
        stage.residence_s,
        traffic,
        policy,
        c.gpus_per_instance,
        c.usd_per_gpu_hour,
        fit.fits & (stage.rate_rps > 0),
        fit.weights_gb_per_gpu,
    )

    live = kv_sequences_live(c, fit, op.isl_tokens, op.osl_tokens)
    long_prompt = float(traffic.prompt_tokens_p95 or traffic.prompt_tokens_mean)
    frontier = chunk_frontier(c, op.decode_seqs_per_step, op.context_tokens, long_prompt)
    tpot_slo_s = slo.tpot_ms / 1e3
    spec = speculative_arrays(c, op.decode_seqs_per_step, op.context_tokens)
    bindings = binding_settings(c, fit, live)
    engine = EngineArrays(
        live,
        frontier,
        tpot_slo_s,
        bindings,
        *engine_arrays(c, fit),
        frontier.recommended(tpot_slo_s),
    )
    rows: list[PlanRow] = []
    for i in range(n):
        d = []
        if traffic.image_tokens > 0:
            d += staged(
                STAGE_VISION, vision.vision_steps(c, traffic, isl - traffic.image_tokens, i)
            )
        d += staged(STAGE_MEMORY, _memory_steps(c, fit, i))
        ok = bool(fit.fits[i])
        serves = ok and stage.rate_rps[i] > 0
        bev, band = None, None
        if ok:
            d += staged(STAGE_OPERATING, _operating_steps(c, fit, op, i, spec))
            d += staged(STAGE_TAILS, stage.steps[i])
        if routed is not None and routed.steps[i]:
            d += staged(STAGE_ROUTING, routed.steps[i])
        if serves:
            d += staged(STAGE_FLEET, fleet.steps(i))
            if c.lora_rank[i] > 0:
                d += staged(STAGE_FLEET, [lora_fleet_step(c, fleet, i)])
            band, band_steps = error_band(fleet, i, cands[i].calibration.relative_error)
            d += staged(STAGE_BAND, band_steps)
        if serves and api_price[i] is not None:
            bev, bev_steps = breakeven(fleet, i, api_price[i])
            d += staged(STAGE_BREAKEVEN, bev_steps)
        # last, so the chain's stages keep their order: which setting binds, chunk frontier
        d += staged(STAGE_ENGINE, engine_steps(c, fit, engine, i))
        latency = stage.latency_ms[i]
        rows.append(
            PlanRow(
                rank=0,
                label=cands[i].label or f"{c.model_name(i)} on {c.gpu_name(i)}",
                model=c.model_name(i),
                gpu=c.gpu_name(i),
                weight_precision=c.weight_precision(i),
                kv_precision=c.kv_precision(i),
                tp=int(c.tp[i]),
                pp=int(c.pp[i]),
                ep=int(c.ep[i]),
                dp=int(c.dp[i]),
                gpus_per_replica=int(c.gpus_per_instance[i]),
                fits=ok,
                reason=str(reasons[i]),
                weights_gb_per_gpu=float(fit.weights_gb_per_gpu[i]),
                kv_bytes_per_token=float(fit.kv_bytes_per_token[i]),
                kv_capacity_tokens=float(fit.kv_capacity_tokens[i]),
                max_concurrency=float(fit.max_concurrency[i]),
                batch=float(op.batch[i]),
                ttft_ms=float(latency["ttft"][stage.statistic]) if ok else math.nan,
                tpot_ms=float(latency["tpot"][stage.statistic]) if ok else math.nan,
                requests_per_s_per_replica=float(stage.rate_rps[i]),
                output_tok_s_per_replica=float(stage.rate_rps[i] * osl),
                in_flight_at_peak=float(fleet.in_flight_at_peak[i]) if ok else math.nan,
                serving_replicas=_finite_int(fleet.serving[i]),
                warm_pool_replicas=int(fleet.warm.replicas[i]),
                replicas=_finite_int(fleet.replicas[i]),
                gpus=_finite_int(fleet.gpus[i]),
                utilization=float(fleet.utilization[i]),
                usd_per_hour=float(fleet.usd_per_hour[i]),
                usd_per_month=float(fleet.usd_per_month[i]),
                usd_per_mtok=float(fleet.usd_per_mtok[i]),
                usd_per_mtok_total=float(fleet.usd_per_mtok_total[i]),
                tokens_per_usd=float(fleet.tokens_per_usd[i]),
                binding=stage.binding[i] if ok else BINDING_NAMES[sp.binding_code[i]],
                meets_slo=bool(ok and stage.meets_slo[i]),
                breakeven=bev,
                derivation=tuple(d),
                latency_source=stage.source[i],
                latency_statistic=stage.statistic,
                latency_ms=latency if ok else {},
                mean_value_rps=float(op.requests_per_s[i]),
                mean_value_ttft_ms=float(op.ttft_s[i] * 1e3) if ok else math.nan,
                mean_value_tpot_ms=float(op.tpot_s[i] * 1e3) if ok else math.nan,
                band=band,
                profile=cands[i].calibration.name or "physics defaults",
                engine_binding=bindings[i],
                chunk_frontier=frontier_rows(frontier, i) if ok else (),
                prefix_hit_rate=float(c.prefix_hit_rate[i]),
                expert_precision=expert_precision_of(cands[i].model, cands[i].expert_precision),
            )
        )
    return rows


def _ranked(rows: list[PlanRow], traffic: Traffic, slo: Slo, policy: Policy) -> Plan:
    n = len(rows)
    order = sorted(
        range(n),
        key=lambda i: (
            not rows[i].meets_slo,
            not rows[i].fits,
            rows[i].usd_per_month,
            rows[i].usd_per_mtok,
        ),
    )
    ranked = tuple(PlanRow(**{**rows[i].__dict__, "rank": r + 1}) for r, i in enumerate(order))
    cheapest: dict[str, PlanRow] = {}
    for row in ranked:
        if row.meets_slo and row.gpu not in cheapest:
            cheapest[row.gpu] = row
    return Plan(ranked, cheapest, traffic, slo, policy)


def _fit_with_tails(c: CandidateArrays, traffic: Traffic):
    """Memory fit at the mean request, and the p95 request must fit as one sequence."""
    n = len(c)
    isl, osl = float(traffic.prompt_tokens_mean), float(traffic.output_tokens_mean)
    fit = fit_memory(c, np.full(n, isl + osl))
    reasons = fit.reasons(c)
    if traffic.prompt_tokens_p95 or traffic.output_tokens_p95:
        tail_ctx = (traffic.prompt_tokens_p95 or isl) + (traffic.output_tokens_p95 or osl)
        tail = fit_memory(c, np.full(n, tail_ctx))
        tail_reasons = tail.reasons(c)
        reasons = np.where(fit.fits, tail_reasons, reasons)
        fits = fit.fits & tail.fits
        fit = dataclasses.replace(
            fit,
            fits=fits,
            reason_code=np.where(fit.fits, tail.reason_code, fit.reason_code),
            max_concurrency=np.where(fits, fit.max_concurrency, 0.0),
            kv_capacity_tokens=np.where(fits, fit.kv_capacity_tokens, 0.0),
        )
    return fit, reasons


@dataclass(frozen=True)
class _Stage:
    rate_rps: np.ndarray
    residence_s: np.ndarray
    latency_ms: list[dict]
    meets_slo: np.ndarray
    binding: list[str]
    source: list[str]
    statistic: str
    steps: list[list[Step]]


def percentile_key(quantile: float) -> str:
    return f"p{quantile * 100:g}"


def _capacity_stage(c, fit, sp, traffic, slo, policy, tails, given) -> _Stage:
    """Per row: the capacity that sizes the fleet and the latencies shown with it."""
    n = len(c)
    op = sp.point
    if tails is None:  # the mean-value chain alone
        latency = [
            {"ttft": {"mean": op.ttft_s[i] * 1e3}, "tpot": {"mean": op.tpot_s[i] * 1e3}}
            for i in range(n)
        ]
        binding = [BINDING_NAMES[b] for b in sp.binding_code]
        return _Stage(
            op.requests_per_s, op.residence_s, latency, sp.meets_slo, binding,
            ["analytic"] * n, "mean", [[] for _ in range(n)],
        )  # fmt: skip
    statistic = f"p{slo.percentile:g}"
    quantiles = tuple(sorted({*QUANTILES, slo.percentile / 100}))
    lengths = Lengths(
        traffic.prompt_tokens_mean,
        traffic.output_tokens_mean,
        traffic.prompt_tokens_p95,
        traffic.output_tokens_p95,
    )
    if all(g is not None for g in given):  # every capacity given (simulated): no analytic search
        return _given_stage(given, traffic, statistic)
    model = TailModel(c, fit, lengths, tails)
    rate, tail_binding = model.max_rate(slo)
    serving = headroom.serving_replicas(
        traffic.peak_rps, rate, policy.target_utilization, policy.burst_factor
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        load = np.where(rate > 0, traffic.peak_rps * policy.burst_factor / serving, 0.0)
    at = model.at_rate(np.where(rate > 0, load, op.requests_per_s * 0.5), quantiles)
    rates = rate.copy()
    residence = np.array(at.ttft_s[0.5] + traffic.output_tokens_mean * at.tpot_s[0.5])
    latency, meets, binding, source, steps = [], [], [], [], []
    for i in range(n):
        if given[i] is not None:
            rates[i], residence[i], row_latency, ok, row_binding, row_source, row_steps = (
                _given_row(given[i], traffic)
            )
            latency.append(row_latency)
            meets.append(ok)
            binding.append(row_binding)
            source.append(row_source)
            steps.append(row_steps)
            continue
        row = {
            name: {percentile_key(q): float(values[q][i] * 1e3) for q in quantiles}
            for name, values in (("ttft", at.ttft_s), ("tpot", at.tpot_s))
        }
        ok = bool(rate[i] > 0)
        latency.append(row)
        meets.append(ok and fit.fits[i])
        binding.append(_tail_binding(tail_binding[i], fit, c, i))
        source.append("analytic")
        steps.append(
            _analytic_steps(model, traffic, slo, policy, i, (rate[i], serving[i], load[i]), row, op)
            if fit.fits[i]
            else []
        )
    return _Stage(
        rates, residence, latency, np.array(meets, dtype=bool), binding, source, statistic, steps
    )


def _given_stage(given: list[Capacity], traffic: Traffic, statistic: str) -> _Stage:
    """The stage when every row's capacity comes from elsewhere (the simulator)."""
    rate, residence, latency, meets, binding, source, steps = zip(
        *(_given_row(g, traffic) for g in given), strict=True
    )
    return _Stage(
        np.array(rate, dtype=np.float64),
        np.array(residence, dtype=np.float64),
        list(latency),
        np.array(meets, dtype=bool),
        list(binding),
        list(source),
        statistic,
        list(steps),
    )


def _given_row(g: Capacity, traffic: Traffic) -> tuple:
    """One row's stage values from a given capacity: (rate, residence, latency, meets,
    binding, source, steps); the same for a whole given stage and a mixed one."""
    residence = _given_residence_s(traffic, g)
    return g.rate_rps, residence, g.latency_ms, g.meets_slo, g.binding, g.source, list(g.steps)


def _given_residence_s(traffic: Traffic, given: Capacity) -> float:
    """Little's-law residence of a request at a given capacity: median TTFT + decode (s)."""
    return (given.latency_ms["ttft"]["p50"] + osl_ms(traffic, given)) / 1e3


def osl_ms(traffic: Traffic, given: Capacity) -> float:
    """Decode time of a mean output at the median TPOT (ms)."""
    return traffic.output_tokens_mean * given.latency_ms["tpot"]["p50"]


def _tail_binding(binding: str, fit: MemoryFit, c: CandidateArrays, i: int) -> str:
    if binding == "throughput" and fit.max_concurrency[i] <= c.max_num_seqs[i] * c.dp[i]:
        return "memory"
    return binding or "tpot"


def _analytic_steps(model, traffic, slo, policy, i, sizing, row, op) -> list[Step]:
    k = model.k
    rate, serving, load = sizing
    pct = f"p{slo.percentile:g}"
    return [
        step(
            "analytic_max_rate_rps",
            f"largest Poisson rate with {pct} and goodput-quantile TTFT and TPOT within the "
            "SLO (sizing/tail_model.py: TPOT at N + a z sqrt(N) in flight plus the mixed steps of "
            "the prefill queue's busy periods, TTFT = front end + "
            "own prefill + M/G/1 prefill-queue wait, the queue drained at full steps)",
            [
                q("ttft_slo", slo.ttft_ms, "ms"),
                q("tpot_slo", slo.tpot_ms, "ms"),
                q("percentile", slo.percentile, ""),
                q("goodput_target", slo.goodput_target, ""),
                q("tpot_spread a", k.tpot_spread, ""),
                q("ttft_wait b", k.ttft_wait, ""),
                q("ttft_base c", k.ttft_base, ""),
                q("tpot_mix d", k.tpot_mix, ""),
                q("tpot_busy e", k.tpot_busy, ""),
                q("mean-value X", op.requests_per_s[i], "req/s per replica"),
            ],
            rate,
            "req/s per replica",
            "0: no rate meets the SLO percentile" if rate <= 0 else k.source,
            kind="search",
        ),
        step(
            "load_rps_per_replica",
            "peak_rps * burst / serving",
            [
                q("peak_rps", traffic.peak_rps, "req/s"),
                q("burst", policy.burst_factor, ""),
                q("serving", serving, "replicas"),
            ],
            load,
            "req/s per replica",
            "the percentiles below are at this load",
        )
        if rate > 0
        else step("load_rps_per_replica", "no replica meets the SLO", [], 0.0, "", kind="model"),
        *[
            step(
                f"{name}_ms_{pct}",
                f"{pct} of {name.upper()} at the load per replica (analytic)",
                [q(key, value, "ms") for key, value in row[name].items()],
                row[name][pct],
                "ms",
                kind="model",
            )
            for name in ("ttft", "tpot")
        ],
    ]


def _claimed_label(c: CandidateArrays, i: int) -> str:
    if c.kv_reserves_output[i] > 0:
        return "B (prompt + the whole output, reserved at admission, block-rounded)"
    return "B (prompt + half the output, block-rounded)"


def _claimed_note(c: CandidateArrays, i: int) -> str:
    if c.kv_reserves_output[i] > 0:
        return ("TensorRT-LLM's default scheduler (GUARANTEED_NO_EVICT) reserves each "
                "sequence's whole output before admitting it")  # fmt: skip
    return "paged KV holds each sequence's live context, not its final length"


def _kv_per_live_sequence(c: CandidateArrays, op: OperatingPoint, i: int) -> float:
    claimed = admitted_context_tokens(c, op.isl_tokens, op.osl_tokens)
    return float(kv_bytes_per_request_per_gpu(c, claimed)[i])


# ---------------------------------------------------------------------------- speculative


def _speculative_choice(rows, cands, traffic, slo, policy, api_price, tails, capacity, routed):
    """Each speculating candidate sized again without speculative decoding; the cheaper one
    under the SLO is kept (a simulated capacity is for the configuration as given: kept)."""
    if capacity is not None and any(x is not None for x in capacity):
        return _simulated_speculative(rows, cands, capacity)
    spec = [i for i, k in enumerate(cands) if k.engine.spec_method]
    if not spec:
        return rows
    off = [dataclasses.replace(k, engine=dataclasses.replace(k.engine, spec_method=""))
           for k in cands]  # fmt: skip
    rows_off = _plan_rows(off, traffic, slo, policy, api_price, tails, capacity, routed)
    out = list(rows)
    for i in spec:
        on, plain = rows[i], rows_off[i]
        # a tie keeps the simpler deployment: the same bill to the cent is a tie (the $/M
        # tokens of two equal bills differ only by float rounding: both serve the same load)
        keep_on = _bill_key(on) < _bill_key(plain)
        chosen = on if keep_on else plain
        choice = step(
            "speculative_decoding",
            "keep the cheaper of with / without under the SLO (a tie: without)",
            [
                q("usd_per_month_with", on.usd_per_month, "USD"),
                q("meets_slo_with", 1.0 if on.meets_slo else 0.0, ""),
                q("usd_per_month_without", plain.usd_per_month, "USD"),
                q("meets_slo_without", 1.0 if plain.meets_slo else 0.0, ""),
            ],
            "on" if keep_on else "off",
            "",
            kind="model",
        )
        out[i] = dataclasses.replace(
            chosen,
            speculative="on" if keep_on else "off",
            derivation=chosen.derivation + tuple(staged(STAGE_OPERATING, [choice])),
        )
    return out


def _simulated_speculative(rows, cands, capacity) -> list[PlanRow]:
    """A simulated capacity is for the configuration the simulation ran (the analytic plan's
    with/without choice, ``Capacity.speculative``): the row says which, with a step."""
    out = list(rows)
    for i, k in enumerate(cands):
        given = capacity[i]
        if given is None or not given.speculative:
            continue
        choice = step(
            "speculative_decoding",
            "the analytic plan's choice of with / without, simulated as chosen",
            [q("speculating", 1.0 if k.engine.spec_method else 0.0, "in the simulated step")],
            given.speculative,
            "",
            kind="model",
        )
        out[i] = dataclasses.replace(
            rows[i],
            speculative=given.speculative,
            derivation=rows[i].derivation + tuple(staged(STAGE_OPERATING, [choice])),
        )
    return out


def analytic_choices(
    candidate: Candidate, traffic: Traffic, slo: Slo, policy: Policy
) -> tuple[float, str]:
    """(prefix-cache hit rate, speculative "on"/"off"/"") the analytic plan settles on for one
    candidate: the routing policy's hit rate for the replicas it sizes, and whether
    speculative decoding is kept. The simulator runs at these, so both paths agree."""
    row = plan(traffic, slo, policy, [candidate]).rows[0]
    return row.prefix_hit_rate, row.speculative


def _order_key(row: PlanRow) -> tuple:
    return (not row.meets_slo, not row.fits, row.usd_per_month, row.usd_per_mtok)


def _bill_key(row: PlanRow) -> tuple:
    return (not row.meets_slo, not row.fits, round(float(row.usd_per_month), 2))


# ---------------------------------------------------------------------------- routing
@dataclass(frozen=True)
class _Routed:
    hit_rate: np.ndarray
    imbalance: np.ndarray
    steps: list


def _route(rows, cands, traffic, slo, policy, api_price, tails, capacity):
    """Rows with a routing policy sized again at the hit rate and load imbalance that
    policy reaches (sizing.routing) for the replicas and free KV of the first pass."""
    prefix = float(traffic.shared_prefix_tokens)
    routed = [i for i, k in enumerate(cands) if k.engine.routing and k.engine.distinct_prefixes]
    if prefix <= 0 or not routed:
        return rows, None
    n = len(cands)
    hit, imbalance = np.full(n, float(traffic.prefix_hit_rate)), np.ones(n)
    steps: list[list[Step]] = [[] for _ in range(n)]
    live = float(traffic.prompt_tokens_mean + 0.5 * traffic.output_tokens_mean)
    for i in routed:
        row, e = rows[i], cands[i].engine
        if not row.fits:
            continue
        r = max(row.serving_replicas, 1)
        free = row.kv_capacity_tokens - row.batch * live
        cached = routing.cache_prefixes(free, prefix)
        hit[i] = routing.hit_rate(e.routing, cached, e.distinct_prefixes, r)
        imbalance[i] = routing.load_imbalance(e.routing, e.distinct_prefixes, r)
        steps[i] = routing_steps(e, row, prefix, live, cached, r, hit[i], imbalance[i])
        simulated = capacity[i] if capacity is not None else None
        if simulated is not None and simulated.prefix_hit_rate is not None:
            # the simulation ran at the analytic plan's routed hit rate: size at that one
            hit[i] = simulated.prefix_hit_rate
            steps[i].append(
                step(
                    "simulated_prefix_hit_rate",
                    "the hit rate the simulation ran at (the analytic plan's routed rate)",
                    [],
                    hit[i],
                    "",
                    "the simulated and mean-value paths skip the same prefill",
                    kind="model",
                )
            )
    result = _Routed(hit, imbalance, steps)
    return _plan_rows(cands, traffic, slo, policy, api_price, tails, capacity, result), result


# ---------------------------------------------------------------------------- LoRA
