"""Derivation steps of the serving techniques and engine settings (``chain.plan`` stages).

Each builder reads the arrays the chain computed (memory fit, operating point, the chunk
frontier, the speculative and LoRA terms) for one row, so every number shown is the one the
plan used: which engine setting binds and the chunk-budget frontier (``engine_settings``,
``chunking``), the prefix cache's prefill saving (``memory``), speculative decoding's tokens
per step, speed-up and break-even batch (``speculative``), LoRA's memory, step overhead and
swap-in (``lora``), and the routing policy's hit rate and load imbalance (``routing``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sizing import lora
from sizing.candidates import CandidateArrays
from sizing.chunking import Frontier
from sizing.derivation import Step, q, step
from sizing.engine_settings import min_gpu_memory_utilization
from sizing.memory import MemoryFit, allocated_context, kv_bytes_per_sequence_per_gpu
from sizing.operating import OperatingPoint
from sizing.speculative import break_even_batch, decode_steps, drafting_s


def precision_steps(c: CandidateArrays, stage, i: int) -> list[Step]:
    """A mixed-precision MoE row's streamed bytes per component (one decode stage, per GPU):
    the non-expert weights at ``b_w`` (embedding/LM head at ``b_emb``) and the routed experts
    the step touches at ``b_e`` (``steptime.stage_cost``)."""
    experts = float(np.broadcast_to(stage.expert_weight_bytes, np.shape(stage.weight_bytes))[i])
    return [
        step(
            "decode_weights_touched_per_gpu_stage",
            "nonexpert + experts",
            [
                q("nonexpert", stage.weight_bytes[i] - experts, "B (b_w; embedding/LM head b_emb)"),
                q("experts", experts, "B (distinct routed experts touched x b_e)"),
                q("b_w", c.weight_bytes_per_param[i], "B/param"),
                q("b_e", c.expert_bytes_per_param[i], "B/param"),
                q("b_emb", c.embedding_bytes_per_param[i], "B/param"),
            ],
            stage.weight_bytes[i],
            "B",
            "each component streamed at its own bytes per param",
        )
    ]


def prefix_steps(c: CandidateArrays, op: OperatingPoint, i: int) -> list[Step]:
    """Prefill a prefix-cache hit skips (the same rule as the simulator's)."""
    prompt = q("prompt", op.isl_tokens[i], "tokens")
    blocks = min(c.prefix_tokens[i] // c.block_size[i], (op.isl_tokens[i] - 1) // c.block_size[i])
    cached = float(blocks * c.block_size[i])  # memory.cached_prefix_tokens for one row
    return [
        step(
            "prefix_cached_tokens",
            "min(floor(prefix / block), floor((prompt - 1) / block)) * block",
            [
                q("prefix", c.prefix_tokens[i], "tokens"),
                q("block", c.block_size[i], "tokens"),
                prompt,
            ],
            cached,
            "tokens",
            "whole blocks of the shared prefix, never the prompt's last token",
        ),
        step(
            "prefill_isl_tokens",
            "prompt - hit_rate * cached",
            [prompt, q("hit_rate", c.prefix_hit_rate[i], ""), q("cached", cached, "tokens")],
            op.prefill_isl_tokens[i],
            "tokens",
            "prefill saved per request on average: hit_rate * cached",
        ),
    ]


def frontier_rows(frontier: Frontier, i: int) -> tuple[dict, ...]:
    return tuple(
        {
            "max_num_batched_tokens": b,
            "ttft_long_ms": float(frontier.ttft_long_s[k][i] * 1e3),
            "tpot_stall_ms": float(frontier.stall_s[k][i] * 1e3),
        }
        for k, b in enumerate(frontier.budgets)
    )


@dataclass(frozen=True)
class EngineArrays:
    live: np.ndarray
    frontier: Frontier
    tpot_slo_s: float
    bindings: list
    kv_one_sequence: np.ndarray
    min_utilization: np.ndarray
    recommended: np.ndarray


def engine_arrays(c: CandidateArrays, fit: MemoryFit) -> tuple:
    ctx = np.maximum(fit.context_tokens, c.max_model_len)
    one = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, ctx))
    return one, min_gpu_memory_utilization(c, fit)


def engine_steps(c: CandidateArrays, fit: MemoryFit, e: EngineArrays, i: int) -> list[Step]:
    """Which engine setting binds the memory fit, and (fitting rows) the chunk-budget sweep:
    long-prompt TTFT against the TPOT a running stream sees while that prompt prefills."""
    frontier = e.frontier
    s = [
        step(
            "min_gpu_memory_utilization",
            "(weights + workspace + runtime + kv_one_sequence) / HBM_bytes",
            [
                q("weights", fit.weights_bytes_per_gpu[i], "B"),
                q("workspace", fit.workspace_bytes_per_gpu[i], "B"),
                q("runtime", fit.runtime_overhead_bytes[i], "B"),
                q(
                    "kv_one_sequence",
                    e.kv_one_sequence[i],
                    "B (one sequence at max(context, max_model_len))",
                ),
                q("HBM_bytes", c.memory_bytes[i], "B"),
            ],
            float(e.min_utilization[i]),
            "",
            f"set: {c.gpu_memory_utilization[i]:.2f}",
        ),  # fmt: skip
        step(
            "engine_setting_binding",
            "the setting that decides the fit or caps the batch (engine_settings.py)",
            [
                q("gpu_memory_utilization", c.gpu_memory_utilization[i], ""),
                q("max_num_seqs", c.max_num_seqs[i], "sequences per DP rank"),
                q("max_num_batched_tokens", c.max_num_batched_tokens[i], "tokens"),
                q("max_model_len", c.max_model_len[i], "tokens (0: the model's maximum)"),
                q("kv_sequences_live", e.live[i], "sequences"),
            ],
            e.bindings[i],
            "",
            kind="model",
        ),
    ]
    if not fit.fits[i]:
        return s
    chosen = float(c.max_num_batched_tokens[i])
    k = frontier.budgets.index(int(chosen))
    s.append(
        step(
            "long_prompt_ttft_ms",
            "((n_chunks - 1) * stall_step + last_step) * 1e3",
            [
                q("n_chunks", frontier.n_chunks[k][i], "steps"),
                q("stall_step", frontier.stall_s[k][i], "s (decode step carrying a full chunk)"),
                q("last_step", frontier.last_s[k][i], "s (the remainder chunk)"),
            ],
            frontier.ttft_long_s[k][i] * 1e3,
            "ms",
            f"the long prompt's prefill at max_num_batched_tokens {int(chosen):,}, no queue",
        )
    )
    s.append(
        step(
            "tpot_stall_ms",
            "stall_step * 1e3",
            [q("stall_step", frontier.stall_s[k][i], "s")],
            frontier.stall_s[k][i] * 1e3,
            "ms",
            "TPOT every running stream sees while the long prompt prefills",
        )
    )
    rec = float(e.recommended[i])
    s.append(
        step(
            "chunk_budget_frontier",
            "sweep max_num_batched_tokens: long-prompt TTFT vs running TPOT (chunking.py)",
            [
                q(f"b={b:,}", f"TTFT {t[i] * 1e3:.0f} ms / TPOT {st[i] * 1e3:.1f} ms", "")
                for b, t, st in zip(
                    frontier.budgets, frontier.ttft_long_s, frontier.stall_s, strict=True
                )
            ],
            chosen,
            "tokens (chosen)",
            f"largest budget whose stall meets the TPOT SLO: {int(rec):,} tokens",
            kind="model",
        )
    )
    return s


def draft_ms(st, i: int) -> float:
    return float(st.draft_s[i]) * 1e3 if np.ndim(st.draft_s) else 0.0


def draft_term(st, i: int) -> str:
    return " + draft" if draft_ms(st, i) > 0 else ""


def draft_input(st, i: int) -> list:
    ms = draft_ms(st, i)
    return [q("draft", ms, "ms (speculative drafter passes, LoRA kernels)")] if ms > 0 else []


def speculative_arrays(c: CandidateArrays, decode_seqs, context_tokens) -> dict | None:
    """Plain and speculative step times, speed-up at the operating point's decode batch and
    the break-even batch, for every row (None when no row speculates)."""
    if not np.any(c.spec_tokens > 0):
        return None
    batch = np.maximum(np.asarray(decode_seqs, dtype=np.float64), 1.0)
    plain, spec = decode_steps(c, batch, context_tokens)
    return {
        "batch": batch,
        "plain_s": plain,
        "spec_s": spec,
        "speed_up": c.spec_tokens_per_step * plain / spec,
        "draft_s": drafting_s(c, batch, context_tokens),
        "break_even": break_even_batch(c, context_tokens),
    }


def speculative_steps(c: CandidateArrays, op: OperatingPoint, i: int, a: dict, j: int) -> list:
    k, tau = float(c.spec_tokens[i]), float(c.spec_tokens_per_step[i])
    acceptance = float(c.spec_acceptance[i])
    steps = []
    if math.isfinite(acceptance) and acceptance > 0:
        steps.append(
            step(
                "spec_tokens_per_verify_step",
                "(1 - a ** (k + 1)) / (1 - a)",
                [q("a", acceptance, "per-position acceptance"), q("k", k, "tokens drafted")],
                tau,
                "tokens per sequence per step",
            )
        )
    else:
        steps.append(
            step(
                "spec_tokens_per_verify_step",
                "1 + sum_j prod_{i<=j} a_i (per-position acceptance)",
                [q("k", k, "tokens drafted")],
                tau,
                "tokens per sequence per step",
                kind="model",
            )
        )
    draft = float(a["draft_s"][j])
    steps += [
        step(
            "spec_draft_ms",
            "k * draft_step * 1e3",
            [q("k", k, ""), q("draft_step", draft / k, "s (one drafter pass, speculative.py)")],
            draft * 1e3,
            "ms per decode step",
        ),
        step(
            "spec_speed_up",
            "tau * plain_step / spec_step",
            [
                q("tau", tau, "tokens per verify step"),
                q("plain_step", a["plain_s"][j], "s (decode step without drafting)"),
                q("spec_step", a["spec_s"][j], "s (k + 1 tokens verified + k drafts)"),
                q("B_rank", a["batch"][j], "sequences decoding per DP rank"),
            ],
            a["speed_up"][j],
            "x at the operating point",
        ),
        step(
            "spec_break_even_batch",
            "smallest batch per DP rank with tau * t_plain(B) / t_spec(B) <= 1 (bisection)",
            [q("tau", tau, ""), q("k", k, "")],
            a["break_even"][j],
            "sequences per DP rank",
            "speculative decoding stops paying here: the target turns compute-bound",
            kind="search",
        ),
    ]
    return steps


def routing_steps(e, row, prefix, live, cached, r, hit, imbalance) -> list[Step]:
    d = q("D", e.distinct_prefixes, "distinct prefixes")
    reps = q("R", r, "serving replicas (first pass)")
    affinity = e.routing == "prefix_affinity"
    return [
        step(
            "prefix_cache_prefixes_per_replica",
            "max(floor(max(kv_capacity - batch * live_context, 0) / prefix), 1)",
            [
                q("kv_capacity", row.kv_capacity_tokens, "tokens per replica"),
                q("batch", row.batch, "sequences"),
                q("live_context", live, "tokens"),
                q("prefix", prefix, "tokens"),
            ],
            cached,
            "prefixes",
            "the KV the running batch leaves free holds cached prefixes (LRU)",
        ),
        step(
            "prefix_hit_rate",
            "min(C * R / D, 1)" if affinity else "min(C / D, 1)",
            [q("C", cached, "prefixes cached per replica"), d, *([reps] if affinity else [])],
            hit,
            "",
            f"routing {e.routing}: "
            + ("each replica sees D / R prefixes" if affinity else "every replica sees all D"),
        ),
        step(
            "hottest_replica_load",
            "min(max(1 + sqrt(2 * R * log(R) / D), R / D), R)" if affinity and r > 1 else "1",
            [reps, d] if affinity and r > 1 else [],
            imbalance,
            "x the mean load",
            "prefix affinity hashes prefixes onto replicas: the hottest sets the fleet"
            if affinity
            else "load spreads evenly",
        ),
    ]


def lora_steps(c: CandidateArrays, fit: MemoryFit, op: OperatingPoint, i: int) -> list[Step]:
    """One row's adapter memory, step overhead and swap-in (sizing.lora)."""
    one = c.take(np.array([i]))
    dims = float(lora.module_dims_per_layer(one)[0])
    per_adapter = float(lora.adapter_bytes(one)[0])
    per_gpu = per_adapter / (c.tp[i] * c.pp[i])
    tokens = op.decode_seqs_per_step[i : i + 1] * (c.spec_tokens[i] + 1.0)
    extra = float(lora.lora_step_s(one, tokens)[0])
    slots, n = float(c.lora_resident_slots[i]), float(c.lora_adapters[i])
    room = fit.kv_budget_bytes_per_gpu[i] + slots * per_gpu
    tp_pp = q("TP_PP", c.tp[i] * c.pp[i], "GPUs a replica's weights split over")
    return [
        step(
            "lora_adapter_bytes",
            "r * dims * layers * 2",
            [
                q("r", c.lora_rank[i], "rank"),
                q("dims", dims, "sum over target modules of d_in + d_out"),
                q("layers", c.num_layers[i], ""),
            ],
            per_adapter,
            "B (bf16, whole model)",
        ),
        step(
            "lora_adapters_fit_per_gpu",
            "floor(room / (adapter / TP_PP))",
            [
                q("room", room, "B (KV budget + the resident slots)"),
                q("adapter", per_adapter, "B"),
                tp_pp,
            ],
            float(np.floor(room / per_gpu)),
            "adapters (if they took all of the KV budget)",
            f"{int(slots)} resident slots of {int(n)} adapters",
        ),  # fmt: skip
        step(
            "lora_step_overhead",
            "lora_step / pure_step",
            [
                q("lora_step", extra, "s (adapter reads + SGMV FLOPs + kernels, lora.py)"),
                q("pure_step", op.pure_step.step_s[i], "s (includes lora_step)"),
                q("active", c.lora_active[i], "distinct adapters per batch"),
            ],
            extra / float(op.pure_step.step_s[i]),
            "share of a decode step",
        ),
        step(
            "lora_swap_in_ms",
            "max(1 - slots / adapters, 0) * adapter / TP_PP / (host_link * link_efficiency) * 1e3",
            [
                q("slots", slots, "resident"),
                q("adapters", n, ""),
                q("adapter", per_adapter, "B"),
                tp_pp,
                q("host_link", lora.HOST_LINK_BYTES_S, "B/s (PCIe 5.0 x16)"),
                q("link_efficiency", c.link_efficiency[i], ""),
            ],
            float(lora.swap_in_s(one)[0]) * 1e3,
            "ms added to TTFT on average",
        ),
    ]


def lora_fleet_step(c: CandidateArrays, fleet, i: int) -> Step:
    shared = int(fleet.gpus[i]) if math.isfinite(fleet.gpus[i]) else 0
    return step(
        "gpus_one_deployment_per_fine_tune",
        "adapters * gpus_per_replica",
        [
            q("adapters", c.lora_adapters[i], "fine-tunes"),
            q("gpus_per_replica", c.gpus_per_instance[i], "GPUs"),
        ],
        float(c.lora_adapters[i] * c.gpus_per_instance[i]),
        "GPUs",
        f"against {shared} GPUs for all adapters on one shared base",
    )
