"""The two-pool simulator's event loop, compiled (numba).

``sizing.disagg_sim`` documents the model and sets a run up; this module is its event loop,
event by event the same operations in the same order as the pure-Python loop it replaced
(events ordered by time then push order, ties between ranks to the lowest, the same float
operations on the same values), so every latency is the number that loop gave. The state
lives in numpy arrays: per request, per prefill rank (a FIFO queue as links between
requests), per decode rank (its slots' aggregates, a FIFO of transferred requests, a heap of
its sequences' finish steps), the event heap (with the arrivals known up front as a stream
beside it), and a log of the requests each prefill step completes.

Step times come from two tables (``sim_kernel.StepTable``) that Python fills from the core:
a prefill step's by (alone, prompt-token cell, attention-length cell), a decode step's as a
row of decode counts by context cell. A step whose cell is missing returns ``NEED_ROW`` before
it changes any state, the cell in ``st[S_NEED_*]``; the caller fills it and calls the loop
again, which retries that step (the action in ``st[S_ACTION]``) and goes on.

Compiled without numba's reference counting (``unrefcounted``): these functions pass a dozen
arrays each, and numba's atomic increments and decrements of their counts at every call were
most of the loop's time (3,000 requests through DeepSeek-V3 1P2D, 485,000 events: 0.45 s with
them, 0.09 s without). The loop allocates nothing, which is what the counts are for: the
caller's arrays outlive every call.
"""

from __future__ import annotations

import numpy as np

from sizing.sim_kernel import (
    DONE,
    GRID_PER_OCTAVE,
    NEED_ROW,
    PREFILL_GRID_PER_OCTAVE,
    grid_key,
    heap_pop,
    heap_push,
    row_value,
    table_key,
    timed_heap_pop,
    timed_heap_push,
    unrefcounted,
)

# ---------------------------------------------------------------------------- config (ints)
C_BUDGET, C_DP_P, C_SLOTS, C_CLOSED, C_REQUESTS, C_ALONE_DIFFERS = range(6)
CONFIG_SLOTS = 6
# ---------------------------------------------------------------------------- times (s)
#: (``L_FIRST_TOKEN_STEPS`` is a count: the decode steps of the decode worker's hand-off
#: before a transferred request's first token, ``Calibration.first_token_decode_steps``)
L_FRONTEND, L_WIRE_PER_TOKEN, L_LATENCY, L_FIRST_TOKEN_STEPS = range(4)
TIME_SLOTS = 4
# ---------------------------------------------------------------------------- int state
(S_ORDER, S_EVENTS, S_SENT, S_OPENED, S_ARRIVED, S_FINISHED, S_ADMITTED, S_LOGGED, S_ACTION,
 S_ACTION_RANK, S_NEED_POOL, S_NEED_A, S_NEED_B, S_NEED_C) = range(14)  # fmt: skip
INT_SLOTS = 14
F_ACTION_T = 0
FLOAT_SLOTS = 1
#: what ``S_ACTION`` holds: a step to start on rank ``S_ACTION_RANK`` at ``F_ACTION_T``
NO_ACTION, START_PREFILL, START_DECODE = range(3)
#: which table ``S_NEED_POOL`` asks to fill: the prefill cell (alone, prompt tokens, p_eq keys
#: in ``S_NEED_A..C``) or the decode row (context key, decode count in ``S_NEED_A, B``)
NEED_PREFILL, NEED_DECODE = 1, 2
# ---------------------------------------------------------------------------- per request
Q_SEND, Q_ISL, Q_OSL, Q_LEFT, Q_FIRST, Q_DONE = range(6)  # floats (s, tokens)
REQUEST_FLOATS = 6
#: rows of the FIFO queues' links (each request's next): in a prefill rank's queue, in a
#: decode rank's queue of transferred requests
LINK_PREFILL, LINK_PENDING = range(2)
# ---------------------------------------------------------------------------- per rank
#: a FIFO queue's columns, the same in both pools' rank arrays
HEAD, TAIL, LENGTH = range(3)
P_BUSY = 3
PREFILL_RANK_INTS = 4
D_BUSY, D_STEPS, D_RUNNING, D_LOAD, D_FINISHING = range(3, 8)
DECODE_RANK_INTS = 8
# tokens (integers in floats: exact), s, s (the rank's latest step)
D_CONTEXT_SUM, D_LINK_FREE, D_STEP_S = range(3)
DECODE_RANK_FLOATS = 3
# ---------------------------------------------------------------------------- events
ARRIVE, PREFILLED, TRANSFERRED, DECODED = range(4)
#: an event's int columns (its time is the float column): push order, kind, payload
E_ORDER, E_KIND, E_A, E_B, E_C = range(5)
EVENT_INTS = 5


# ============================================================================ helpers
@unrefcounted
def _push(st, ev_t, ev_k, t, kind, a, b, c) -> None:
    """An event at ``t``; the push counter breaks ties in time (first pushed, first out)."""
    n = st[S_EVENTS]
    st[S_ORDER] += 1
    ev_t[n, 0] = t
    ev_k[n, E_ORDER], ev_k[n, E_KIND] = st[S_ORDER], kind
    ev_k[n, E_A], ev_k[n, E_B], ev_k[n, E_C] = a, b, c
    st[S_EVENTS] = timed_heap_push(ev_t, ev_k, n)


@unrefcounted
def _append(queues, links, rank, i) -> None:
    """``i`` joins the back of ``rank``'s FIFO queue (``links``: each request's next)."""
    if queues[rank, LENGTH] == 0:
        queues[rank, HEAD] = i
    else:
        links[queues[rank, TAIL]] = i
    queues[rank, TAIL] = i
    queues[rank, LENGTH] += 1


@unrefcounted
def _pop_front(queues, links, rank) -> int:
    i = queues[rank, HEAD]
    queues[rank, HEAD] = links[i]
    queues[rank, LENGTH] -= 1
    return i


@unrefcounted
def _least(values) -> int:
    """The first index of the smallest value (``np.argmin``'s tie break: the lowest rank)."""
    best = 0
    for j in range(1, values.size):
        if values[j] < values[best]:
            best = j
    return best


@unrefcounted
def _act_later(st, fs, action, rank, t) -> None:
    st[S_ACTION], st[S_ACTION_RANK], fs[F_ACTION_T] = action, rank, t


@unrefcounted
def _sent(cfg, st, req, t) -> int:
    """The next request leaves its client at ``t``: its index (-1: none left)."""
    i = st[S_SENT]
    if i >= cfg[C_REQUESTS]:
        return -1
    st[S_SENT] += 1
    req[i, Q_SEND] = t
    req[i, Q_LEFT] = req[i, Q_ISL]
    return i


@unrefcounted
def _send(cfg, times_s, st, req, ev_t, ev_k, t) -> None:
    """A closed-loop client sends its next request at ``t``: it reaches the prefill pool
    after the front end."""
    i = _sent(cfg, st, req, t)
    if i >= 0:
        _push(st, ev_t, ev_k, t + times_s[L_FRONTEND], ARRIVE, i, 0, 0)


@unrefcounted
def open_sends(cfg, st, req, send_t) -> None:
    """The sends known up front (``send_t``, in order): every closed-loop client's first at
    t = 0, or every Poisson arrival. Their arrivals stay out of the event heap, a stream in
    time order (``_stream_first``), each with the push order it would have had: the heap then
    holds only the steps and transfers in flight, not ~12 levels of future arrivals for the
    whole run (Llama 3.1 70B 2P3D, 3,000 Poisson requests: 0.048 -> 0.027 s a run)."""
    for t in send_t:
        _sent(cfg, st, req, t)
        st[S_ORDER] += 1
    st[S_OPENED] = send_t.size


# ============================================================================ prefill pool
@unrefcounted
def _prefill_batch(cfg, req, links, prefill, rank, commit):
    """The next step of ``rank``: its queue's prompts FCFS up to the token budget, a prompt
    longer than what is left chunked (it fills the step). Returns (tokens, the token-weighted
    attention sum ``sum(k (2 offset + k))``, prompts it completes); ``commit`` writes the
    prompts' tokens left (the caller then pops the completed ones)."""
    room, tokens, weighted, completed = float(cfg[C_BUDGET]), 0.0, 0.0, 0
    i = prefill[rank, HEAD]
    for _ in range(prefill[rank, LENGTH]):
        if room <= 0:
            break
        left = req[i, Q_LEFT]
        take = min(room, left)
        offset = req[i, Q_ISL] - left
        weighted += take * (2 * offset + take)
        tokens += take
        room -= take
        if commit:
            req[i, Q_LEFT] = left - take
        if left - take > 0:
            break  # a chunked prompt fills the step
        completed += 1
        i = links[i]
    return tokens, weighted, completed


@unrefcounted
def _worker_idle(cfg, prefill, rank) -> bool:
    """No rank of ``rank``'s worker is mid-step (its routed experts then spread over all the
    worker's EP GPUs: ``steptime.decode_step(alone=True)``)."""
    first = rank - rank % cfg[C_DP_P]
    return not prefill[first : first + cfg[C_DP_P], P_BUSY].any()


@unrefcounted
def prefill_step_s(st, table, tokens, p_eq, alone) -> float:
    """A prefill step of ``tokens`` prompt tokens at token-weighted attention length
    ``p_eq`` from its table cell (``alone``: 1 for a lone step's own cell); NaN, and the cell
    asked for in ``st``, when it is missing."""
    pre_k = grid_key(tokens, PREFILL_GRID_PER_OCTAVE)
    p_k = grid_key(p_eq, PREFILL_GRID_PER_OCTAVE)
    dt = row_value(table[0], table[1], table[2], table[3], table[4],
                   table_key(alone, pre_k, p_k), 0)  # fmt: skip
    if np.isnan(dt):
        st[S_NEED_POOL], st[S_NEED_A], st[S_NEED_B], st[S_NEED_C] = NEED_PREFILL, alone, pre_k, p_k
    return dt


@unrefcounted
def _start_prefill(cfg, st, req, links, prefill, queued, done_log, ev_t, ev_k, table, rank,
                   t) -> bool:  # fmt: skip
    """Start ``rank``'s next step if it is idle with prompts queued. False, with nothing
    changed, when the step's time is missing."""
    if prefill[rank, P_BUSY] or prefill[rank, LENGTH] == 0:
        return True
    tokens, weighted, _ = _prefill_batch(cfg, req, links, prefill, rank, False)
    # before this rank is marked busy; a lone step has its own cell only where the worker's
    # EP exceeds its TP (elsewhere it is the same number)
    alone = 1 if cfg[C_ALONE_DIFFERS] and _worker_idle(cfg, prefill, rank) else 0
    dt = prefill_step_s(st, table, tokens, weighted / tokens, alone)
    if np.isnan(dt):
        return False
    _, _, completed = _prefill_batch(cfg, req, links, prefill, rank, True)
    first = st[S_LOGGED]
    for _ in range(completed):  # the queue's first ones, in order
        done_log[st[S_LOGGED]] = _pop_front(prefill, links, rank)
        st[S_LOGGED] += 1
    queued[rank] -= tokens
    prefill[rank, P_BUSY] = 1
    _push(st, ev_t, ev_k, t + dt, PREFILLED, rank, first, completed)
    return True


@unrefcounted
def _on_arrive(st, fs, req, links, prefill, queued, i, t) -> None:
    """A request reaches the prefill pool: to the rank with the fewest queued tokens."""
    rank = _least(queued)
    _append(prefill, links, rank, i)
    queued[rank] += req[i, Q_ISL]
    _act_later(st, fs, START_PREFILL, rank, t)


@unrefcounted
def _on_prefilled(times_s, st, fs, req, prefill, decode, decode_f, done_log, ev_t, ev_k, rank,
                  first, completed, t) -> None:  # fmt: skip
    """A prefill step ends: each prompt it completed goes to the decode rank with the fewest
    sequences, over that rank's link (a FIFO server: ``wire`` per request), then latency."""
    prefill[rank, P_BUSY] = 0
    for j in range(first, first + completed):
        i = done_log[j]
        d = _least(decode[:, D_LOAD])
        decode[d, D_LOAD] += 1
        wire = times_s[L_WIRE_PER_TOKEN] * req[i, Q_ISL]
        begin = max(t, decode_f[d, D_LINK_FREE])
        decode_f[d, D_LINK_FREE] = begin + wire
        _push(st, ev_t, ev_k, begin + wire + times_s[L_LATENCY], TRANSFERRED, d, i, 0)
    _act_later(st, fs, START_PREFILL, rank, t)


# ============================================================================ decode pool
@unrefcounted
def decode_step_s(st, table, n, ctx) -> float:
    """A decode step of ``n`` sequences at mean context ``ctx``: its context cell's row at
    count ``n``; NaN (and the cell asked for) when the row is missing or shorter."""
    ctx_k = grid_key(ctx, GRID_PER_OCTAVE)
    dt = row_value(table[0], table[1], table[2], table[3], table[4], table_key(ctx_k, 0, 0), n)
    if np.isnan(dt):
        st[S_NEED_POOL], st[S_NEED_A], st[S_NEED_B] = NEED_DECODE, ctx_k, n
    return dt


@unrefcounted
def _start_decode(cfg, st, req, links, decode, decode_f, finishing, ev_t, ev_k, table, d,
                  t) -> bool:  # fmt: skip
    """Start rank ``d``'s next step if it is idle: admit transferred requests FCFS while a
    slot is free, then one token for every running sequence. False, with nothing changed,
    when the step's time is missing."""
    if decode[d, D_BUSY]:
        return True
    admit = min(decode[d, LENGTH], max(cfg[C_SLOTS] - decode[d, D_RUNNING], 0))
    n = decode[d, D_RUNNING] + admit
    if n == 0:
        return True
    context_sum = decode_f[d, D_CONTEXT_SUM]
    i = decode[d, HEAD]
    for _ in range(admit):  # in admission order, as the admissions below add them
        context_sum += req[i, Q_ISL]
        i = links[i]
    dt = decode_step_s(st, table, n, context_sum / n)
    if np.isnan(dt):
        return False
    for _ in range(admit):
        i = _pop_front(decode, links, d)
        st[S_ADMITTED] += 1
        finish = decode[d, D_STEPS] + int(req[i, Q_OSL])
        decode[d, D_FINISHING] = heap_push(finishing[d], decode[d, D_FINISHING], finish,
                                           st[S_ADMITTED], i)  # fmt: skip
        decode[d, D_RUNNING] += 1
        decode_f[d, D_CONTEXT_SUM] += req[i, Q_ISL]
    decode[d, D_BUSY] = 1
    decode_f[d, D_STEP_S] = dt
    _push(st, ev_t, ev_k, t + dt, DECODED, d, 0, 0)
    return True


@unrefcounted
def _on_transferred(times_s, st, fs, req, links, decode, decode_f, d, i, t) -> None:
    """A request's KV arrived: its first token leaves after the rank's hand-off (its
    ``L_FIRST_TOKEN_STEPS`` latest steps); it waits for a decode slot."""
    req[i, Q_FIRST] = t + times_s[L_FIRST_TOKEN_STEPS] * decode_f[d, D_STEP_S]
    _append(decode, links, d, i)
    _act_later(st, fs, START_DECODE, d, t)


@unrefcounted
def _on_decoded(cfg, times_s, st, fs, req, decode, decode_f, finishing, finished, ev_t, ev_k,
                d, t) -> None:  # fmt: skip
    """A decode step ends: every running sequence gained a token; the ones at their last
    leave in admission order (a closed-loop client sends its next request)."""
    decode[d, D_BUSY] = 0
    decode[d, D_STEPS] += 1
    decode_f[d, D_CONTEXT_SUM] += decode[d, D_RUNNING]
    heap = finishing[d]
    while decode[d, D_FINISHING] > 0 and heap[0, 0] <= decode[d, D_STEPS]:
        i = heap[0, 2]
        decode[d, D_FINISHING] = heap_pop(heap, decode[d, D_FINISHING])
        decode[d, D_RUNNING] -= 1
        decode_f[d, D_CONTEXT_SUM] -= req[i, Q_ISL] + req[i, Q_OSL]  # after its last token
        req[i, Q_DONE] = t
        finished[st[S_FINISHED]] = i
        st[S_FINISHED] += 1
        decode[d, D_LOAD] -= 1
        if cfg[C_CLOSED]:
            _send(cfg, times_s, st, req, ev_t, ev_k, t)
    _act_later(st, fs, START_DECODE, d, t)


# ============================================================================ the loop
@unrefcounted
def run_disagg(cfg, times_s, st, fs, req, links, prefill, queued, decode, decode_f, finishing,
               done_log, finished, ev_t, ev_k, send_t, prefill_table,
               decode_table) -> int:  # fmt: skip
    """Run the events until none is left (``DONE``) or a step time is missing (``NEED_ROW``:
    the cell in ``st[S_NEED_*]``). Calling it again resumes with that step.

    ``send_t``: the sends ``open_sends`` was given; ``prefill_table``, ``decode_table``:
    ``StepTable.arrays()`` of the two pools."""
    while True:
        if not _start_step(cfg, st, fs, req, links, prefill, queued, decode, decode_f, finishing,
                           done_log, ev_t, ev_k, prefill_table, decode_table):  # fmt: skip
            return NEED_ROW
        if st[S_EVENTS] == 0 and st[S_ARRIVED] == st[S_OPENED]:
            return DONE
        _next_event(cfg, times_s, st, fs, req, links, prefill, queued, decode, decode_f,
                    finishing, done_log, finished, ev_t, ev_k, send_t)  # fmt: skip


@unrefcounted
def _start_step(cfg, st, fs, req, links, prefill, queued, decode, decode_f, finishing, done_log,
                ev_t, ev_k, prefill_table, decode_table) -> bool:  # fmt: skip
    """The step the last event asked for (``S_ACTION``), if any: False, the action kept, when
    its time is missing."""
    action, rank, t = st[S_ACTION], st[S_ACTION_RANK], fs[F_ACTION_T]
    started = True
    if action == START_PREFILL:
        started = _start_prefill(cfg, st, req, links[LINK_PREFILL], prefill, queued, done_log,
                                 ev_t, ev_k, prefill_table, rank, t)  # fmt: skip
    elif action == START_DECODE:
        started = _start_decode(cfg, st, req, links[LINK_PENDING], decode, decode_f, finishing,
                                ev_t, ev_k, decode_table, rank, t)  # fmt: skip
    if started:
        st[S_ACTION] = NO_ACTION
    return started


@unrefcounted
def _stream_first(times_s, st, send_t, ev_t, ev_k) -> bool:
    """Whether the next arrival of the stream comes before the heap's first event (time,
    then push order: request ``j`` of the stream was pushed ``j + 1``-th)."""
    j = st[S_ARRIVED]
    if j >= st[S_OPENED]:
        return False
    if st[S_EVENTS] == 0:
        return True
    t = send_t[j] + times_s[L_FRONTEND]
    if t != ev_t[0, 0]:
        return t < ev_t[0, 0]
    return j + 1 < ev_k[0, E_ORDER]


@unrefcounted
def _next_event(cfg, times_s, st, fs, req, links, prefill, queued, decode, decode_f, finishing,
                done_log, finished, ev_t, ev_k, send_t) -> None:  # fmt: skip
    """Take the first event (time, then push order) off the stream of arrivals or the heap,
    and handle it."""
    if _stream_first(times_s, st, send_t, ev_t, ev_k):
        j = st[S_ARRIVED]
        st[S_ARRIVED] += 1
        t, kind, a, b, c = send_t[j] + times_s[L_FRONTEND], ARRIVE, j, 0, 0
    else:
        t = ev_t[0, 0]
        kind, a, b, c = ev_k[0, E_KIND], ev_k[0, E_A], ev_k[0, E_B], ev_k[0, E_C]
        st[S_EVENTS] = timed_heap_pop(ev_t, ev_k, st[S_EVENTS])
    if kind == ARRIVE:
        _on_arrive(st, fs, req, links[LINK_PREFILL], prefill, queued, a, t)
    elif kind == PREFILLED:
        _on_prefilled(times_s, st, fs, req, prefill, decode, decode_f, done_log, ev_t, ev_k, a,
                      b, c, t)  # fmt: skip
    elif kind == TRANSFERRED:
        _on_transferred(times_s, st, fs, req, links[LINK_PENDING], decode, decode_f, a, b, t)
    else:
        _on_decoded(cfg, times_s, st, fs, req, decode, decode_f, finishing, finished, ev_t, ev_k,
                    a, t)  # fmt: skip
