"""Engine settings as inputs: checking them, and saying which one binds a memory fit.

The four vLLM settings that decide whether a model fits and how a batch behaves:

- ``gpu_memory_utilization`` (0, 1]: share of HBM the engine may use (default 0.90);
- ``max_num_seqs``: sequences decoding together per DP rank (default 1,024);
- ``max_num_batched_tokens``: the chunked-prefill token budget per step (default 8,192); it
  also sizes the activation workspace (memory.py), so a bigger budget costs KV room;
- ``max_model_len``: the longest request admitted (default: the model's maximum context);
  one sequence of that length must fit the KV budget or the engine refuses to start.

And one scheduler setting: ``scheduler_recv_interval`` (SGLang's
``--scheduler-recv-interval``, default 1): decode steps between the scheduler's polls for
new requests, a wait on every TTFT (``operating.recv_wait_s``; the simulator polls the same
way).

Which setting binds
-------------------
For a misfit, the smallest ``gpu_memory_utilization`` that fits one sequence is
``u_min = (weights + workspace + runtime + kv_one_sequence) / HBM`` and the largest chunk
budget that fits at the given utilization is
``b_max = (usable - weights - runtime - kv_one_sequence) / (hidden * 24 B)``. Kimi K2 int4 on
8x H100 at 0.90 misses by a fraction of a GB: ``u_min`` is just above 0.90, so 0.92 fits.
For a fit, the batch is capped by ``min(kv_sequences, max_num_seqs * DP)``: the smaller side
binds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.memory import (
    R_MODEL_LEN_KV,
    R_NO_KV_ROOM,
    R_ONE_SEQUENCE,
    R_WEIGHTS,
    MemoryFit,
    allocated_context,
    kv_bytes_per_sequence_per_gpu,
)
from sizing.specs import EngineSettings

#: The engine block's fields (scenario ``engine`` block and ``predict`` columns of these names).
ENGINE_FIELDS = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "scheduler_recv_interval",
)
MAX_SEQS = 1_000_000
MAX_TOKENS = 10_000_000
MAX_RECV_INTERVAL = 1_000  # decode steps between polls for new requests


class SettingError(ValueError):
    """A bad engine or serving setting; ``field`` names it (dotted for nested blocks)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _number(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise SettingError(field, f"must be a number, got {value!r}") from None
    if not math.isfinite(value):
        raise SettingError(field, f"must be a finite number, got {value!r}")
    return float(value)


def _whole(field: str, value, low: int, high: int) -> int:
    number = _number(field, value)
    if number != int(number) or not low <= number <= high:
        raise SettingError(field, f"must be a whole number from {low:,} to {high:,}, got {value}")
    return int(number)


def engine_overrides(block: Mapping | None, base: EngineSettings) -> dict:
    """Checked ``EngineSettings`` keyword values from an ``engine`` block (blank/None values
    keep ``base``'s). Raises ``SettingError`` naming the first bad field.

    Limits: utilization in (0, 1]; max_num_seqs >= 1; chunk budget >= the KV block size
    (a smaller budget cannot hold one block of a prompt); max_model_len >= 1 or 0 (none).
    """
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise SettingError("engine", "must be an object")
    unknown = sorted(set(block) - set(ENGINE_FIELDS))
    if unknown:
        raise SettingError("engine", f"unknown fields: {', '.join(unknown)}")
    out: dict = {}
    given = {k: v for k, v in block.items() if v not in (None, "")}
    if "gpu_memory_utilization" in given:
        u = _number("gpu_memory_utilization", given["gpu_memory_utilization"])
        if not 0.0 < u <= 1.0:
            raise SettingError("gpu_memory_utilization", f"must be in (0, 1], got {u:g}")
        out["gpu_memory_utilization"] = u
    if "max_num_seqs" in given:
        out["max_num_seqs"] = _whole("max_num_seqs", given["max_num_seqs"], 1, MAX_SEQS)
    if "max_num_batched_tokens" in given:
        budget = _whole("max_num_batched_tokens", given["max_num_batched_tokens"], 1, MAX_TOKENS)
        if budget < base.block_size:
            raise SettingError(
                "max_num_batched_tokens",
                f"must be at least the KV block size ({base.block_size} tokens), got {budget}",
            )
        out["max_num_batched_tokens"] = budget
    if "max_model_len" in given:
        out["max_model_len"] = _whole("max_model_len", given["max_model_len"], 0, MAX_TOKENS)
    if "scheduler_recv_interval" in given:
        out["scheduler_recv_interval"] = _whole(
            "scheduler_recv_interval", given["scheduler_recv_interval"], 1, MAX_RECV_INTERVAL
        )
    return out


def min_gpu_memory_utilization(c: CandidateArrays, fit: MemoryFit) -> np.ndarray:
    """``(weights + workspace + runtime + kv_one_sequence) / HBM``: the smallest utilization
    at which one sequence at the fit's context (at least ``max_model_len``) fits."""
    ctx = np.maximum(fit.context_tokens, c.max_model_len)
    one = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, ctx))
    need = fit.weights_bytes_per_gpu + fit.workspace_bytes_per_gpu + c.runtime_overhead_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        of_free = np.where(c.memory_bytes > need, one / (c.memory_bytes - need), np.inf)
    # a share of all HBM (vLLM, SGLang) or of what the model leaves free (TensorRT-LLM)
    return np.where(c.kv_share_of_free > 0, of_free, (need + one) / c.memory_bytes)


def max_chunk_budget(c: CandidateArrays, fit: MemoryFit) -> np.ndarray:
    """``(usable - weights - runtime - kv_one_sequence) / (hidden * 24 B)``: the largest
    ``max_num_batched_tokens`` whose workspace leaves room for one sequence (tokens, may be
    < 0)."""
    ctx = np.maximum(fit.context_tokens, c.max_model_len)
    one = kv_bytes_per_sequence_per_gpu(c, allocated_context(c, ctx))
    held = fit.weights_bytes_per_gpu + c.runtime_overhead_bytes
    room = c.memory_bytes * c.gpu_memory_utilization - held - one
    # TensorRT-LLM: the pool u (HBM - held - workspace) must hold one sequence
    with np.errstate(divide="ignore"):
        room_of_free = c.memory_bytes - held - one / c.gpu_memory_utilization
    room = np.where(c.kv_share_of_free > 0, room_of_free, room)
    return np.floor(room / (c.hidden_size * c.workspace_bytes_per_token_hidden))


def binding_setting(c: CandidateArrays, fit: MemoryFit, kv_sequences: np.ndarray, i: int) -> str:
    """Which engine setting decides row ``i``'s memory outcome, with the value that would
    change it (text)."""
    u_min = float(min_gpu_memory_utilization(c, fit)[i])
    return _binding_text(c, fit, kv_sequences, i, u_min, float(max_chunk_budget(c, fit)[i]))


def binding_settings(c: CandidateArrays, fit: MemoryFit, kv_sequences: np.ndarray) -> list[str]:
    """``binding_setting`` for every row (the arrays computed once)."""
    u_min, b_max = min_gpu_memory_utilization(c, fit), max_chunk_budget(c, fit)
    return [
        _binding_text(c, fit, kv_sequences, i, float(u_min[i]), float(b_max[i]))
        for i in range(len(c))
    ]


def _binding_text(c, fit, kv_sequences, i: int, u_min: float, b: float) -> str:
    code = int(fit.reason_code[i])
    u = float(c.gpu_memory_utilization[i])
    if code in (R_WEIGHTS, R_NO_KV_ROOM, R_ONE_SEQUENCE, R_MODEL_LEN_KV):
        fixes = []
        if code == R_MODEL_LEN_KV:
            tokens = int(fit.kv_budget_bytes_per_gpu[i] // fit.kv_bytes_per_token_per_gpu[i])
            fixes.append(
                f"max_model_len {int(c.max_model_len[i]):,} binds: at most ~{max(tokens, 0):,} "
                "tokens fit"
            )
        if u_min > 1.0:
            fixes.append(f"no gpu_memory_utilization fits (needs {u_min:.3f} > 1)")
        else:
            u_fit = math.ceil(u_min * 100) / 100
            fixes.append(f"gpu_memory_utilization {u:.2f} binds: {u_fit:.2f} fits")
        if code != R_WEIGHTS and b >= c.block_size[i]:
            fixes.append(f"max_num_batched_tokens <= {int(b):,} fits")
        return "; or ".join(fixes)
    if code != 0:
        return "layout or context (no engine setting changes it)"
    cap = float(c.max_num_seqs[i] * c.dp[i])
    held = float(kv_sequences[i])
    if held > cap:
        return f"max_num_seqs binds: KV holds {held:,.0f} sequences > max_num_seqs x DP {cap:,.0f}"
    return (
        f"gpu_memory_utilization binds: KV holds {held:,.0f} sequences <= max_num_seqs x DP "
        f"{cap:,.0f}"
    )
