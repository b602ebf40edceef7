"""Discrete-event simulation of one replica running a vLLM-like continuous-batching engine.

The mean-value model in operating.py gives averages; capacity is sized to p95/p99 SLOs, so this
module simulates the engine step by step and reports per-request TTFT, TPOT and E2E with their
percentiles, throughput, goodput, preemptions, and queue length / KV use over time.

Engine model (one DP rank; an instance with DP ranks is DP independent copies)
----------------------------------------------------------------------------
Each step the scheduler (vLLM V1 order) gives every decoding sequence its one token, then spends
what is left of ``max_num_batched_tokens`` on running prompts in admission order, then admits
waiting requests FCFS while ``running < max_num_seqs``, budget remains and the KV pool has the
blocks (16 tokens each) for the chunk; a step that preempted admits none (vLLM V1's scheduler
skips its waiting queue then, so the freed blocks go to the running sequences). Head-of-line
blocking is kept: FCFS never skips ahead.
Without chunked prefill a prompt enters whole (a lone prompt may exceed the budget).
When a decode needs a new block and none is free, the most recently admitted sequence is
preempted by recompute: its blocks are freed and it returns to the queue front; on readmission
it prefills ``isl + generated`` tokens again. A running prompt's chunk takes its blocks whole
or, short of them, preempts the most recently admitted sequence until they fit; when that is
the prompt itself, it goes back to the queue and no more running prompts are scheduled that
step (vLLM V1's ``allocate_slots`` takes a chunk whole or not at all, and its scheduler
preempts from the end of its running list). A prefix-cache hit skips the cached share of the
prompt (whole blocks of ``shared_prefix_tokens``, pinned once in the pool).

The engine's front end (``Calibration.frontend_latency_s``) delays each request by a fixed
latency before the scheduler sees it; TTFT and E2E count from the client's send.

Step time is the core's roofline, ``steptime.decode_step(c, n_dec, ctx_mean, pre, p_eq)``, for
the actual mixed batch: ``n_dec`` decodes at their mean context and ``pre`` prefill tokens.
A chunk of ``k`` tokens at offset ``o`` attends ``o + k/2`` tokens on average; the core's
prefill attention for a prompt of ``p`` is ``p/2``, so the step passes the token-weighted
``p_eq = sum(k * (2o + k)) / sum(k)``. Calls are memoised on a log grid of the continuous
inputs (context 1/64 octave, +-0.55 %; prompt tokens and p_eq 1/32 octave, +-1.1 %; exact up
to 64), one vectorized core call filling every decode count of a block of 32 neighbouring
context cells at once (``StepTimer``); the decode count is exact. A compute-bound step moves
by at most ~1.1 % from the rounding.

The event loop is compiled (``sizing.sim_kernel``, numba): request state lives in numpy arrays
(O(requests); the decodes as aggregates: count, sum of ``context - step``, a completion heap
and 16 block-phase counters), the arrivals and lengths are drawn up front in the order the
pure-Python loop drew them. A row on one stage without drafting or adapters (dense or MoE)
hands the loop its step time as a few numbers per grid cell read from the core
(``sizing.step_affine``), which the loop composes itself, the same numbers to rounding; any
other row's loop returns here for a step-time block it lacks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from sizing import sim_kernel as K
from sizing.candidates import CandidateArrays
from sizing.length_law import is_fixed, lognormal_mu, lognormal_sigma
from sizing.memory import (
    allocated_context,
    draft_kv_bytes_per_token_per_gpu,
    fit_memory,
    kv_bytes_per_sequence_per_gpu,
)
from sizing.sim_kernel import (  # the memo grid: one definition, the compiled loop's
    EXACT_BELOW,
    GRID_PER_OCTAVE,
    PREFILL_GRID_PER_OCTAVE,
    StepTable,
    block_keys,
    grid_key,
)
from sizing.step_affine import AffineStep, affine_step
from sizing.steptime import decode_step

ARRIVAL_CHUNK = 4096
PERCENTILES = (50, 90, 95, 99)


# ============================================================================ workload
@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution.

    kind ``fixed`` (``mean``), ``uniform`` (``low``..``high``; defaults ``mean`` +- 50 %) or
    ``lognormal`` from ``mean`` and ``p95`` (``sizing.length_law``: needs ``mean <= p95 <=
    3.87 mean``).
    Draws are rounded and clipped to ``[1, max_tokens]``.
    """

    mean: float
    kind: str = "fixed"
    p95: float | None = None
    low: float | None = None
    high: float | None = None
    max_tokens: int = 10_000_000

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, float(self.mean))
        elif self.kind == "uniform":
            lo = self.low if self.low is not None else 0.5 * self.mean
            hi = self.high if self.high is not None else 1.5 * self.mean
            x = rng.uniform(lo, hi, n)
        elif self.kind == "lognormal":
            sigma = lognormal_sigma(self.mean, self.p95 or self.mean)
            x = rng.lognormal(lognormal_mu(self.mean, sigma), sigma, n)
        else:
            raise ValueError(f"unknown length distribution {self.kind!r}")
        return np.clip(np.rint(x), 1, self.max_tokens).astype(np.int64)


def lengths_from_mean_p95(mean: float, p95: float | None) -> LengthDist:
    """Fixed when ``p95`` is None or equals the mean, else lognormal."""
    if is_fixed(mean, p95):
        return LengthDist(mean=mean)
    return LengthDist(mean=mean, kind="lognormal", p95=p95)


@dataclass(frozen=True)
class Workload:
    """What the clients send.

    Open loop: ``rate_rps`` with ``arrival`` ``poisson`` or ``gamma`` (inter-arrival
    coefficient of variation ``cv``; cv=1 is Poisson, >1 bursty), or ``trace`` replaying
    ``trace_s`` / ``trace_prompt_tokens`` / ``trace_output_tokens``.
    Closed loop: ``concurrency`` clients, each sending its next request the moment the last
    one finishes (``vllm bench serve --max-concurrency``); all start at t = 0.
    ``warmup_requests`` (by issue order) are simulated but left out of the statistics.
    """

    isl: LengthDist
    osl: LengthDist
    requests: int = 1000
    rate_rps: float | None = None
    concurrency: int | None = None
    arrival: str = "poisson"
    cv: float = 1.0
    trace_s: np.ndarray | None = None
    trace_prompt_tokens: np.ndarray | None = None
    trace_output_tokens: np.ndarray | None = None
    shared_prefix_tokens: float = 0.0
    prefix_hit_rate: float = 0.0
    warmup_requests: int = 0
    seed: int = 0

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None


def read_trace_csv(lines: Sequence[str] | Iterator[str]) -> tuple[np.ndarray, ...]:
    """(timestamp_s, prompt_tokens, output_tokens) arrays from CSV text with that header;
    timestamps are shifted to start at 0 and sorted."""
    import csv

    reader = csv.DictReader(lines)
    rows = [
        (float(r["timestamp"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in reader
    ]
    if not rows:
        raise ValueError("trace has no rows")
    arr = np.array(sorted(rows), dtype=np.float64)
    return arr[:, 0] - arr[0, 0], arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64)


def _open_loop_draws(w: Workload, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(send time s, isl, osl) of every request, ``ARRIVAL_CHUNK`` draws at a time (the order
    the generator is drawn in fixes the numbers: gaps, prompts, outputs per chunk)."""
    if w.arrival == "trace":
        return (np.asarray(w.trace_s, dtype=np.float64),
                np.asarray(w.trace_prompt_tokens, dtype=np.int64),
                np.asarray(w.trace_output_tokens, dtype=np.int64))  # fmt: skip
    rate = float(w.rate_rps)
    now, left = 0.0, w.requests
    times, isl, osl = [], [], []
    while left > 0:
        n = min(left, ARRIVAL_CHUNK)
        if w.arrival == "poisson" or w.cv == 1.0:
            gaps = rng.exponential(1.0 / rate, n)
        elif w.arrival == "gamma":
            # gamma with mean 1/rate and cv: shape 1/cv^2, scale cv^2/rate
            shape = 1.0 / (w.cv * w.cv)
            gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
        else:
            raise ValueError(f"unknown arrival process {w.arrival!r}")
        chunk = now + np.cumsum(gaps)
        now = float(chunk[-1])
        times.append(chunk)
        isl.append(w.isl.sample(n, rng))
        osl.append(w.osl.sample(n, rng))
        left -= n
    return _joined(times, np.float64), _joined(isl, np.int64), _joined(osl, np.int64)


def _closed_loop_draws(w: Workload, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """(isl, osl) of every request, in chunks as ``_open_loop_draws``."""
    left, isl, osl = w.requests, [], []
    while left > 0:
        n = min(left, ARRIVAL_CHUNK)
        isl.append(w.isl.sample(n, rng))
        osl.append(w.osl.sample(n, rng))
        left -= n
    return _joined(isl, np.int64), _joined(osl, np.int64)


def _joined(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


# ============================================================================ engine
@dataclass(frozen=True)
class SimEngine:
    """Per-DP-rank engine limits the scheduler obeys (derived from the candidate)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int
    block_size: int = 16
    chunked_prefill: bool = True
    #: admit a sequence only with the blocks for its prompt and whole output free, and never
    #: preempt (TensorRT-LLM's default GUARANTEED_NO_EVICT; ``kv_reserves_output``)
    reserve_output: bool = False


#: Shortest row of decode counts a step-time cell is filled with (see ``StepTimer._fill``).
ROW_MIN_DECODES = 64
#: Context cells filled by one core call (with the same prompt-token cells): a call costs
#: ~0.1 ms whatever its size up to a few thousand elements (numpy's per-operation overhead),
#: and the decodes' mean context drifts across neighbouring cells while the prefill inputs
#: repeat, so a miss fills its block of 32 (half an octave of context) at once.
CONTEXT_BLOCK = 32
#: At most this many step times per core call: long rows get a narrower context block.
BLOCK_ELEMENTS = 8192
#: Prompt-token cells a mixed step's core call fills with its own (``StepTimer._prompt_band``):
#: on the typical scenario's searches 8 took the core calls from 21,845 to 15,366 (16 and 32
#: no fewer: the narrower context block then misses more), every value the same.
PROMPT_BAND = 8
#: Blocks kept per timer (bytes), the least recently used dropped first: a dropped block only
#: costs a core call again for a cell not read yet (the cells read are kept as rows). Unbounded,
#: one search of the typical scenario held 77 MB of blocks; at 32 MB its run makes 4.5 % more
#: core calls (23,249 against 22,237).
BLOCK_CACHE_BYTES = 32 << 20
#: The compiled loop's table of step-time rows per timer (bytes; emptied when full). Whole
#: blocks go in, so a neighbouring cell costs no return to Python.
TABLE_BYTES = 48 << 20
#: Step-time memos kept per thread across searches (``shared_timer``), bytes of their tables
#: and blocks (environment ``SIZING_STEP_MEMO_MB``; default 0, none kept): a step time is a
#: function of the candidate's row and its grid cell only, not of the traffic, so a rerun,
#: another scenario or another door sizing the same candidate can reuse every row its timer
#: filled (the typical scenario's 17 timers hold ~500 MB once trimmed). Off by default: in
#: process a rerun of the typical scenario took 30-45 % less CPU with 1024 MB, but through
#: Celery workers two bench/scenarios.py runs disagreed (memo warm 12.1 s against 10.3 s off,
#: then 13.6 s against 15.3 s, 1 worker): no gain measurable there yet for ~0.5 GB a worker.
SHARED_TIMER_BYTES = int(os.environ.get("SIZING_STEP_MEMO_MB", "0")) << 20


@functools.lru_cache(maxsize=1 << 16)
def grid_value(k: int, per_octave: int) -> float:
    """The value a key stands for (the cell's centre on the log grid); remembered, since each
    core call asks ~50 of them and the keys of a run repeat (a few thousand distinct)."""
    if k <= EXACT_BELOW:
        return float(k)
    return 2.0 ** ((k - EXACT_BELOW - 1) / per_octave)


class StepTimer:
    """Memoised ``decode_step(c, n_dec, ctx, pre, p_eq).step_s`` for one candidate row (s).

    Continuous inputs are rounded to a 1/64-octave grid (exact up to 64); on a miss one
    vectorized core call fills a row of decode counts 0..n (n a power of two, grown when a
    larger count comes) for that cell and its block of neighbouring context cells (the core
    is elementwise, so a cell's numbers do not depend on the block it was computed in).
    Reuse one timer across runs of the same candidate (sweeps, bisection).
    """

    def __init__(
        self,
        c: CandidateArrays,
        max_decodes: int,
        context_block: int = CONTEXT_BLOCK,
        prompt_band: int = PROMPT_BAND,
    ):
        if len(c) != 1:
            raise ValueError("StepTimer takes a single candidate row")
        self.c = c
        self.core_c = c.scalar_row()  # the same numbers for the core, at less cost per call
        self.decodes = np.arange(max_decodes + 1, dtype=np.float64)
        self.context_block = context_block
        self.prompt_band = prompt_band
        self.rows: dict[tuple[int, int, int], list[float]] = {}
        #: (context block, prompt-token key, p_eq key) -> step times [context cell, decodes]
        self.blocks: dict[tuple[int, int, int], np.ndarray] = {}
        self.block_bytes = 0
        self.edges: dict[int, tuple[float, float]] = {}  # context key -> context_cell
        self.core_calls = 0
        #: the rows the compiled event loop reads (``fill_table``)
        self.table = StepTable(TABLE_BYTES)

    @functools.cached_property
    def affine(self) -> AffineStep | None:
        """The row's step time as a few numbers per grid cell, which the compiled loop
        composes itself (``sizing.step_affine``; None where the core is not of that shape).
        Built when a simulation first asks (a MoE row's weight stream is a table of its own)."""
        return affine_step(self.core_c, len(self.decodes) - 1) if AFFINE_STEPS else None

    def key(self, ctx_mean: float, pre: float, p_eq: float) -> tuple[int, int, int]:
        """The memo cell of these inputs (see the module docstring)."""
        return (
            grid_key(ctx_mean, GRID_PER_OCTAVE),
            grid_key(pre, PREFILL_GRID_PER_OCTAVE),
            grid_key(p_eq, PREFILL_GRID_PER_OCTAVE),
        )

    def step_s(self, n_dec: int, ctx_mean: float, pre: float, p_eq: float) -> float:
        """Step time (s) of ``n_dec`` decodes at mean context ``ctx_mean`` plus ``pre`` prompt
        tokens whose prefill attention is that of a ``p_eq``-token prompt."""
        return self.row(self.key(ctx_mean, pre, p_eq), n_dec)[n_dec]

    def row(self, key: tuple[int, int, int], n_dec: int) -> list[float]:
        """The cell's step times by decode count, at least ``n_dec + 1`` of them."""
        row = self.rows.get(key)
        if row is None or n_dec >= len(row):
            row = self._fill(key, n_dec)
        return row

    def decode_cell(self, n_dec: int, ctx_mean: float) -> tuple[float, float]:
        """``step_s(n_dec, ctx_mean, 0, 0.0)`` and a context below which, from ``ctx_mean`` up,
        every decode-only step of ``n_dec`` sequences has that same time (its grid cell's upper
        edge, a hair inside): a decode run's context only grows, so it asks again only when it
        leaves the cell."""
        k = grid_key(ctx_mean, GRID_PER_OCTAVE)
        row = self.row((k, 0, 0), n_dec)  # no prompt tokens: both prefill keys are 0
        return row[n_dec], self.context_edges(k)[1]

    def context_edges(self, k: int) -> tuple[float, float]:
        """``context_cell(k)``, remembered (two powers per cell otherwise)."""
        edges = self.edges.get(k)
        if edges is None:
            edges = self.edges[k] = context_cell(k)
        return edges

    def _fill(self, key: tuple[int, int, int], n_dec: int) -> list[float]:
        """The cell's row of step times for 0..n decodes (``_block_shape``), from its context
        block, computed by one core call when the block is missing or shorter than ``n_dec``."""
        length, width, first = self._block_shape(key, n_dec)
        block_key = (first, key[1], key[2])
        block = self.blocks.pop(block_key, None)  # re-inserted below: the newest is kept longest
        if block is None or block.shape[0] <= key[0] - first or block.shape[1] <= n_dec:
            if block is not None:
                self.block_bytes -= block.size * 8
            block = self._core(first, width, key[1], key[2], length)
            self.block_bytes += block.size * 8
        self._keep(block_key, block)
        row = block[key[0] - first].tolist()
        self.rows[key] = row
        return row

    def fill_table(self, key: tuple[int, int, int], n_dec: int) -> float:
        """Put the block of ``key``'s cell, with rows of at least ``n_dec + 1`` decode counts,
        into ``table`` (one core call); its step time.

        A step with prompt tokens fills a band of ``prompt_band`` prompt-token cells with it
        (``_prompt_band``): a mixed step's prompt tokens are nearly always a new cell, its
        context cell rarely, and a core call costs the same for 8x the cells."""
        pre_keys, p_keys = self._prompt_band(key)
        length, width, first = self._block_shape(key, n_dec, len(pre_keys))
        block = self._core_band(first, width, pre_keys, p_keys, length)
        keys = block_keys(first, width, np.array(pre_keys), np.array(p_keys))
        self.table.put(keys, block.reshape(width * len(pre_keys), length))
        return float(block[key[0] - first, pre_keys.index(key[1]), n_dec])

    def _prompt_band(self, key: tuple[int, int, int]) -> tuple[list[int], list[int]]:
        """The prompt-token cells filled with ``key``'s (``prompt_band``); a decode-only step
        (prompt key 0) fills its own cell only."""
        if key[1] == 0:
            return [0], [key[2]]
        return prompt_band(key[1], key[2], self.prompt_band)

    def _block_shape(
        self, key: tuple[int, int, int], n_dec: int, band: int = 1
    ) -> tuple[int, int, int]:
        """Row length (the next power of two above ``n_dec``, at least ``ROW_MIN_DECODES``, at
        most ``max_decodes``: a run rarely decodes more than a few hundred sequences and the
        core's cost grows with the row), context cells and first cell of ``key``'s block
        (``band`` prompt-token cells per context cell)."""
        length = min(max(ROW_MIN_DECODES, 1 << n_dec.bit_length()), len(self.decodes))
        width = max(1, min(self.context_block, BLOCK_ELEMENTS // (length * band)))
        return length, width, key[0] // width * width

    def _keep(self, block_key: tuple[int, int, int], block: np.ndarray) -> None:
        """Remember ``block`` as the most recently used, dropping the least recently used
        ones past ``BLOCK_CACHE_BYTES``."""
        self.blocks[block_key] = block
        while self.block_bytes > BLOCK_CACHE_BYTES and len(self.blocks) > 1:
            oldest = self.blocks.pop(next(iter(self.blocks)))
            self.block_bytes -= oldest.size * 8

    def _core(self, first: int, width: int, pre_k: int, p_k: int, length: int) -> np.ndarray:
        """Step times of context cells ``first..first + width - 1`` x decodes ``0..length-1``."""
        return self._core_band(first, width, [pre_k], [p_k], length)[:, 0, :]

    def _core_band(
        self, first: int, width: int, pre_keys: list[int], p_keys: list[int], length: int
    ) -> np.ndarray:
        """Step times of context cells ``first..first + width - 1`` x the prompt-token cells
        ``zip(pre_keys, p_keys)`` x decodes ``0..length-1`` (the core is elementwise: each
        value is the one ``_core`` gives for its cell)."""
        ctx = np.array([grid_value(k, GRID_PER_OCTAVE) for k in range(first, first + width)])
        pre_v = np.array([grid_value(k, PREFILL_GRID_PER_OCTAVE) for k in pre_keys])
        p_v = np.array([grid_value(k, PREFILL_GRID_PER_OCTAVE) for k in p_keys])
        self.core_calls += 1
        decodes = self.decodes[None, None, :length]
        step = decode_step(
            self.core_c, decodes, ctx[:, None, None], pre_v[None, :, None], p_v[None, :, None]
        ).step_s
        shape = (width, len(pre_keys), length)
        return step if step.shape == shape else np.broadcast_to(step, shape)

    @property
    def nbytes(self) -> int:
        """Memory held by the memo: the compiled loop's table, the blocks and the row's
        decomposition once built (a MoE row's weight table up to 32 MB) (bytes)."""
        affine = self.__dict__.get("affine")  # the cached property, without building it
        held = sum(a.nbytes for a in affine.arrays()) if affine is not None else 0
        return self.table.nbytes + self.block_bytes + held


def prompt_band(pre_k: int, p_k: int, band: int) -> tuple[list[int], list[int]]:
    """The prompt-token cells (prompt key, p_eq key) one core call fills with ``(pre_k,
    p_k)``'s: ``band`` aligned neighbours along the line ``p_eq key - prompt key = const`` (a
    whole prompt in one chunk has ``p_eq = prompt``: three mixed steps in four lie on the
    diagonal), keeping both keys >= 1."""
    offset = p_k - pre_k
    start = pre_k // band * band
    pre_keys = [k for k in range(start, start + band) if k >= 1 and k + offset >= 1]
    return pre_keys, [k + offset for k in pre_keys]


_shared = threading.local()


def shared_timer(c: CandidateArrays, max_decodes: int) -> StepTimer:
    """The step-time memo of this candidate row, kept for the thread's next searches.

    Keyed by every number of the row (and its specs) and ``max_decodes``; the least recently
    used memos are dropped past ``SHARED_TIMER_BYTES``. Sharing changes no number (a row of
    step times is a pure function of its cell: the table is filled in any order), only how
    many core calls a search makes. Per thread, since a timer's table is not thread-safe."""
    if SHARED_TIMER_BYTES <= 0:
        return StepTimer(c, max_decodes)
    timers: OrderedDict = _shared.__dict__.setdefault("timers", OrderedDict())
    for idle in timers.values():
        idle.table.trim()
    key = (_row_digest(c), int(max_decodes))
    timer = timers.pop(key, None) or StepTimer(c, max_decodes)
    timers[key] = timer  # the most recently used last
    while len(timers) > 1 and sum(t.nbytes for t in timers.values()) > SHARED_TIMER_BYTES:
        timers.popitem(last=False)
    return timer


def clear_shared_timers() -> None:
    """Forget this thread's step-time memos (a benchmark's cold start)."""
    _shared.__dict__.pop("timers", None)


def _row_digest(c: CandidateArrays) -> str:
    """SHA-256 of the candidate row's arrays and specs."""
    h = hashlib.sha256()
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        if isinstance(value, np.ndarray):
            h.update(f"{f.name}:{value.dtype}:".encode() + np.ascontiguousarray(value).tobytes())
        else:
            h.update(f"{f.name}:{value!r}".encode())
    return h.hexdigest()


def context_cell(k: int) -> tuple[float, float]:
    """Open interval of contexts that surely map to key ``k`` (a hair inside the rounding
    edges, where float ties could go either way)."""
    if k <= EXACT_BELOW:
        return k - 0.49, min(k + 0.49, EXACT_BELOW)
    m = k - EXACT_BELOW - 1
    low = max(2.0 ** ((m - 0.49) / GRID_PER_OCTAVE), EXACT_BELOW + 1e-9)
    return low, 2.0 ** ((m + 0.49) / GRID_PER_OCTAVE)


def engine_for(
    c: CandidateArrays, isl_tokens: float, osl_tokens: float, chunked_prefill: bool = True
) -> SimEngine:
    """One DP rank's limits for row 0 of ``c``: max_num_seqs, the token budget, and the KV pool
    in blocks. Bytes per cached token are taken at the workload's full context
    ``isl + osl`` (so sliding-window layers count as they do in the memory fit):
    ``blocks = floor(kv_budget / (kv_seq_gpu(ctx) / ctx) / block_size)``."""
    ctx = allocated_context(c, np.array([isl_tokens + osl_tokens]))
    fit = fit_memory(c, ctx)
    per_token = kv_bytes_per_sequence_per_gpu(c, ctx) / ctx + draft_kv_bytes_per_token_per_gpu(c)
    budget = max(float(fit.kv_budget_bytes_per_gpu[0]), 0.0)
    block = int(c.block_size[0])
    return SimEngine(
        max_num_seqs=int(c.max_num_seqs[0]),
        max_num_batched_tokens=int(c.max_num_batched_tokens[0]),
        kv_blocks=int(budget / float(per_token[0]) // block),
        block_size=block,
        chunked_prefill=chunked_prefill,
        reserve_output=bool(c.kv_reserves_output[0] > 0),
    )


# ============================================================================ results
@dataclass(frozen=True)
class SimResult:
    """Per-request times (s, NaN for warm-up requests), summary, and downsampled series.

    Attributes
    ----------
    arrival_s, ttft_s, tpot_s, e2e_s, isl_tokens, osl_tokens : per request, issue order
    preemptions : sequences preempted (recompute) over the run
    simulated_s : first arrival to last completion
    steps : engine steps simulated; longest_step_s : the worst inter-token stall (s)
    series_t_s, queue_len, running, kv_used_fraction : samples over time (<= ~2*max_points)
    """

    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    isl_tokens: np.ndarray
    osl_tokens: np.ndarray
    preemptions: int
    simulated_s: float
    steps: int
    series_t_s: np.ndarray
    queue_len: np.ndarray
    running: np.ndarray
    kv_used_fraction: np.ndarray
    dp: int = 1
    measured: np.ndarray = field(default=None, repr=False)  # bool mask: not warm-up
    longest_step_s: float = 0.0  # the longest engine step: the worst stall of the decodes

    def _m(self, x: np.ndarray) -> np.ndarray:
        return x[self.measured]

    def percentiles_ms(self, name: str) -> dict[str, float]:
        """{'p50','p90','p95','p99'} of ``ttft``/``tpot``/``e2e`` in ms."""
        x = self._m(getattr(self, f"{name}_s")) * 1e3
        x = x[np.isfinite(x)]
        if x.size == 0:
            return {f"p{p}": float("nan") for p in PERCENTILES}
        vals = np.percentile(x, PERCENTILES)
        return {f"p{p}": float(v) for p, v in zip(PERCENTILES, vals, strict=True)}

    def mean_ms(self, name: str) -> float:
        x = self._m(getattr(self, f"{name}_s"))
        return float(np.nanmean(x) * 1e3)

    @property
    def requests(self) -> int:
        return int(self.measured.sum())

    @property
    def window_s(self) -> float:
        """Span of the measured requests, first arrival to last completion (s)."""
        arr, e2e = self._m(self.arrival_s), self._m(self.e2e_s)
        return float(np.max(arr + e2e) - np.min(arr)) if arr.size else 0.0

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens of the measured requests over their window, all DP ranks."""
        w = self.window_s
        return float(self._m(self.osl_tokens).sum() / w * self.dp) if w > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        w = self.window_s
        return float(self.requests / w * self.dp) if w > 0 else 0.0

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float) -> float:
        """Fraction of measured requests meeting both SLOs (TPOT of a 1-token output is 0)."""
        ttft, tpot = self._m(self.ttft_s), np.nan_to_num(self._m(self.tpot_s))
        if ttft.size == 0:
            return 0.0
        return float(np.mean((ttft <= ttft_slo_s) & (tpot <= tpot_slo_s)))

    def summary(self, ttft_slo_ms: float = math.inf, tpot_slo_ms: float = math.inf) -> dict:
        """The command's JSON object (see ``manage.py simulate``)."""
        return {
            "ttft_ms": self.percentiles_ms("ttft"),
            "tpot_ms": self.percentiles_ms("tpot"),
            "e2e_ms": self.percentiles_ms("e2e"),
            "throughput_tok_s": self.output_tokens_per_s,
            "goodput": self.goodput(ttft_slo_ms / 1e3, tpot_slo_ms / 1e3),
            "preemptions": int(self.preemptions),
            "requests": self.requests,
            "simulated_s": float(self.simulated_s),
        }


# ============================================================================ simulation
#: The decode-only fast loop (``sim_kernel._decode_run``) on; a test turns it off to check it
#: changes no number.
DECODE_RUNS = True
#: Whether a timer composes its row's step times in the compiled loop where the core
#: decomposes (``sizing.step_affine``; environment ``SIZING_AFFINE_STEPS=0`` turns it off, to
#: compare): the same numbers to rounding, without a return to Python per step-time block.
AFFINE_STEPS = os.environ.get("SIZING_AFFINE_STEPS", "1") != "0"
#: The loop's decomposition arguments for a row without one (no scalars: the table serves).
NO_AFFINE = (np.zeros(0), np.zeros((1, 2)), np.zeros(1), np.zeros(1), np.zeros((0, 0)))


def simulate(
    c: CandidateArrays,
    workload: Workload,
    engine: SimEngine | None = None,
    timer: StepTimer | None = None,
    max_points: int = 500,
) -> SimResult:
    """Simulate one replica (row 0 of ``c``) serving ``workload``.

    Parameters
    ----------
    c : one candidate row (``CandidateArrays`` of length 1); DP > 1 is simulated as one rank
        with ``rate / DP`` (or ``concurrency / DP`` clients) and throughput scaled by DP
    workload : arrivals and lengths (seeded: same inputs -> identical results)
    engine : scheduler limits (default ``engine_for(c, isl mean, osl mean)``)
    timer : a ``StepTimer`` to share across runs of this candidate (or any object with
        ``step_s(n_dec, ctx, pre, p_eq)``, asked every step: a test's stand-in)
    max_points : size of the downsampled time series

    Returns
    -------
    SimResult
        TTFT = first token - arrival (the token leaves at the end of the step that finishes
        the prompt); TPOT = (last token - first token) / (osl - 1); E2E = last token - arrival.
    """
    dp = int(c.dp[0])
    eng = engine or engine_for(c, workload.isl.mean, workload.osl.mean)
    if eng.kv_blocks < 1 or eng.max_num_seqs < 1:
        raise ValueError("the candidate has no KV room for a single sequence")
    timer = timer or StepTimer(c, eng.max_num_seqs)
    rng = np.random.default_rng(workload.seed)
    w = workload
    if dp > 1:
        if w.closed_loop:
            w = replace(w, concurrency=max(1, round(w.concurrency / dp)))
        elif w.arrival != "trace":
            w = replace(w, rate_rps=w.rate_rps / dp)
    n_req = len(w.trace_s) if w.arrival == "trace" and not w.closed_loop else w.requests
    sim = _Run(eng, timer, w, n_req, rng, max_points)
    sim.run()
    st, fs = sim.st, sim.fs
    t, q, r, kv = (sim.series[: st[K.S_SERIES_LEN], j] for j in range(4))
    measured = np.arange(n_req) >= w.warmup_requests
    arrival_s = sim.rf[:, K.Q_ARR].copy()
    return SimResult(
        arrival_s=arrival_s,
        ttft_s=sim.rf[:, K.Q_TTFT].copy(),
        tpot_s=sim.rf[:, K.Q_TPOT].copy(),
        e2e_s=sim.rf[:, K.Q_E2E].copy(),
        isl_tokens=sim.ri[:, K.R_ISL].copy(),
        osl_tokens=sim.ri[:, K.R_OSL].copy(),
        preemptions=int(st[K.S_PREEMPT]),
        simulated_s=float(fs[K.F_NOW]) - float(np.min(arrival_s)) if n_req else 0.0,
        steps=int(st[K.S_STEP]),
        series_t_s=t.copy(),
        queue_len=q.astype(np.int64),
        running=r.astype(np.int64),
        kv_used_fraction=kv.copy(),
        dp=dp,
        measured=measured,
        longest_step_s=float(fs[K.F_LONGEST]),
    )


class _Run:
    """One run's state in arrays and the compiled loop that advances it (``sim_kernel``); the
    loop comes back here only for a step-time row it lacks, or for more heap room."""

    def __init__(self, eng: SimEngine, timer, w: Workload, n_req: int, rng, max_points: int):
        self.timer = timer
        self.table = getattr(timer, "table", None)  # None: a stand-in asked every step
        block = eng.block_size
        # The engine's front end (HTTP, tokenizer, admission) delays every request by a fixed
        # latency before the scheduler sees it: a request sent at t enters the queue at
        # t + frontend, and its TTFT/E2E (from t) include the delay.
        c = getattr(timer, "c", None)  # a test's stand-in timer has no candidate
        self.frontend_s = float(c.frontend_latency_s[0]) if c is not None else 0.0
        # speculative decoding: a decode step emits tau tokens per sequence on average, so an
        # output of n tokens takes ceil(n / tau) steps (the step time, from decode_step,
        # carries the k + 1 verified tokens and the drafts)
        self.tokens_per_step = float(c.spec_tokens_per_step[0]) if c is not None else 1.0
        # the scheduler polls for new requests every ``recv`` decode steps (1: every step); the
        # decode-run fast path does not poll, so such runs take the general loop step by step
        recv = int(c.scheduler_recv_interval[0]) if c is not None else 1
        if w.closed_loop:
            isl, osl = _closed_loop_draws(w, rng)
            times = np.zeros(0)
        else:
            times, isl, osl = _open_loop_draws(w, rng)
        self.draws = (times, isl, osl)
        # prefix cache: whole blocks of the shared prefix, pinned once in the pool; a request
        # hits it with its own draw (in issue order, from a second stream)
        prefix_tokens = int(w.shared_prefix_tokens // block) * block
        pinned = -(-prefix_tokens // block) if w.prefix_hit_rate > 0 else 0
        if w.prefix_hit_rate > 0:
            self.hits = np.random.default_rng([w.seed, 1]).random(n_req) < w.prefix_hit_rate
        else:
            self.hits = np.zeros(n_req, dtype=np.bool_)
        self.cfg = np.zeros(K.CONFIG_SLOTS, dtype=np.int64)
        self.cfg[[K.C_BLOCK, K.C_MAX_SEQS, K.C_BUDGET, K.C_KV_BLOCKS, K.C_CHUNKED, K.C_CLOSED,
                  K.C_CONCURRENCY, K.C_REQUESTS, K.C_PREFIX, K.C_ONE_SHOT, K.C_DECODE_RUNS,
                  K.C_MAX_POINTS, K.C_RESERVE, K.C_RECV]] = (
            block, eng.max_num_seqs, eng.max_num_batched_tokens, eng.kv_blocks,
            eng.chunked_prefill, w.closed_loop, w.concurrency or 0, n_req, prefix_tokens,
            self.table is None, DECODE_RUNS and recv <= 1, max(max_points, 2),
            eng.reserve_output, recv,
        )  # fmt: skip
        self.st = np.zeros(K.INT_SLOTS, dtype=np.int64)
        self.st[K.S_FREE] = eng.kv_blocks - pinned
        self.st[K.S_SERIES_EVERY] = 1
        self.fs = np.zeros(K.FLOAT_SLOTS)
        self.ri = np.zeros((n_req, K.REQUEST_INTS), dtype=np.int64)
        self.rf = np.full((n_req, K.REQUEST_FLOATS), np.nan)
        seqs = eng.max_num_seqs + 1
        self.queues = (
            np.zeros(n_req + 1, dtype=np.int64),  # waiting (a ring)
            np.zeros(seqs, dtype=np.int64),  # running, in admission order
            np.zeros(2 * seqs, dtype=np.int64),  # prefilling, in admission order; a copy above
            np.zeros((2 * seqs, 2), dtype=np.int64),  # this step's chunks (request, tokens)
        )
        self.heap = np.zeros((4 * seqs + 64, 3), dtype=np.int64)  # (finish step, id, version)
        # closed-loop re-sends waiting for the front end: (entry s, send s), (order, isl, osl)
        self.pend_t = np.zeros((n_req + 1, 2))
        self.pend_k = np.zeros((n_req + 1, 3), dtype=np.int64)
        self.phase = np.zeros(block, dtype=np.int64)  # decodes by (A mod block): who needs a block
        self.series = np.zeros((2 * max(max_points, 2), 4))

    def run(self) -> None:
        times, isl, osl = self.draws
        waiting, running, prefilling, chunks = self.queues
        if self.cfg[K.C_CLOSED]:
            K.open_closed_loop(self.cfg, self.frontend_s, self.st, self.ri, self.rf, isl, osl,
                               self.hits, waiting, self.pend_t, self.pend_k)  # fmt: skip
        empty = (np.full(1, -1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                 np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1))  # fmt: skip
        affine = getattr(self.timer, "affine", None)
        affine = affine.arrays() if affine is not None else NO_AFFINE
        while True:
            table = self.table.arrays() if self.table is not None else empty
            status = K.run_loop(
                self.cfg, self.tokens_per_step, self.frontend_s, self.st, self.fs, self.ri,
                self.rf, times, isl, osl, self.hits, waiting, running, prefilling, chunks,
                self.heap, self.pend_t, self.pend_k, self.phase, self.series, *table, *affine,
            )  # fmt: skip
            if status == K.DONE:
                return
            if status == K.NEED_ROW:
                self._give_step_time()
            elif status == K.GROW:
                self.heap = np.concatenate([self.heap, np.zeros_like(self.heap)])
            elif status == K.TOO_BIG:
                raise ValueError(
                    f"a {int(self.st[K.S_BAD_TOKENS]):,}-token prompt needs more than the "
                    f"{int(self.cfg[K.C_KV_BLOCKS]):,}-block KV pool holds"
                )
            else:
                raise RuntimeError("the simulator reached an impossible state")

    def _give_step_time(self) -> None:
        """The step time the loop stopped for: from its cell's row (filling its block into the
        table when missing), or a stand-in timer's answer; handed back for that one step."""
        st, fs = self.st, self.fs
        n_dec = int(st[K.S_NEED_DEC])
        if self.table is None:
            dt = self.timer.step_s(n_dec, float(fs[K.F_NEED_CTX]), int(st[K.S_NEED_TOKENS]),
                                   float(fs[K.F_NEED_PEQ]))  # fmt: skip
        else:
            key = (int(st[K.S_NEED_CTX]), int(st[K.S_NEED_PRE]), int(st[K.S_NEED_PEQ]))
            dt = self.timer.fill_table(key, n_dec)
        fs[K.F_GIVEN_DT] = dt
        st[K.S_GIVEN] = 1


# ============================================================================ sweeps
def meets_slo(
    result: SimResult,
    ttft_slo_ms: float,
    tpot_slo_ms: float,
    percentile: float = 95.0,
    goodput_target: float = 0.99,
) -> bool:
    """Both latency percentiles within their SLOs and ``goodput >= goodput_target``."""
    ttft = result._m(result.ttft_s) * 1e3
    tpot = np.nan_to_num(result._m(result.tpot_s)) * 1e3
    if ttft.size == 0:
        return False
    return bool(
        np.percentile(ttft, percentile) <= ttft_slo_ms
        and np.percentile(tpot, percentile) <= tpot_slo_ms
        and result.goodput(ttft_slo_ms / 1e3, tpot_slo_ms / 1e3) >= goodput_target
    )


def rate_sweep(
    c: CandidateArrays,
    isl: LengthDist,
    osl: LengthDist,
    rates_rps: Sequence[float],
    requests: int = 2000,
    seed: int = 0,
    ttft_slo_ms: float = math.inf,
    tpot_slo_ms: float = math.inf,
    percentile: float = 95.0,
) -> dict[str, np.ndarray]:
    """Throughput-latency curve of one replica (row 0 of ``c``): Poisson arrivals at each
    rate (same seed, so the curves are smooth), the first 10 % of requests as warm-up.

    Returns arrays per rate: ``rate_rps``, ``throughput_tok_s`` (output), ``ttft_ms`` and
    ``tpot_ms`` at ``percentile``, ``goodput``, ``preemptions``. Plot latency against
    throughput: the knee is where the latency starts to climb at flat throughput.
    """
    eng = engine_for(c, isl.mean, osl.mean)
    timer = StepTimer(c, eng.max_num_seqs)
    out: dict[str, list] = {k: [] for k in ("rate_rps", "throughput_tok_s", "ttft_ms", "tpot_ms",
                                            "goodput", "preemptions")}  # fmt: skip
    for rate in rates_rps:
        w = Workload(isl, osl, requests=requests, rate_rps=float(rate), seed=seed,
                     warmup_requests=requests // 10)  # fmt: skip
        r = simulate(c, w, eng, timer)
        out["rate_rps"].append(float(rate))
        out["throughput_tok_s"].append(r.output_tokens_per_s)
        out["ttft_ms"].append(_pct_ms(r, "ttft", percentile))
        out["tpot_ms"].append(_pct_ms(r, "tpot", percentile))
        out["goodput"].append(r.goodput(ttft_slo_ms / 1e3, tpot_slo_ms / 1e3))
        out["preemptions"].append(r.preemptions)
    return {k: np.asarray(v) for k, v in out.items()}


def _pct_ms(r: SimResult, name: str, percentile: float) -> float:
    x = r._m(getattr(r, f"{name}_s")) * 1e3
    x = x[np.isfinite(x)]
    return float(np.percentile(x, percentile)) if x.size else math.nan


@dataclass(frozen=True)
class RateSearch:
    """Result of ``max_rate_for_slo``: the highest rate found meeting the SLO (0 if none),
    the simulation there, the simulations run and the bracket at the end (req/s)."""

    rate_rps: float
    result: SimResult | None
    simulations: int
    low_rps: float
    high_rps: float


def max_rate_for_slo(
    c: CandidateArrays,
    isl: LengthDist,
    osl: LengthDist,
    ttft_slo_ms: float,
    tpot_slo_ms: float,
    percentile: float = 95.0,
    goodput_target: float = 0.99,
    requests: int = 1500,
    seed: int = 0,
    rel_tol: float = 0.03,
    upper_rps: float | None = None,
) -> RateSearch:
    """Highest Poisson request rate per replica (row 0 of ``c``, all DP ranks) whose simulated
    TTFT and TPOT percentiles meet the SLOs and whose goodput reaches ``goodput_target``.

    Bisection in log rate between 0 and an upper bound (default: 1.2x the mean-value
    model's max-throughput request rate, ``operating.closed_loop`` at the largest batch),
    with common random numbers (one seed) so ``meets(rate)`` is monotone in practice; stops
    when ``high / low < 1 + rel_tol``. One StepTimer is shared by every run.
    """
    from sizing.operating import closed_loop

    eng = engine_for(c, isl.mean, osl.mean)
    timer = StepTimer(c, eng.max_num_seqs)
    if upper_rps is None:
        fit = fit_memory(c, np.array([isl.mean + osl.mean]))
        op = closed_loop(c, fit, isl.mean, osl.mean, np.nan)
        upper_rps = 1.2 * float(op.requests_per_s[0])
    runs = 0

    def run(rate: float) -> tuple[bool, SimResult]:
        nonlocal runs
        runs += 1
        w = Workload(isl, osl, requests=requests, rate_rps=rate, seed=seed,
                     warmup_requests=requests // 10)  # fmt: skip
        r = simulate(c, w, eng, timer)
        return meets_slo(r, ttft_slo_ms, tpot_slo_ms, percentile, goodput_target), r

    hi = float(upper_rps)
    ok, best = run(hi)
    if ok:
        return RateSearch(hi, best, runs, hi, hi)
    lo, best = 0.0, None
    probe = hi / 16.0
    # find a feasible lower end by stepping down 16x at a time (a few runs at most)
    while probe > hi * 1e-6:
        ok, r = run(probe)
        if ok:
            lo, best = probe, r
            break
        hi = probe
        probe /= 16.0
    if best is None:
        return RateSearch(0.0, None, runs, 0.0, hi)
    while hi / lo > 1.0 + rel_tol:
        mid = math.sqrt(lo * hi)
        ok, r = run(mid)
        if ok:
            lo, best = mid, r
        else:
            hi = mid
    return RateSearch(lo, best, runs, lo, hi)
