"""The aggregated simulator's event loop, compiled (numba), and its step-time table.

``sizing.simulate`` documents the engine model; this module is its loop, step by step the
same operations in the same order (so every number is the one the pure-Python loop gave),
on request state held in numpy arrays. Random draws are made in numpy beforehand (the same
seed gives the same requests). Step times come from a table of rows (decode counts) keyed by
the memo grid's cell; when the loop needs a cell the table lacks, it returns ``NEED_ROW``
with the cell's key, the caller fills that cell's block with one vectorized core call
(``StepTimer``) and calls the loop again, which resumes where it stopped (every variable of
the loop lives in the state arrays).

Compiled with ``cache=True``: the machine code is kept on disk beside this file (or in
``NUMBA_CACHE_DIR``), so a new process loads it instead of compiling; where the folder is
read-only numba compiles in memory instead (slower start, same numbers).
"""

from __future__ import annotations

import math

import numba
import numpy as np


def compiled_with(**options):
    """A decorator: ``numba.njit(cache=True, **options)``, or in memory where no cache folder
    is writable (numba refuses ``cache=True`` then): the same machine code, compiled anew by
    each process."""

    def decorate(fn):
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError:
            return numba.njit(**options)(fn)

    return decorate


#: ``numba.njit(cache=True)`` (see ``compiled_with``)
compiled = compiled_with()
#: ``compiled`` without numba's reference counts (``_nrt=False``; every numba release the
#: project allows takes it, and numba refuses to compile a function so flagged that would
#: allocate, so none can leak): the event loop's functions pass a dozen arrays each, and every
#: call counted a reference up and down on each with an atomic operation (100,000 lognormal
#: requests 0.22 -> 0.06 s, the same numbers). The loop allocates nothing; ``block_keys``,
#: ``affine_step_cells`` and ``table_put``, which do and are called from Python, keep them.
unrefcounted = compiled_with(_nrt=False)


# ---------------------------------------------------------------------------- statuses
DONE, NEED_ROW, GROW, TOO_BIG, BROKEN = 0, 1, 2, 3, 4

# ---------------------------------------------------------------------------- int state slots
(S_STEP, S_NDEC, S_ASUM, S_FREE, S_PREEMPT, S_ISSUED, S_FINISHED, S_NEXT_ARRIVAL,
 S_NEXT_LENGTH, S_WAIT_HEAD, S_WAIT_LEN, S_RUN_LEN, S_PRE_LEN, S_HEAP_LEN, S_PEND_LEN,
 S_IN_STEP, S_CHUNKS, S_SERIES_LEN, S_SERIES_EVERY, S_SENDS, S_NEED_CTX, S_NEED_PRE,
 S_NEED_PEQ, S_NEED_DEC, S_GIVEN, S_BAD_TOKENS, S_PRE_TOKENS, S_WEIGHTED,
 S_NEED_TOKENS, S_RECV_COUNT) = range(30)  # fmt: skip
INT_SLOTS = 30
# ---------------------------------------------------------------------------- float state slots
F_NOW, F_LONGEST, F_GIVEN_DT, F_NEED_CTX, F_NEED_PEQ = range(5)
FLOAT_SLOTS = 5
# ---------------------------------------------------------------------------- config slots
(C_BLOCK, C_MAX_SEQS, C_BUDGET, C_KV_BLOCKS, C_CHUNKED, C_CLOSED, C_CONCURRENCY, C_REQUESTS,
 C_PREFIX, C_ONE_SHOT, C_DECODE_RUNS, C_MAX_POINTS, C_RESERVE, C_RECV) = range(14)  # fmt: skip
CONFIG_SLOTS = 14
# ---------------------------------------------------------------------------- request columns
R_ISL, R_OSL, R_TARGET, R_DONE, R_GEN, R_CACHED, R_A, R_VER, R_RUNNING, R_DECODING = range(10)
REQUEST_INTS = 10
Q_ARR, Q_TFIRST, Q_TTFT, Q_TPOT, Q_E2E = range(5)
REQUEST_FLOATS = 5

#: The memo grid (``sizing.simulate`` re-exports these): context 1/64 octave, prompt tokens
#: and their attention length 1/32 octave, exact integers up to 64.
GRID_PER_OCTAVE = 64
PREFILL_GRID_PER_OCTAVE = 32
EXACT_BELOW = 64
NO_STEP = np.iinfo(np.int64).max
#: A row's step-time decomposition (``sizing.step_affine``): indices of its scalars.
A_GM, A_GD, A_GP, A_C0, A_C1, A_O0, A_O1, A_PO = range(8)
AFFINE_SCALARS = 8  # "no decode finishes" in the fast decode loop


@unrefcounted
def grid_key(x: float, per_octave: int) -> int:
    """The memo's key of ``x``: itself up to ``EXACT_BELOW``, then its log-grid cell (round
    half to even, as Python's ``round``)."""
    if x <= EXACT_BELOW:
        return int(np.rint(x))
    return EXACT_BELOW + 1 + int(np.rint(math.log2(x) * per_octave))


@unrefcounted
def table_key(ctx_k: int, pre_k: int, p_k: int) -> int:
    """One int64 of the three grid keys (each below 2^20: contexts far beyond 10^9 tokens)."""
    return (ctx_k << 40) | (pre_k << 20) | p_k


@compiled
def block_keys(first: int, width: int, pre_keys: np.ndarray, p_keys: np.ndarray) -> np.ndarray:
    """``table_key`` of every cell of a block, context-major: contexts ``first..first + width
    - 1`` x the prompt cells ``zip(pre_keys, p_keys)`` (one compiled call for the block)."""
    keys = np.empty(width * pre_keys.size, dtype=np.int64)
    for j in range(width):
        for i in range(pre_keys.size):
            keys[j * pre_keys.size + i] = table_key(first + j, pre_keys[i], p_keys[i])
    return keys


# ============================================================================ step table
@unrefcounted
def _slot(hash_keys: np.ndarray, key: int) -> int:
    """The hash slot holding ``key``, or the empty one where it would go (linear probing)."""
    mask = hash_keys.size - 1
    h = (key ^ (key >> 29)) * 0x5851F42D4C957F2D  # a multiplicative mix: neighbouring cells
    i = (h ^ (h >> 32)) & mask  # spread over the table (int64, wrapping as it may)
    while hash_keys[i] != key and hash_keys[i] != -1:
        i = (i + 1) & mask
    return i


@unrefcounted
def row_value(hash_keys, hash_rows, row_start, row_len, values, key: int, n: int) -> float:
    """Step time ``n`` of the row under ``key``, NaN when the row is missing or shorter."""
    i = _slot(hash_keys, key)
    if hash_keys[i] == -1:
        return np.nan
    row = hash_rows[i]
    if n >= row_len[row]:
        return np.nan
    return values[row_start[row] + n]


@compiled
def table_put(hash_keys, hash_rows, row_start, row_len, values, counts, keys, block) -> None:
    """Store each row of ``block`` under its key (replacing a shorter row; a row as long or
    longer is kept: a block of short rows may hold a cell a longer block filled before, and
    replacing it would cost that cell a core call again); ``counts`` holds (rows used, values
    used); the caller made room."""
    width, length = block.shape
    for j in range(width):
        i = _slot(hash_keys, keys[j])
        if hash_keys[i] == keys[j] and row_len[hash_rows[i]] >= length:
            continue
        row = counts[0]
        counts[0] += 1
        start = counts[1]
        counts[1] += length
        values[start : start + length] = block[j]
        row_start[row], row_len[row] = start, length
        hash_keys[i], hash_rows[i] = keys[j], row


@unrefcounted
def table_rehash(hash_keys, hash_rows, new_keys, new_rows) -> None:
    for i in range(hash_keys.size):
        if hash_keys[i] != -1:
            j = _slot(new_keys, hash_keys[i])
            new_keys[j], new_rows[j] = hash_keys[i], hash_rows[i]


class StepTable:
    """Step-time rows by grid cell, in flat arrays the compiled loop reads. Bounded: past
    ``max_bytes`` of values it is emptied and refilled on demand (the rows are pure functions
    of their cells, so dropping one only costs a core call again)."""

    def __init__(self, max_bytes: int):
        self.max_values = max(max_bytes // 8, 1 << 12)
        self.hash_keys = np.full(1 << 12, -1, dtype=np.int64)
        self.hash_rows = np.zeros(1 << 12, dtype=np.int64)
        self.row_start = np.zeros(1 << 11, dtype=np.int64)
        self.row_len = np.zeros(1 << 11, dtype=np.int64)
        # all the room up front: a large zeroed array is mapped lazily (a page takes memory
        # when first written), and doubling it from a small start copied the values each
        # time (~300 copies, ~8 % of a cold run's simulation time)
        self.values = np.zeros(self.max_values, dtype=np.float64)
        self.counts = np.zeros(2, dtype=np.int64)  # rows used, values used

    def _empty(self) -> None:
        """Forget every row, keeping the arrays' room: a full table fills up again, and
        growing it anew from the small start cost more than the core calls it saves (437
        copies, 1.7 s of the typical scenario's cold run)."""
        self.hash_keys.fill(-1)
        self.counts[:] = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self.arrays(), self.counts))

    def trim(self) -> None:
        """Give back the values' unused room (a table kept idle for a later search)."""
        used = int(self.counts[1])
        if self.values.size > used:
            self.values = self.values[:used].copy()

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.hash_keys, self.hash_rows, self.row_start, self.row_len, self.values

    def put(self, keys: np.ndarray, block: np.ndarray) -> None:
        """Rows ``block[j]`` under ``keys[j]``."""
        width, length = block.shape
        if self.counts[1] + block.size > self.max_values:
            self._empty()
        rows, used = int(self.counts[0]) + width, int(self.counts[1]) + block.size
        if rows > self.row_start.size:
            size = max(2 * self.row_start.size, rows)
            self.row_start = _grown(self.row_start, size)
            self.row_len = _grown(self.row_len, size)
        if used > self.values.size:
            self.values = _grown(self.values, max(2 * self.values.size, used))
        if 2 * rows > self.hash_keys.size:  # at most half full: probes stay short
            size = self.hash_keys.size
            while 2 * rows > size:
                size *= 2
            new_keys = np.full(size, -1, dtype=np.int64)
            new_rows = np.zeros(size, dtype=np.int64)
            table_rehash(self.hash_keys, self.hash_rows, new_keys, new_rows)
            self.hash_keys, self.hash_rows = new_keys, new_rows
        table_put(*self.arrays(), self.counts, keys, np.ascontiguousarray(block))


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=a.dtype)
    out[: a.size] = a
    return out


# ============================================================================ the loop
@unrefcounted
def _blocks(tokens: int, cached: int, block: int) -> int:
    return -(-(tokens - cached) // block)


@unrefcounted
def _reserved_blocks(cfg, ri, rid) -> int:
    """Blocks an engine that reserves the output (``C_RESERVE``) holds for ``rid`` from
    admission to finish: its prompt and whole output, at most the pool (a request longer than
    the pool claims all of it and runs alone)."""
    return min(_blocks(ri[rid, R_ISL] + ri[rid, R_OSL], ri[rid, R_CACHED], cfg[C_BLOCK]),
               cfg[C_KV_BLOCKS])  # fmt: skip


@unrefcounted
def _remove(items: np.ndarray, length: int, rid: int) -> int:
    """Remove ``rid`` from ``items[:length]`` keeping the order; the new length (-1: absent)."""
    for i in range(length):
        if items[i] == rid:
            for j in range(i, length - 1):  # element by element: a slice would allocate
                items[j] = items[j + 1]
            return length - 1
    return -1


@unrefcounted
def _heap_less(h: np.ndarray, i: int, j: int) -> bool:
    """Lexicographic order of rows ``i`` and ``j`` (finish step, id, version)."""
    for col in range(3):
        if h[i, col] != h[j, col]:
            return h[i, col] < h[j, col]
    return False


@unrefcounted
def _swap(h: np.ndarray, i: int, j: int) -> None:
    for col in range(h.shape[1]):
        h[i, col], h[j, col] = h[j, col], h[i, col]


@unrefcounted
def heap_push(h: np.ndarray, length: int, a: int, b: int, c: int) -> int:
    """Add the row ``(a, b, c)`` to the heap ``h[:length]`` (lexicographic order); the new
    length."""
    h[length, 0], h[length, 1], h[length, 2] = a, b, c
    i = length
    while i > 0:
        parent = (i - 1) >> 1
        if not _heap_less(h, i, parent):
            break
        _swap(h, i, parent)
        i = parent
    return length + 1


@unrefcounted
def heap_pop(h: np.ndarray, length: int) -> int:
    """Drop the smallest row (read it from row 0 first); the new length."""
    length -= 1
    _swap(h, 0, length)
    i = 0
    while True:
        left, smallest = 2 * i + 1, i
        if left < length and _heap_less(h, left, smallest):
            smallest = left
        if left + 1 < length and _heap_less(h, left + 1, smallest):
            smallest = left + 1
        if smallest == i:
            return length
        _swap(h, i, smallest)
        i = smallest


@unrefcounted
def _pend_less(t: np.ndarray, k: np.ndarray, i: int, j: int) -> bool:
    """Order of a timed heap's rows (pending sends, the two-pool loop's events): (time,
    order)."""
    if t[i, 0] != t[j, 0]:
        return t[i, 0] < t[j, 0]
    return k[i, 0] < k[j, 0]


@unrefcounted
def _pend_swap(t, k, i, j) -> None:
    for col in range(t.shape[1]):
        t[i, col], t[j, col] = t[j, col], t[i, col]
    for col in range(k.shape[1]):
        k[i, col], k[j, col] = k[j, col], k[i, col]


@unrefcounted
def _pend_push(t, k, length, entry_s, order, sent_s, isl, osl) -> int:
    t[length, 0], t[length, 1] = entry_s, sent_s
    k[length, 0], k[length, 1], k[length, 2] = order, isl, osl
    return timed_heap_push(t, k, length)


@unrefcounted
def timed_heap_push(t, k, length) -> int:
    """Take the row just written at ``length`` into the heap of rows ``t``, ``k`` (float and
    int columns, ordered by time ``t[:, 0]`` then order ``k[:, 0]``); the new length."""
    i = length
    while i > 0:
        parent = (i - 1) >> 1
        if not _pend_less(t, k, i, parent):
            break
        _pend_swap(t, k, i, parent)
        i = parent
    return length + 1


@unrefcounted
def timed_heap_pop(t, k, length) -> int:
    """Drop the first row of the timed heap (read it from row 0 first); the new length."""
    length -= 1
    _pend_swap(t, k, 0, length)
    i = 0
    while True:
        left, smallest = 2 * i + 1, i
        if left < length and _pend_less(t, k, left, smallest):
            smallest = left
        if left + 1 < length and _pend_less(t, k, left + 1, smallest):
            smallest = left + 1
        if smallest == i:
            return length
        _pend_swap(t, k, i, smallest)
        i = smallest


@unrefcounted
def run_loop(cfg, tokens_per_step, frontend_s, st, fs, ri, rf, draws_t, draws_isl, draws_osl,
             hits, waiting, running, prefilling, chunks, heap, pend_t, pend_k, phase,
             series, hash_keys, hash_rows, row_start, row_len, values, aff_scalars,
             aff_context, aff_prompt, aff_values, aff_weights):  # fmt: skip
    """Run the event loop until it ends (``DONE``) or needs something from the caller:
    ``NEED_ROW`` (a step-time row: the cell in ``st[S_NEED_*]``; with ``cfg[C_ONE_SHOT]`` the
    step time itself, given back in ``fs[F_GIVEN_DT]`` with ``st[S_GIVEN] = 1``), ``GROW``
    (the completion heap is full), ``TOO_BIG`` (a prompt larger than the pool) or ``BROKEN``
    (an impossible state). Calling it again resumes."""
    while True:
        if st[S_IN_STEP] == 0:
            if _polls(cfg, st):
                _pull_arrivals(cfg, frontend_s, st, fs, ri, rf, draws_t, draws_isl, draws_osl,
                               hits, waiting, pend_t, pend_k)  # fmt: skip
            no_prompts = st[S_WAIT_LEN] == 0 and st[S_PRE_LEN] == 0
            if cfg[C_DECODE_RUNS] and st[S_NDEC] > 0 and no_prompts:
                ran = _decode_run(cfg, frontend_s, st, fs, draws_t, heap, pend_t, phase,
                                  series, hash_keys, hash_rows, row_start, row_len, values,
                                  aff_scalars, aff_context, aff_prompt, aff_values,
                                  aff_weights)  # fmt: skip
                if ran < 0:
                    return NEED_ROW
                if ran > 0:
                    continue  # time moved on: pull what arrived meanwhile
            if st[S_RUN_LEN] == 0 and st[S_WAIT_LEN] == 0:
                if st[S_PEND_LEN] > 0:
                    fs[F_NOW] = max(fs[F_NOW], pend_t[0, 0])
                    continue
                if cfg[C_CLOSED] or st[S_NEXT_ARRIVAL] >= draws_t.size:
                    return DONE
                fs[F_NOW] = max(fs[F_NOW], draws_t[st[S_NEXT_ARRIVAL]] + frontend_s)
                continue
            if st[S_HEAP_LEN] + 2 * cfg[C_MAX_SEQS] + 2 > heap.shape[0]:
                return GROW  # a step pushes at most one entry per chunk
            st[S_STEP] += 1
            preempted_before = st[S_PREEMPT]
            if st[S_NDEC] > 0:
                _grow_decodes(cfg, st, ri, waiting, running, prefilling, phase)
            budget = cfg[C_BUDGET] - st[S_NDEC]
            if not _schedule_prefill(cfg, st, ri, waiting, running, prefilling, chunks, phase,
                                     budget, preempted_before):  # fmt: skip
                return BROKEN
            pre, weighted = 0, 0
            for j in range(st[S_CHUNKS]):
                k = chunks[j, 1]
                pre += k
                weighted += k * (2 * ri[chunks[j, 0], R_DONE] + k)
            if st[S_NDEC] == 0 and pre == 0:
                first = waiting[st[S_WAIT_HEAD]] if st[S_WAIT_LEN] else running[0]
                st[S_BAD_TOKENS] = ri[first, R_TARGET]
                return TOO_BIG
            st[S_PRE_TOKENS], st[S_WEIGHTED] = pre, weighted
            st[S_IN_STEP] = 1
        s, n_dec, pre = st[S_STEP], st[S_NDEC], st[S_PRE_TOKENS]
        ctx = (st[S_ASUM] + n_dec * s) / n_dec if n_dec else 0.0
        p_eq = st[S_WEIGHTED] / pre if pre else 0.0
        dt = _step_s(cfg, st, fs, n_dec, ctx, pre, p_eq, hash_keys, hash_rows, row_start,
                     row_len, values, aff_scalars, aff_context, aff_prompt,
                     aff_values, aff_weights)  # fmt: skip
        if np.isnan(dt):
            return NEED_ROW
        st[S_IN_STEP] = 0
        if not _finish_step(cfg, tokens_per_step, frontend_s, st, fs, ri, rf, draws_isl,
                            draws_osl, hits, waiting, running, prefilling, chunks, heap,
                            pend_t, pend_k, phase, series, dt):  # fmt: skip
            return BROKEN
        # a decode step counts one towards the next poll; a step with prompt tokens polls next
        st[S_RECV_COUNT] = cfg[C_RECV] if pre > 0 else st[S_RECV_COUNT] + 1


@unrefcounted
def _polls(cfg, st) -> bool:
    """Whether the scheduler polls for new requests before this step: every step by default
    (``cfg[C_RECV]`` <= 1); with SGLang's ``--scheduler-recv-interval`` k, once k decode steps
    have run since the last poll, after any step carrying prompt tokens, and whenever it has
    nothing to run (an idle loop polls at once)."""
    k = cfg[C_RECV]
    idle = st[S_RUN_LEN] == 0 and st[S_WAIT_LEN] == 0
    if k <= 1 or idle or st[S_RECV_COUNT] >= k:
        st[S_RECV_COUNT] = 0
        return True
    return False


@unrefcounted
def _step_s(cfg, st, fs, n_dec, ctx, pre, p_eq, hash_keys, hash_rows, row_start, row_len,
            values, aff_scalars, aff_context, aff_prompt, aff_values,
            aff_weights) -> float:  # fmt: skip
    """The step time: composed from the row's decomposition where it has one
    (``affine_step_s``), else from the table (or the one the caller gave); NaN with the cell
    asked for in the state when it is missing."""
    if st[S_GIVEN]:
        st[S_GIVEN] = 0
        return fs[F_GIVEN_DT]
    ctx_k = grid_key(ctx, GRID_PER_OCTAVE)
    pre_k = grid_key(pre, PREFILL_GRID_PER_OCTAVE)
    p_k = grid_key(p_eq, PREFILL_GRID_PER_OCTAVE)
    dt = np.nan
    if aff_scalars.size:
        dt = affine_step_s(aff_scalars, aff_context, aff_prompt, aff_values, aff_weights,
                           n_dec, ctx_k, pre_k, p_k)  # fmt: skip
    if np.isnan(dt) and not cfg[C_ONE_SHOT]:
        key = table_key(ctx_k, pre_k, p_k)
        dt = row_value(hash_keys, hash_rows, row_start, row_len, values, key, n_dec)
    if np.isnan(dt):
        st[S_NEED_CTX], st[S_NEED_PRE], st[S_NEED_PEQ], st[S_NEED_DEC] = ctx_k, pre_k, p_k, n_dec
        st[S_NEED_TOKENS] = pre
        fs[F_NEED_CTX], fs[F_NEED_PEQ] = ctx, p_eq
    return dt


@unrefcounted
def _finish_step(cfg, tokens_per_step, frontend_s, st, fs, ri, rf, draws_isl, draws_osl,
                 hits, waiting, running, prefilling, chunks, heap, pend_t, pend_k, phase,
                 series, dt) -> bool:  # fmt: skip
    """The rest of a step once its time ``dt`` is known: prefill progress (a finished prompt
    emits its token at the end of the step), then the decodes that finish."""
    block, s = cfg[C_BLOCK], st[S_STEP]
    if dt > fs[F_LONGEST]:
        fs[F_LONGEST] = dt  # the worst inter-token gap a decode can see
    fs[F_NOW] += dt
    now = fs[F_NOW]
    for j in range(st[S_CHUNKS]):
        rid, k = chunks[j, 0], chunks[j, 1]
        ri[rid, R_DONE] += k
        if ri[rid, R_DONE] < ri[rid, R_TARGET]:
            continue
        st[S_PRE_LEN] = _remove(prefilling, st[S_PRE_LEN], rid)
        if st[S_PRE_LEN] < 0:
            return False
        ri[rid, R_GEN] += 1
        if rf[rid, Q_TFIRST] < 0:
            rf[rid, Q_TFIRST] = now
            rf[rid, Q_TTFT] = now - rf[rid, Q_ARR]
        if ri[rid, R_GEN] >= ri[rid, R_OSL]:
            _finish(cfg, frontend_s, st, fs, ri, rf, draws_isl, draws_osl, hits, waiting,
                    running, pend_t, pend_k, rid, ri[rid, R_DONE])  # fmt: skip
            continue
        a = ri[rid, R_DONE] - s
        ri[rid, R_A] = a
        ri[rid, R_DECODING] = 1
        st[S_NDEC] += 1
        st[S_ASUM] += a
        phase[a % block] += 1
        left = ri[rid, R_OSL] - ri[rid, R_GEN]
        if tokens_per_step > 1.0:
            left = math.ceil(left / tokens_per_step)
        st[S_HEAP_LEN] = heap_push(heap, st[S_HEAP_LEN], s + left, rid, ri[rid, R_VER])
    # decodes: every decoding sequence gained one token this step
    while st[S_HEAP_LEN] > 0 and heap[0, 0] <= s:
        rid, ver = heap[0, 1], heap[0, 2]
        st[S_HEAP_LEN] = heap_pop(heap, st[S_HEAP_LEN])
        if not ri[rid, R_DECODING] or ri[rid, R_VER] != ver:
            continue  # preempted since it was pushed
        ri[rid, R_DECODING] = 0
        _remove_decode(cfg, st, ri, phase, rid)
        ri[rid, R_GEN] = ri[rid, R_OSL]
        _finish(cfg, frontend_s, st, fs, ri, rf, draws_isl, draws_osl, hits, waiting,
                running, pend_t, pend_k, rid, ri[rid, R_A] + s)  # fmt: skip
    kv_used = 1.0 - st[S_FREE] / cfg[C_KV_BLOCKS]
    _series_add(cfg, st, series, s, now, st[S_WAIT_LEN], st[S_RUN_LEN], kv_used)
    return True


@unrefcounted
def _series_add(cfg, st, series, step, t, queue, running, kv) -> None:
    """A sample every ``every`` steps; at ``2 * max_points`` samples every other one goes and
    the interval doubles (memory bounded however long the run)."""
    if step % st[S_SERIES_EVERY]:
        return
    n = st[S_SERIES_LEN]
    series[n, 0], series[n, 1], series[n, 2], series[n, 3] = t, queue, running, kv
    n += 1
    if n >= 2 * cfg[C_MAX_POINTS]:
        kept = (n + 1) // 2
        for j in range(kept):  # in place: row 2j is read before any write reaches it
            for col in range(series.shape[1]):
                series[j, col] = series[2 * j, col]
        n = kept
        st[S_SERIES_EVERY] *= 2
    st[S_SERIES_LEN] = n


@unrefcounted
def _new_request(cfg, st, ri, rf, hits, waiting, t, isl, osl) -> None:
    i = st[S_ISSUED]
    st[S_ISSUED] += 1
    rf[i, Q_ARR] = t
    block = cfg[C_BLOCK]
    cached = 0
    if hits[i]:
        cached = min(cfg[C_PREFIX], ((isl - 1) // block) * block)
    ri[i, R_ISL], ri[i, R_OSL], ri[i, R_TARGET] = isl, osl, isl
    ri[i, R_DONE], ri[i, R_GEN], ri[i, R_CACHED] = cached, 0, cached
    rf[i, Q_TFIRST] = -1.0
    ri[i, R_A], ri[i, R_VER] = 0, 0
    waiting[(st[S_WAIT_HEAD] + st[S_WAIT_LEN]) % waiting.size] = i
    st[S_WAIT_LEN] += 1


@unrefcounted
def open_closed_loop(cfg, frontend_s, st, ri, rf, draws_isl, draws_osl, hits, waiting, pend_t,
                     pend_k) -> None:  # fmt: skip
    """Closed loop: every client sends its first request at t = 0."""
    for _ in range(min(cfg[C_CONCURRENCY], cfg[C_REQUESTS])):
        _closed_loop_send(cfg, frontend_s, st, ri, rf, draws_isl, draws_osl, hits, waiting,
                          pend_t, pend_k, 0.0)  # fmt: skip


@unrefcounted
def _closed_loop_send(cfg, frontend_s, st, ri, rf, draws_isl, draws_osl, hits, waiting,
                      pend_t, pend_k, t) -> None:  # fmt: skip
    j = st[S_NEXT_LENGTH]
    if j >= cfg[C_REQUESTS]:
        return
    st[S_NEXT_LENGTH] += 1
    isl, osl = draws_isl[j], draws_osl[j]
    if frontend_s > 0 or cfg[C_RECV] > 1:  # it enters at the scheduler's next poll
        order = st[S_ISSUED] + st[S_PEND_LEN]
        st[S_PEND_LEN] = _pend_push(pend_t, pend_k, st[S_PEND_LEN], t + frontend_s, order, t,
                                    isl, osl)  # fmt: skip
    else:
        _new_request(cfg, st, ri, rf, hits, waiting, t, isl, osl)


@unrefcounted
def _pull_arrivals(cfg, frontend_s, st, fs, ri, rf, draws_t, draws_isl, draws_osl, hits,
                   waiting, pend_t, pend_k) -> None:  # fmt: skip
    now = fs[F_NOW]
    while st[S_PEND_LEN] > 0 and pend_t[0, 0] <= now:
        sent, isl, osl = pend_t[0, 1], pend_k[0, 1], pend_k[0, 2]
        st[S_PEND_LEN] = timed_heap_pop(pend_t, pend_k, st[S_PEND_LEN])
        _new_request(cfg, st, ri, rf, hits, waiting, sent, isl, osl)
    if cfg[C_CLOSED]:
        return
    while st[S_NEXT_ARRIVAL] < draws_t.size:
        j = st[S_NEXT_ARRIVAL]
        if draws_t[j] + frontend_s > now:
            return
        _new_request(cfg, st, ri, rf, hits, waiting, draws_t[j], draws_isl[j],
                     draws_osl[j])  # fmt: skip
        st[S_NEXT_ARRIVAL] += 1


@unrefcounted
def _next_entry_s(cfg, frontend_s, st, draws_t, pend_t) -> float:
    """When the next request reaches the scheduler (inf: none left to arrive)."""
    t = pend_t[0, 0] if st[S_PEND_LEN] > 0 else np.inf
    if not cfg[C_CLOSED] and st[S_NEXT_ARRIVAL] < draws_t.size:
        t = min(t, draws_t[st[S_NEXT_ARRIVAL]] + frontend_s)
    return t


@unrefcounted
def affine_step_s(scalars, per_context, per_prompt, prompt_values, weights, n_dec, ctx_k, pre_k,
                  p_k) -> float:  # fmt: skip
    """Step time (s) of ``n_dec`` decodes in context cell ``ctx_k`` carrying the prompt-token
    cell ``pre_k`` at attention-length cell ``p_k``, composed from a row's decomposition
    (``sizing.step_affine``: GEMM roofline + attention roofline + all-reduces + host cost;
    ``weights[pre_k, n_dec]``, the weights' stream, where it grows with the routed tokens),
    NaN for a cell beyond its arrays (the table then serves it)."""
    if ctx_k >= per_context.shape[0] or pre_k >= prompt_values.size or p_k >= per_prompt.size:
        return np.nan
    if weights.shape[0] > 0:  # a MoE row: the experts its tokens route to
        if pre_k >= weights.shape[0] or n_dec >= weights.shape[1]:
            return np.nan
        stream = weights[pre_k, n_dec]
    else:
        stream = scalars[A_GM]
    n = float(n_dec)
    pre = prompt_values[pre_k]
    gemm = max(stream, scalars[A_GD] * n + scalars[A_GP] * pre)
    attention = max(n * per_context[ctx_k, 0], n * per_context[ctx_k, 1] + pre * per_prompt[p_k])
    comm = scalars[A_C0] + scalars[A_C1] * (n + pre)
    host = scalars[A_O0] + scalars[A_O1] * n + (scalars[A_PO] if pre > 0 else 0.0)
    return gemm + attention + comm + host


@compiled
def affine_step_cells(scalars, per_context, per_prompt, prompt_values, weights, n_dec, ctx_k,
                      pre_k, p_k) -> np.ndarray:  # fmt: skip
    """``affine_step_s`` of many cells at once (the decomposition's check)."""
    out = np.empty(n_dec.size)
    for i in range(n_dec.size):
        out[i] = affine_step_s(scalars, per_context, per_prompt, prompt_values, weights,
                               n_dec[i], ctx_k[i], pre_k[i], p_k[i])  # fmt: skip
    return out


@unrefcounted
def _decode_run(cfg, frontend_s, st, fs, draws_t, heap, pend_t, phase, series, hash_keys,
                hash_rows, row_start, row_len, values, aff_scalars, aff_context, aff_prompt,
                aff_values, aff_weights) -> int:  # fmt: skip
    """Decode-only steps while nothing else can happen: 1 if any ran, 0 if none, -1 when a
    step's row is missing (the state kept up to the last step run).

    With no prompt waiting or prefilling, a step only decodes: until the next request enters
    (its arrival + front end), the next decode finishes (the heap's first step) or the pool
    runs short of blocks, each step is its step time and the blocks its decodes open; these
    are exactly the steps the general loop would run, without its scheduling."""
    block = cfg[C_BLOCK]
    finish = heap[0, 0] if st[S_HEAP_LEN] > 0 else NO_STEP
    enter = _next_entry_s(cfg, frontend_s, st, draws_t, pend_t)
    n_dec, a_sum, running = st[S_NDEC], st[S_ASUM], st[S_RUN_LEN]
    kv_blocks = cfg[C_KV_BLOCKS]
    s, now, free, longest = st[S_STEP], fs[F_NOW], st[S_FREE], fs[F_LONGEST]
    start = s
    missing = False
    while s + 1 < finish and now < enter:
        # the blocks step s + 1 opens: (1 - (s + 1)) mod block; none where reserved
        need = 0 if cfg[C_RESERVE] else phase[(-s) % block]
        if need > free:
            break  # short of blocks: the general loop preempts
        ctx = (a_sum + n_dec * (s + 1)) / n_dec
        dt = _step_s(cfg, st, fs, n_dec, ctx, 0, 0.0, hash_keys, hash_rows, row_start,
                     row_len, values, aff_scalars, aff_context, aff_prompt,
                     aff_values, aff_weights)  # fmt: skip
        if np.isnan(dt):
            missing = True
            break
        s += 1
        free -= need
        if dt > longest:
            longest = dt
        now += dt
        if s % st[S_SERIES_EVERY] == 0:
            _series_add(cfg, st, series, s, now, 0, running, 1.0 - free / kv_blocks)
    st[S_STEP], fs[F_NOW], st[S_FREE], fs[F_LONGEST] = s, now, free, longest
    if missing:
        return -1
    return 1 if s > start else 0


@unrefcounted
def _remove_decode(cfg, st, ri, phase, rid) -> None:
    st[S_NDEC] -= 1
    st[S_ASUM] -= ri[rid, R_A]
    phase[ri[rid, R_A] % cfg[C_BLOCK]] -= 1


@unrefcounted
def _held_tokens(st, ri, rid) -> int:
    """Tokens cached for ``rid`` before the current step runs (evictions happen then)."""
    if ri[rid, R_DECODING]:
        return ri[rid, R_A] + st[S_STEP] - 1
    return ri[rid, R_DONE]


@unrefcounted
def _evict(cfg, st, ri, waiting, running, prefilling, phase, rid) -> bool:
    """Preempt by recompute: free the blocks, back to the queue's front to prefill prompt +
    generated tokens again (minus the cached prefix)."""
    block = cfg[C_BLOCK]
    st[S_FREE] += _blocks(_held_tokens(st, ri, rid), ri[rid, R_CACHED], block)
    st[S_RUN_LEN] = _remove(running, st[S_RUN_LEN], rid)
    ri[rid, R_RUNNING] = 0
    if ri[rid, R_DECODING]:
        # generated = held - isl + 1: the newest token's KV is written by the next step
        ri[rid, R_GEN] = _held_tokens(st, ri, rid) - ri[rid, R_ISL] + 1
        ri[rid, R_DECODING] = 0
        _remove_decode(cfg, st, ri, phase, rid)
        ri[rid, R_VER] += 1  # its heap entry is now stale
    else:
        st[S_PRE_LEN] = _remove(prefilling, st[S_PRE_LEN], rid)
        if st[S_PRE_LEN] < 0:
            return False
    ri[rid, R_TARGET] = ri[rid, R_ISL] + ri[rid, R_GEN]
    ri[rid, R_DONE] = ri[rid, R_CACHED]
    st[S_WAIT_HEAD] = (st[S_WAIT_HEAD] - 1) % waiting.size
    waiting[st[S_WAIT_HEAD]] = rid
    st[S_WAIT_LEN] += 1
    st[S_PREEMPT] += 1
    return True


@unrefcounted
def _preempt_last(cfg, st, ri, waiting, running, prefilling, phase, grown) -> int:
    """Preempt the most recently admitted running sequence (vLLM's scheduler preempts from the
    end of its running list): its id, -1 if none runs, -2 on an impossible state. ``grown``:
    this step's decode growth has run, so a decode whose token opened a block holds that block
    too and gives it back with the rest (``_evict`` frees the blocks held before the step)."""
    if st[S_RUN_LEN] == 0:
        return -1
    rid = running[st[S_RUN_LEN] - 1]
    block = cfg[C_BLOCK]
    opened = grown and ri[rid, R_DECODING] and ri[rid, R_A] % block == (1 - st[S_STEP]) % block
    if not _evict(cfg, st, ri, waiting, running, prefilling, phase, rid):
        return -2
    if opened:
        st[S_FREE] += 1
    return rid


@unrefcounted
def _grow_decodes(cfg, st, ri, waiting, running, prefilling, phase) -> None:
    """Blocks for decodes whose next token opens a block; preempt LIFO when short. An
    engine that reserves each sequence's output at admission (``C_RESERVE``) holds them."""
    if cfg[C_RESERVE]:
        return
    block = cfg[C_BLOCK]
    while True:
        need = phase[(1 - st[S_STEP]) % block]
        if need <= st[S_FREE]:
            st[S_FREE] -= need
            return
        if _preempt_last(cfg, st, ri, waiting, running, prefilling, phase, False) < 0:
            return


@unrefcounted
def _fit_blocks(cfg, st, ri, waiting, running, prefilling, phase, rid, k) -> int:
    """Tokens of a running prompt's chunk this step: all ``k`` once the pool holds their
    blocks. Short of them, the latest admitted running sequence is preempted until they fit,
    as vLLM V1's scheduler does (its ``allocate_slots`` takes a chunk whole or not at
    all): when that is the prompt itself, -1 (it is back in the queue and nothing more of
    the running list is scheduled this step); -2 on an impossible state. Reserved at
    admission (``C_RESERVE``), the whole chunk is already held."""
    if cfg[C_RESERVE]:
        return k
    block = cfg[C_BLOCK]
    while True:
        done, cached = ri[rid, R_DONE], ri[rid, R_CACHED]
        need = _blocks(done + k, cached, block) - _blocks(done, cached, block)
        if need <= st[S_FREE]:
            st[S_FREE] -= need
            return k
        victim = _preempt_last(cfg, st, ri, waiting, running, prefilling, phase, True)
        if victim < 0:  # none running: impossible, the prompt itself is
            return -2
        if victim == rid:
            return -1


@unrefcounted
def _schedule_prefill(
    cfg, st, ri, waiting, running, prefilling, chunks, phase, budget, preempted_before
) -> bool:
    """Chunks (request, tokens) for this step: running prompts first, then FCFS admission,
    none in a step that preempted (``st[S_PREEMPT]`` past ``preempted_before``: vLLM V1's
    scheduler leaves its waiting queue alone then, so the blocks a preemption frees go to
    the running sequences, not straight back to a re-admitted prompt).

    Without chunked prefill a prompt goes whole; the first prompt of a step may exceed the
    budget, later ones must fit in what is left. Head-of-line blocking is kept: FCFS never
    skips ahead. False on an impossible state."""
    block = cfg[C_BLOCK]
    n = 0
    # over a copy: a preemption may take a prompt out of the list meanwhile (the copy goes in
    # the array's upper half, which the list never reaches: no allocation per step)
    half = prefilling.size // 2
    for j in range(st[S_PRE_LEN]):
        prefilling[half + j] = prefilling[j]
    for j in range(st[S_PRE_LEN]):
        rid = prefilling[half + j]
        if budget <= 0:
            break
        if not ri[rid, R_RUNNING]:
            continue  # preempted for an earlier prompt's chunk this step
        want = min(ri[rid, R_TARGET] - ri[rid, R_DONE], budget)
        k = _fit_blocks(cfg, st, ri, waiting, running, prefilling, phase, rid, want)
        if k == -2:
            return False
        if k < 0:
            break  # it preempted itself: vLLM stops scheduling the running list
        chunks[n, 0], chunks[n, 1] = rid, k
        n += 1
        budget -= k
    admit = st[S_PREEMPT] == preempted_before
    while admit and st[S_WAIT_LEN] > 0 and st[S_RUN_LEN] < cfg[C_MAX_SEQS]:
        rid = waiting[st[S_WAIT_HEAD]]
        want = ri[rid, R_TARGET] - ri[rid, R_DONE]
        if cfg[C_CHUNKED]:
            if budget <= 0:
                break
            k = min(want, budget)
        else:
            if want > budget and n > 0:
                break
            k = want
        done, cached = ri[rid, R_DONE], ri[rid, R_CACHED]
        if cfg[C_RESERVE]:
            need = _reserved_blocks(cfg, ri, rid)
        else:
            need = _blocks(done + k, cached, block) - _blocks(done, cached, block)
        if need > st[S_FREE]:
            break  # FCFS: wait for blocks, never skip ahead
        st[S_WAIT_HEAD] = (st[S_WAIT_HEAD] + 1) % waiting.size
        st[S_WAIT_LEN] -= 1
        st[S_FREE] -= need
        if not ri[rid, R_RUNNING]:  # (a dict keeps a key's first place)
            running[st[S_RUN_LEN]] = rid
            st[S_RUN_LEN] += 1
            ri[rid, R_RUNNING] = 1
        prefilling[st[S_PRE_LEN]] = rid
        st[S_PRE_LEN] += 1
        chunks[n, 0], chunks[n, 1] = rid, k
        n += 1
        budget -= k
    st[S_CHUNKS] = n
    return True


@unrefcounted
def _finish(cfg, frontend_s, st, fs, ri, rf, draws_isl, draws_osl, hits, waiting, running,
            pend_t, pend_k, rid, held_tokens) -> None:  # fmt: skip
    if ri[rid, R_RUNNING]:
        st[S_RUN_LEN] = _remove(running, st[S_RUN_LEN], rid)
        ri[rid, R_RUNNING] = 0
    if cfg[C_RESERVE]:
        st[S_FREE] += _reserved_blocks(cfg, ri, rid)
    else:
        st[S_FREE] += _blocks(held_tokens, ri[rid, R_CACHED], cfg[C_BLOCK])
    now = fs[F_NOW]
    rf[rid, Q_E2E] = now - rf[rid, Q_ARR]
    osl = ri[rid, R_OSL]
    rf[rid, Q_TPOT] = (now - rf[rid, Q_TFIRST]) / (osl - 1) if osl > 1 else np.nan
    st[S_FINISHED] += 1
    if cfg[C_CLOSED]:
        _closed_loop_send(cfg, frontend_s, st, ri, rf, draws_isl, draws_osl, hits, waiting,
                          pend_t, pend_k, now)  # fmt: skip
