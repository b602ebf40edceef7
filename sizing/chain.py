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

from sizing import breakeven as be
from sizing import cost, headroom, littles
from sizing.candidates import CandidateArrays
from sizing.derivation import Step, q, step
from sizing.memory import (
    GB,
    MemoryFit,
    expert_shards,
    expert_weight_bytes,
    fit_memory,
    high_precision_params,
    kv_elements_per_token_layer,
    kv_elements_per_token_layer_per_gpu,
    kv_heads_per_gpu,
    nonexpert_weight_bytes,
    routed_expert_params,
)
from sizing.operating import (
    BINDING_NAMES,
    OperatingPoint,
    closed_loop,
    slo_operating_point,
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
        models, gpus, weight_precision, kv_precision, tp_a, pp_a, ep, dp, engine, calibration
    )
    n = len(c)
    isl_a = np.broadcast_to(np.asarray(isl, dtype=np.float64), (n,))
    osl_a = np.broadcast_to(np.asarray(osl, dtype=np.float64), (n,))
    fit = fit_memory(c, isl_a + osl_a, np.broadcast_to(n_gpus, (n,)))
    op = closed_loop(c, fit, isl_a, osl_a, concurrency)
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
    the same arrays the outputs come from, so every shown number is the computed one."""
    s: list[Step] = []
    p_total, p_routed = c.total_params[i], routed_expert_params(c)[i]
    p_hp = high_precision_params(c)[i]
    b_w, b_kv = c.weight_bytes_per_param[i], c.kv_bytes_per_element[i]
    tp, pp, ep, dp = (int(c.tp[i]), int(c.pp[i]), int(c.ep[i]), int(c.dp[i]))
    s.append(
        step(
            "weights_bytes_total",
            "(P - P_hp) * b_w + P_hp * max(b_w, 2)",
            [
                q("P", p_total, "params"),
                q("P_hp (embedding + LM head)", p_hp, "params"),
                q("b_w", b_w, "B/param"),
                q("weight_precision", c.weight_precision(i), ""),
            ],
            fit.weights_bytes_total[i],
            "B",
            "quantized checkpoints keep the embedding and LM head in bf16",
        )
    )
    s.append(
        step(
            "weights_gb_per_gpu",
            "(nonexpert / (TP*PP) + experts / (shards*PP)) / 1e9",
            [
                q("nonexpert", nonexpert_weight_bytes(c)[i], "B"),
                q("experts (P_routed * b_w)", expert_weight_bytes(c)[i], "B"),
                q("P_routed", p_routed, "params"),
                q("TP", tp, ""),
                q("PP", pp, ""),
                q("shards (EP if EP>1 else TP)", expert_shards(c)[i], ""),
            ],
            fit.weights_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
    s.append(
        step(
            "usable_gb_per_gpu",
            "HBM * gpu_memory_utilization / 1e9",
            [
                q("HBM", c.memory_bytes[i] / GB, "GB"),
                q("gpu_memory_utilization", c.gpu_memory_utilization[i], ""),
            ],
            fit.usable_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
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
    s.append(
        step(
            "kv_budget_gb_per_gpu",
            "usable - weights - workspace - runtime_overhead",
            [
                q("usable", fit.usable_bytes_per_gpu[i] / GB, "GB"),
                q("weights", fit.weights_bytes_per_gpu[i] / GB, "GB"),
                q("workspace", fit.workspace_bytes_per_gpu[i] / GB, "GB"),
                q("runtime_overhead", fit.runtime_overhead_bytes[i] / GB, "GB"),
            ],
            fit.kv_budget_bytes_per_gpu[i] / GB,
            "GB",
        )
    )
    layers = c.full_layers[i] + c.sliding_layers[i]
    if c.kv_lora_rank[i] > 0:
        formula = "layers * (kv_lora_rank + qk_rope_head_dim) * b_kv"
        kv_in = [
            q("kv_lora_rank", c.kv_lora_rank[i], ""),
            q("qk_rope_head_dim", c.qk_rope_head_dim[i], ""),
        ]
        gpu_formula = (
            "layers / PP * (kv_lora_rank + qk_rope_head_dim) * b_kv (latent on every TP rank)"
        )
    else:
        formula = "2 * layers * n_kv * head_dim * b_kv"
        kv_in = [q("n_kv", c.num_kv_heads[i], "heads"), q("head_dim", c.head_dim[i], "")]
        gpu_formula = "2 * layers / PP * max(n_kv / TP, 1) * head_dim * b_kv"
    s.append(
        step(
            "kv_bytes_per_token",
            formula,
            [
                q("layers (full + sliding)", layers, ""),
                *kv_in,
                q("b_kv", b_kv, "B"),
                q("kv_precision", c.kv_precision(i), ""),
            ],
            fit.kv_bytes_per_token[i],
            "B/token",
            "whole model, summed over GPUs, no replication",
        )
    )
    s.append(
        step(
            "kv_bytes_per_token_per_gpu",
            gpu_formula,
            [
                q("elements per token-layer (model)", kv_elements_per_token_layer(c)[i], ""),
                q("elements per token-layer (GPU)", kv_elements_per_token_layer_per_gpu(c)[i], ""),
                q("kv heads per GPU", kv_heads_per_gpu(c)[i], "heads"),
                q("TP", tp, ""),
                q("PP", pp, ""),
            ],
            fit.kv_bytes_per_token_per_gpu[i],
            "B/token",
        )
    )
    s.append(
        step(
            "kv_capacity_tokens",
            "floor(kv_budget / kv_bytes_per_token_per_gpu) * DP",
            [
                q("kv_budget", max(fit.kv_budget_bytes_per_gpu[i], 0.0), "B"),
                q("kv_bytes_per_token_per_gpu", fit.kv_bytes_per_token_per_gpu[i], "B/token"),
                q("DP", dp, ""),
            ],
            fit.kv_capacity_tokens[i],
            "tokens",
        )
    )
    s.append(
        step(
            "kv_gb_per_sequence_per_gpu",
            "(full * c + sliding * min(c, window)) * per_layer_gpu * b_kv / PP, c block-rounded",
            [
                q("context c", fit.context_tokens[i], "tokens"),
                q("full layers", c.full_layers[i], ""),
                q("sliding layers", c.sliding_layers[i], ""),
                q("window", c.sliding_window[i], "tokens"),
            ],
            fit.kv_bytes_per_sequence_per_gpu[i] / GB,
            "GB",
        )
    )
    s.append(
        step(
            "max_concurrency",
            "floor(kv_budget / kv_per_sequence_per_gpu) * DP",
            [
                q("kv_budget", max(fit.kv_budget_bytes_per_gpu[i], 0.0) / GB, "GB"),
                q("kv_per_sequence_per_gpu", fit.kv_bytes_per_sequence_per_gpu[i] / GB, "GB"),
                q("DP", dp, ""),
            ],
            fit.max_concurrency[i],
            "sequences",
        )
    )
    if not fit.fits[i]:
        s.append(
            step(
                "fits", "layout valid and memory holds one sequence", [], "no", "", fit.reason(c, i)
            )
        )
        return tuple(s)

    pure, mixed = op.pure_step, op.mixed_step
    s.append(
        step(
            "batch",
            "min(concurrency, min(max_concurrency, max_num_seqs * DP))",
            [
                q("concurrency", op.concurrency[i], "sequences"),
                q("max_concurrency", fit.max_concurrency[i], "sequences"),
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
            "min(isl, max(max_num_batched_tokens - B/DP, 64)); n = ceil(isl/chunk)",
            [
                q("isl", op.isl_tokens[i], "tokens"),
                q("max_num_batched_tokens", c.max_num_batched_tokens[i], "tokens"),
                q("B/DP", op.batch_per_rank[i], "sequences"),
                q("n_chunks", op.n_chunks[i], "steps"),
            ],
            op.chunk_tokens[i],
            "tokens",
        )
    )
    s.append(
        step(
            "decode_seqs_per_step",
            "B/DP * osl / (n_chunks + osl)",
            [
                q("B/DP", op.batch_per_rank[i], "sequences"),
                q("osl", op.osl_tokens[i], "tokens"),
                q("n_chunks", op.n_chunks[i], "steps"),
            ],
            op.decode_seqs_per_step[i],
            "sequences",
        )
    )
    s.append(
        step(
            "prefill_tokens_per_step",
            "B/DP * isl / (n_chunks + osl)",
            [q("B/DP", op.batch_per_rank[i], "sequences")],
            op.prefill_tokens_per_step[i],
            "tokens",
        )
    )
    st = pure.stage
    s.append(
        step(
            "decode_bytes_per_gpu_stage",
            "weights touched + (B/PP) * kv_per_sequence(mean context)",
            [
                q("weights touched", st.weight_bytes[i], "B"),
                q("kv read", st.kv_bytes[i], "B"),
                q("mean context", op.context_tokens[i], "tokens"),
                q("PP", pp, ""),
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
                q("BW", c.hbm_bytes_s[i] / 1e12, "TB/s"),
                q("eta_mem", c.eta_mem[i], ""),
            ],
            st.mem_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "decode_flop_ms",
            "(2 * P_a * T + attention) / (TP*PP) / (F * eta_flop_decode) * 1e3",
            [
                q("flops per GPU", st.flops_decode[i], "FLOP"),
                q("F", c.peak_flops[i] / 1e12, "TFLOP/s"),
                q("compute precision", c.compute_precision(i), ""),
                q("eta_flop_decode", c.eta_flop_decode[i], ""),
            ],
            st.flop_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "decode_comm_ms",
            "TP: 2*layers/PP all-reduces; EP: 2*moe_layers/PP all-to-alls",
            [
                q("TP", tp, ""),
                q("EP", ep, ""),
                q("link one-way", c.link_bytes_s[i] / 1e9, "GB/s"),
                q("link_efficiency", c.link_efficiency[i], ""),
            ],
            st.comm_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "pure_decode_step_ms",
            "PP * (max(mem, flop) + comm) + (PP-1) * hop + overhead",
            [
                q("mem", st.mem_s[i] * 1e3, "ms"),
                q("flop", st.flop_s[i] * 1e3, "ms"),
                q("comm", st.comm_s[i] * 1e3, "ms"),
                q("hop", pure.hop_s[i] * 1e3, "ms"),
                q("overhead", c.step_overhead_s[i] * 1e3, "ms"),
                q("PP", pp, ""),
            ],
            pure.step_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "mixed_step_ms",
            "same step carrying max(chunk, prefill_tokens_per_step) prompt tokens",
            [
                q("prefill flop", mixed.stage.flop_s[i] * 1e3, "ms"),
                q("eta_flop_prefill", c.eta_flop_prefill[i], ""),
            ],
            mixed.step_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "tpot_ms",
            "(1 - f) * pure_step + f * mixed_step, f = min(prefill_tokens_per_step / chunk, 1)",
            [
                q("f", op.mixed_step_fraction[i], ""),
                q("pure_step", pure.step_s[i] * 1e3, "ms"),
                q("mixed_step", mixed.step_s[i] * 1e3, "ms"),
            ],
            op.tpot_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "ttft_ms",
            "(n_chunks + wait_steps) * mixed_step + closed-loop queue",
            [
                q("n_chunks", op.n_chunks[i], "steps"),
                q("wait_steps", op.prefill_wait_steps[i], "steps"),
                q("mixed_step", mixed.step_s[i] * 1e3, "ms"),
                q("queue", op.queue_s[i] * 1e3, "ms"),
            ],
            op.ttft_s[i] * 1e3,
            "ms",
        )
    )
    s.append(
        step(
            "residence_s",
            "TTFT + osl * TPOT",
            [
                q("TTFT", op.ttft_s[i], "s"),
                q("osl", op.osl_tokens[i], "tokens"),
                q("TPOT", op.tpot_s[i], "s"),
            ],
            op.residence_s[i],
            "s",
        )
    )
    s.append(
        step(
            "requests_per_s_per_replica",
            "B / W (Little), over all DP ranks",
            [
                q("B", min(op.batch[i], op.concurrency[i]), "sequences"),
                q("W", op.residence_s[i], "s"),
            ],
            op.requests_per_s[i],
            "req/s",
            "with a closed-loop queue, W counts the wait too",
        )
    )
    s.append(
        step(
            "output_tok_s_per_replica",
            "requests_per_s * osl",
            [
                q("requests_per_s", op.requests_per_s[i], "req/s"),
                q("osl", op.osl_tokens[i], "tokens"),
            ],
            op.output_tokens_per_s[i],
            "tokens/s",
        )
    )
    return tuple(s)


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


@dataclass(frozen=True)
class BreakEvenResult:
    """API vs self-hosting for one candidate at the plan's traffic mix."""

    api_usd_per_mtok: float  # blended over input/output
    api_usd_per_month: float  # at the traffic's mean rate
    selfhost_usd_per_month: float
    crossing_tokens_per_month: float  # inf: self-hosting never wins
    traffic_tokens_per_month: float
    utilization_to_win: float  # > 1: cannot win at any utilization
    hybrid: be.HybridSplit


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
    )


def _finite_int(x: float) -> int:
    return int(x) if math.isfinite(x) else 0


def plan(
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    candidates: Sequence[Candidate],
    api_price: ApiPrice | None = None,
) -> Plan:
    """Size every candidate for ``traffic`` under ``slo`` and ``policy`` and rank them.

    Memory fit at the mean request (``prompt + output`` tokens) for capacity; the p95
    lengths, when given, must also fit as one sequence. The operating batch is the largest
    meeting both mean-latency SLOs (``operating.slo_operating_point``); replicas follow from
    the peak rate with headroom; cost uses the mean rate (utilization term); break-even
    against ``api_price`` when given.
    """
    cands = list(candidates)
    if not cands:
        return Plan((), {}, traffic, slo, policy)
    c = candidate_arrays(cands)
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
    sp = slo_operating_point(c, fit, isl, osl, slo.tpot_ms / 1e3, slo.ttft_ms / 1e3)
    op = sp.point
    x = op.requests_per_s
    serving = headroom.serving_replicas(
        traffic.peak_rps, x, policy.target_utilization, policy.burst_factor
    )
    serving = np.where(fit.fits, serving, np.inf)
    total = headroom.total_replicas(serving, policy.spare_replicas, policy.warm_pool_replicas)
    gpi = c.gpus_per_instance
    with np.errstate(invalid="ignore"):  # misfits: inf replicas x 0 req/s
        usd_h = cost.usd_per_hour(total, gpi, c.usd_per_gpu_hour)
        util = np.where(fit.fits, headroom.utilization(traffic.mean_rps, total, x), 0.0)
        usd_mtok = cost.usd_per_mtok(usd_h, total * x * osl, util)
        usd_mtok_total = cost.usd_per_mtok(usd_h, total * x * (isl + osl), util)
    usd_mtok = np.where(fit.fits, usd_mtok, np.inf)
    usd_mtok_total = np.where(fit.fits, usd_mtok_total, np.inf)
    in_flight = littles.in_flight(traffic.peak_rps, op.residence_s)

    api_p = be.api_usd_per_token(api_price, traffic) if api_price else None
    profile = be.daily_profile_rps(traffic)
    peak_to_mean = traffic.peak_rps / traffic.mean_rps if traffic.mean_rps > 0 else 1.0
    fixed = policy.spare_replicas + policy.warm_pool_replicas

    rows: list[PlanRow] = []
    for i in range(n):
        d = list(derive(c, fit, op, i))
        ok = bool(fit.fits[i])
        bev = None
        if ok:
            d += _fleet_steps(
                c,
                op,
                i,
                traffic,
                policy,
                serving[i],
                total[i],
                usd_h[i],
                util[i],
                usd_mtok[i],
                in_flight[i],
            )
        if ok and api_p is not None:
            k_month = gpi[i] * c.usd_per_gpu_hour[i] * cost.HOURS_PER_MONTH
            v_r = (
                x[i]
                * policy.target_utilization
                * (isl + osl)
                * be.SECONDS_PER_MONTH
                / (peak_to_mean * policy.burst_factor)
            )
            v_traffic = traffic.mean_rps * (isl + osl) * be.SECONDS_PER_MONTH
            cross = float(be.crossing_tokens_per_month(v_r, k_month, fixed, api_p))
            need = float(
                be.utilization_to_win(gpi[i] * c.usd_per_gpu_hour[i], x[i] * (isl + osl), api_p)
            )
            hyb = be.hybrid_split(
                profile,
                float(x[i]),
                policy.target_utilization,
                float(k_month),
                fixed,
                isl + osl,
                api_p,
            )
            bev = BreakEvenResult(
                api_usd_per_mtok=api_p * 1e6,
                api_usd_per_month=float(be.api_usd_per_month(v_traffic, api_p)),
                selfhost_usd_per_month=float(cost.usd_per_month(usd_h[i])),
                crossing_tokens_per_month=cross,
                traffic_tokens_per_month=v_traffic,
                utilization_to_win=need,
                hybrid=hyb,
            )
            d += _breakeven_steps(bev, v_r, k_month, fixed)
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
                gpus_per_replica=int(gpi[i]),
                fits=ok,
                reason=str(reasons[i]),
                weights_gb_per_gpu=float(fit.weights_gb_per_gpu[i]),
                kv_bytes_per_token=float(fit.kv_bytes_per_token[i]),
                kv_capacity_tokens=float(fit.kv_capacity_tokens[i]),
                max_concurrency=float(fit.max_concurrency[i]),
                batch=float(op.batch[i]),
                ttft_ms=float(op.ttft_s[i] * 1e3) if ok else math.nan,
                tpot_ms=float(op.tpot_s[i] * 1e3) if ok else math.nan,
                requests_per_s_per_replica=float(x[i]),
                output_tok_s_per_replica=float(op.output_tokens_per_s[i]),
                in_flight_at_peak=float(in_flight[i]) if ok else math.nan,
                serving_replicas=_finite_int(serving[i]),
                replicas=_finite_int(total[i]),
                gpus=_finite_int(total[i] * gpi[i]),
                utilization=float(util[i]),
                usd_per_hour=float(usd_h[i]),
                usd_per_month=float(cost.usd_per_month(usd_h[i])),
                usd_per_mtok=float(usd_mtok[i]),
                usd_per_mtok_total=float(usd_mtok_total[i]),
                tokens_per_usd=float(cost.tokens_per_usd(usd_mtok[i])),
                binding=BINDING_NAMES[sp.binding_code[i]],
                meets_slo=bool(sp.meets_slo[i]),
                breakeven=bev,
                derivation=tuple(d),
            )
        )
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


def _fleet_steps(c, op, i, traffic, policy, serving, total, usd_h, util, usd_mtok, in_flight):
    x = op.requests_per_s[i]
    return [
        step(
            "in_flight_at_peak",
            "peak_rps * W (Little)",
            [q("peak_rps", traffic.peak_rps, "req/s"), q("W", op.residence_s[i], "s")],
            in_flight,
            "requests",
        ),
        step(
            "serving_replicas",
            "ceil(peak_rps * burst / (X * target_utilization))",
            [
                q("peak_rps", traffic.peak_rps, "req/s"),
                q("burst", policy.burst_factor, ""),
                q("X", x, "req/s per replica"),
                q("target_utilization", policy.target_utilization, ""),
            ],
            serving,
            "replicas",
        ),
        step(
            "replicas",
            "serving + spare (N+k) + warm pool",
            [
                q("serving", serving, "replicas"),
                q("spare", policy.spare_replicas, "replicas"),
                q("warm_pool", policy.warm_pool_replicas, "replicas"),
            ],
            total,
            "replicas",
        ),
        step(
            "usd_per_hour",
            "replicas * gpus_per_replica * usd_per_gpu_hour",
            [
                q("replicas", total, ""),
                q("gpus_per_replica", c.gpus_per_instance[i], ""),
                q("usd_per_gpu_hour", c.usd_per_gpu_hour[i], "$/GPU-h"),
            ],
            usd_h,
            "$/h",
        ),
        step(
            "usd_per_month",
            "usd_per_hour * 730",
            [q("usd_per_hour", usd_h, "$/h")],
            usd_h * cost.HOURS_PER_MONTH,
            "$/month",
        ),
        step(
            "utilization",
            "mean_rps / (replicas * X)",
            [
                q("mean_rps", traffic.mean_rps, "req/s"),
                q("replicas", total, ""),
                q("X", x, "req/s per replica"),
            ],
            util,
            "",
        ),
        step(
            "usd_per_mtok",
            "usd_per_hour / 3600 / (replicas * X * osl * utilization) * 1e6",
            [
                q("usd_per_hour", usd_h, "$/h"),
                q("capacity", total * op.output_tokens_per_s[i], "output tokens/s"),
                q("utilization", util, ""),
            ],
            usd_mtok,
            "$/M output tokens",
        ),
    ]


def _breakeven_steps(bev: BreakEvenResult, v_r, k_month, fixed) -> list[Step]:
    return [
        step(
            "api_usd_per_mtok",
            "(isl * p_in + osl * p_out) / (isl + osl)",
            [],
            bev.api_usd_per_mtok,
            "$/M tokens",
        ),
        step(
            "crossing_tokens_per_month",
            "n* = max(1, ceil(s*K / (p*v_r - K))); V* = max((n*-1)*v_r, (n*+s)*K/p)",
            [
                q("v_r", v_r, "tokens/month per replica"),
                q("K", k_month, "$/month per replica"),
                q("s (spare + warm)", fixed, "replicas"),
                q("p", bev.api_usd_per_mtok, "$/M"),
            ],
            bev.crossing_tokens_per_month,
            "tokens/month",
        ),
        step(
            "utilization_to_win",
            "(usd_per_replica_hour / 3600 / capacity_tok_s) / p",
            [],
            bev.utilization_to_win,
            "",
        ),
        step(
            "hybrid_selfhost_replicas",
            "argmin_R (R + s[R>0]) * K + API cost of overflow",
            [q("api_token_share", bev.hybrid.api_token_share, "")],
            bev.hybrid.selfhost_replicas,
            "replicas",
        ),
    ]
