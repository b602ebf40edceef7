"""Discrete-event simulation of a disaggregated deployment: two pools and the transfer between.

The mean-value model (sizing/disagg.py) gives means; this runs the requests through

1. the front end (``frontend_latency_s``), then the **prefill pool**: ``x * dp_p`` prefill
   ranks, each request routed to the rank with the fewest queued prompt tokens; a rank runs
   prefill-only steps of up to ``max_num_batched_tokens`` tokens, FCFS, a long prompt chunked
   over several steps; step time ``steptime.decode_step(cp, 0, 0, tokens, p_eq)``, ``alone``
   when no other rank of its worker is mid-step (its routed experts then run on every EP GPU
   of the worker, as the mean-value model's lone prompt, ``steptime.prefill_time``);
2. the **KV transfer**: the request goes to the decode rank with the fewest sequences; that
   rank's link is a FCFS server occupied ``wire_s`` per request (``disagg.kv_transfer``), and
   the request's first token leaves ``exposed_s`` after its prefill (or after the link frees);
3. the **decode pool**: ``y * dp_d`` ranks running decode-only continuous batching, at most
   ``batch_limit / dp`` sequences each (KV and ``max_num_seqs``), a step of n sequences at
   their mean context taking ``decode_step(cd, n, ctx).step_s``; a request decodes ``osl``
   tokens after its first (the mean-value model's ``TTFT + osl * TPOT``).

So TTFT tails come from queueing at the prefill pool and at the links, TPOT tails from the decode
batch. Closed loop (``concurrency`` clients, each sending its next request when the last
finishes) or Poisson arrivals at ``rate_rps``. Step times are memoised (decode count exact,
context on a 1/64-octave grid; prefill tokens and attention length on a 1/32-octave grid).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.disagg import kv_transfer, prefill_pool
from sizing.memory import fit_memory
from sizing.operating import batch_limit
from sizing.simulate import (
    GRID_PER_OCTAVE,
    PERCENTILES,
    PREFILL_GRID_PER_OCTAVE,
    LengthDist,
    context_cell,
    grid_key,
    grid_value,
)
from sizing.steptime import decode_step

#: Shortest row of decode counts one core call fills (``_Timer.decode_s``).
DECODE_ROW_MIN = 64


def _grid(x: float, per_octave: int) -> float:
    """``x`` at its memo cell's value, on the aggregated simulator's grid."""
    return grid_value(grid_key(x, per_octave), per_octave)


class _Timer:
    """Memoised step times of one prefill and one decode worker (single rows)."""

    def __init__(self, cp: CandidateArrays, cd: CandidateArrays):
        # the rows as numpy scalars: the same numbers at less cost per core call (the inputs
        # stay one-element arrays, as with the rows themselves)
        self.cp, self.cd = cp.scalar_row(), cd.scalar_row()
        self.memo: dict[tuple, float] = {}
        #: whether a lone prefill step differs from a loaded one: only where the worker's EP
        #: spreads a rank's routed experts wider than its TP (``steptime.stage_cost``); else
        #: one memo cell serves both
        self.alone_differs = bool(cp.ep[0] > cp.tp[0])
        self.decode_rows: dict[float, list[float]] = {}  # context grid value -> by count

    def prefill_s(self, tokens: float, p_eq: float, alone: bool = False) -> float:
        grid = (_grid(tokens, PREFILL_GRID_PER_OCTAVE), _grid(p_eq, PREFILL_GRID_PER_OCTAVE))
        alone = alone and self.alone_differs
        key = ("p", *grid, alone)
        if key not in self.memo:
            step = decode_step(self.cp, _one(0.0), _one(0.0), _one(grid[0]), _one(grid[1]),
                               alone=alone)  # fmt: skip
            self.memo[key] = float(step.step_s[0])
        return self.memo[key]

    def decode_s(self, n: int, ctx: float) -> float:
        """A decode step of ``n`` sequences at mean context ``ctx`` (s)."""
        return self.decode_row(n, ctx)[0][n]

    def decode_row(self, n: int, ctx: float) -> tuple[list[float], float, float]:
        """The step times by decode count of ``ctx``'s context cell, at least ``n + 1`` of
        them, and the open interval of contexts in that cell (``simulate.context_cell``: a
        caller may reuse the row while its context stays inside). One core call fills the
        row of decode counts 0..2^k > n (the core is elementwise: each count's time is the
        one a call for that count alone gives)."""
        k = grid_key(ctx, GRID_PER_OCTAVE)
        grid = grid_value(k, GRID_PER_OCTAVE)
        row = self.decode_rows.get(grid)
        if row is None or n >= len(row):
            counts = np.arange(max(DECODE_ROW_MIN, 1 << int(n).bit_length()), dtype=np.float64)
            row = decode_step(self.cd, counts, _one(grid)).step_s.tolist()
            self.decode_rows[grid] = row
        low, high = context_cell(k)
        return row, low, high


def _one(x: float) -> np.ndarray:
    return np.array([float(x)])


@dataclass(frozen=True)
class DisaggSimResult:
    """Per-request latencies (s) after the warm-up, and the measurement window."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: int
    window_s: float
    gpus: int

    def percentiles_ms(self, name: str) -> dict[str, float]:
        values = getattr(self, f"{name}_s") * 1e3
        return {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}

    def mean_ms(self, name: str) -> float:
        return float(np.mean(getattr(self, f"{name}_s")) * 1e3)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

    @property
    def output_tok_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / self.gpus


def simulate_disagg(
    cp: CandidateArrays,
    cd: CandidateArrays,
    prefill_workers: int,
    decode_workers: int,
    isl: LengthDist,
    osl: LengthDist,
    requests: int,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    warmup_requests: int = 0,
    link: str = "auto",
    layerwise_overlap: bool = False,
    seed: int = 0,
) -> DisaggSimResult:
    """Simulate ``requests`` requests through one disaggregated deployment.

    Parameters
    ----------
    cp, cd : one-row ``CandidateArrays`` of the prefill and the decode worker
    prefill_workers, decode_workers : workers per pool
    isl, osl : length distributions (tokens)
    concurrency : closed-loop clients against the whole deployment, or
    rate_rps : Poisson arrivals (req/s)
    warmup_requests : the first completions left out of the statistics
    """
    if (concurrency is None) == (rate_rps is None):
        raise ValueError("give exactly one of concurrency or rate_rps")
    rng = np.random.default_rng(seed)
    isl_draw = np.maximum(isl.sample(requests, rng), 1).astype(np.int64)
    osl_draw = np.maximum(osl.sample(requests, rng), 1).astype(np.int64)
    timer = _Timer(cp, cd)
    dp_p = int(cp.dp[0])
    ranks_p = prefill_workers * dp_p
    ranks_d = decode_workers * int(cd.dp[0])
    budget = int(cp.max_num_batched_tokens[0])
    mean_isl, mean_osl = float(np.mean(isl_draw)), float(np.mean(osl_draw))
    fit_d = fit_memory(cd, np.array([mean_isl + mean_osl]))
    slots = max(int(batch_limit(cd, fit_d, mean_isl, mean_osl)[0] // cd.dp[0]), 1)
    frontend = float(cp.frontend_latency_s[0])
    pre = prefill_pool(cp, np.array([1.0]), np.array([mean_isl]))
    xfer = kv_transfer(cp, cd, np.array([mean_isl]), link, layerwise_overlap, pre.prefill_s)
    wire_per_token = float(xfer.wire_s[0]) / mean_isl
    latency = float(xfer.latency_s[0])

    events: list = []
    counter = 0

    def push(t: float, kind: str, payload) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(events, (t, counter, kind, payload))

    # per request: [send_t, isl, osl, left_to_prefill, first_t, done_t]
    req = np.zeros((requests, 6))
    req[:, 1], req[:, 2] = isl_draw, osl_draw
    queues = [deque() for _ in range(ranks_p)]
    queued_tokens = np.zeros(ranks_p)
    p_busy = np.zeros(ranks_p, dtype=bool)
    link_free = np.zeros(ranks_d)
    pending = [deque() for _ in range(ranks_d)]  # transferred, waiting for a slot
    # A decode rank's running sequences as aggregates: every step gives each one token, so
    # a sequence admitted before step s of its rank with o tokens to go finishes at step
    # s + o and its context grows by one a step. Per rank: steps run, sequences, the sum of
    # their contexts (integers in floats: exact), and a heap of (finish step, admission
    # order, request): finishers leave in admission order, as a list of them would.
    # (Python lists: a decode step touches them once per rank and step, ~10^5-10^6 times a
    # run, and a list's item is several times cheaper to read and update than an array's)
    steps_d = [0] * ranks_d
    running_n = [0] * ranks_d
    context_sum = [0.0] * ranks_d
    finishing: list[list] = [[] for _ in range(ranks_d)]
    admitted = 0
    d_busy = [False] * ranks_d
    # each rank's last context cell: its row of step times and the contexts it covers (the
    # mean context moves by about one token a step, a cell spans ~1 % of it)
    cells: list = [((), 0.0, 0.0)] * ranks_d
    load_d = np.zeros(ranks_d)
    sent = 0
    finished: list[int] = []

    def send(t: float) -> None:
        nonlocal sent
        if sent >= requests:
            return
        i = sent
        sent += 1
        req[i, 0] = t
        req[i, 3] = req[i, 1]
        push(t + frontend, "arrive", i)

    def start_prefill(rank: int, t: float) -> None:
        if p_busy[rank] or not queues[rank]:
            return
        room, tokens, weighted, done = budget, 0.0, 0.0, []
        for i in queues[rank]:  # not changed in the loop: the finished leave after it
            if room <= 0:
                break
            take = min(room, req[i, 3])
            offset = req[i, 1] - req[i, 3]
            weighted += take * (2 * offset + take)
            tokens += take
            room -= take
            req[i, 3] -= take
            if req[i, 3] <= 0:
                done.append(i)
            else:
                break  # a chunked prompt fills the step
        for _ in done:  # the queue's first ones, in order (FCFS: a chunked prompt stops it)
            queues[rank].popleft()
        queued_tokens[rank] -= tokens
        first = rank - rank % dp_p
        alone = not p_busy[first : first + dp_p].any()  # before this rank is marked busy
        p_busy[rank] = True
        push(t + timer.prefill_s(tokens, weighted / tokens, alone), "prefilled", (rank, done))

    def start_decode(rank: int, t: float) -> None:
        nonlocal admitted
        if d_busy[rank]:
            return
        while pending[rank] and running_n[rank] < slots:
            i = pending[rank].popleft()
            admitted += 1
            heapq.heappush(finishing[rank], (steps_d[rank] + int(req[i, 2]), admitted, i))
            running_n[rank] += 1
            context_sum[rank] += float(req[i, 1])
        n = running_n[rank]
        if n == 0:
            return
        d_busy[rank] = True
        ctx = context_sum[rank] / n
        row, low, high = cells[rank]
        if not (low < ctx < high and n < len(row)):
            row, low, high = cells[rank] = timer.decode_row(n, ctx)
        push(t + row[n], "decoded", rank)

    if concurrency is not None:
        for _ in range(min(concurrency, requests)):
            send(0.0)
    else:
        gaps = rng.exponential(1.0 / rate_rps, requests)
        for t in np.cumsum(gaps):
            send(float(t))

    while events:
        t, _, kind, payload = heapq.heappop(events)
        if kind == "arrive":
            rank = int(np.argmin(queued_tokens))
            queues[rank].append(payload)
            queued_tokens[rank] += req[payload, 1]
            start_prefill(rank, t)
        elif kind == "prefilled":
            rank, done = payload
            p_busy[rank] = False
            for i in done:
                d = int(np.argmin(load_d))
                load_d[d] += 1
                wire = wire_per_token * req[i, 1]
                begin = max(t, link_free[d])
                link_free[d] = begin + wire
                push(begin + wire + latency, "transferred", (d, i))
            start_prefill(rank, t)
        elif kind == "transferred":
            d, i = payload
            req[i, 4] = t
            pending[d].append(i)
            start_decode(d, t)
        elif kind == "decoded":
            d = payload
            d_busy[d] = False
            steps_d[d] += 1
            context_sum[d] += running_n[d]
            while finishing[d] and finishing[d][0][0] <= steps_d[d]:
                _, _, i = heapq.heappop(finishing[d])
                running_n[d] -= 1
                context_sum[d] -= float(req[i, 1] + req[i, 2])  # its context after its last token
                req[i, 5] = t
                finished.append(i)
                load_d[d] -= 1
                if concurrency is not None:
                    send(t)
            start_decode(d, t)

    kept = np.array(finished[warmup_requests:], dtype=np.int64)
    if len(kept) == 0:
        raise ValueError("no request finished after the warm-up")
    send_t, first_t, done_t = req[kept, 0], req[kept, 4], req[kept, 5]
    window = float(done_t.max() - req[kept, 0].min())
    return DisaggSimResult(
        ttft_s=first_t - send_t,
        tpot_s=(done_t - first_t) / req[kept, 2],
        e2e_s=done_t - send_t,
        output_tokens=int(req[kept, 2].sum()),
        window_s=window,
        gpus=int(prefill_workers * cp.gpus_per_instance[0] + decode_workers
                 * cd.gpus_per_instance[0]),
    )  # fmt: skip
