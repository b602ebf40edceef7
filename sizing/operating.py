"""Step 3 of the chain: the operating point, closed-loop at a concurrency or bounded by SLOs.

Mean-value model of a continuous-batching engine with chunked prefill (vLLM V1 style: the
running decodes take their token first, the rest of ``max_num_batched_tokens`` goes to
prompts). Per DP rank with B sequences, prompts of ``isl`` and outputs of ``osl`` tokens:

- A prompt is prefilled in ``n_ch = ceil(isl / chunk)`` steps, ``chunk = min(isl,
  max(budget - B, 64))``. A slot cycles through ``n_ch + osl`` steps per request, so per step
  ``B * osl / (n_ch + osl)`` sequences decode and ``P = B * isl / (n_ch + osl)`` prompt tokens
  are prefilled (steady state: every second the engine does X*isl prefill and X*osl decode
  tokens, X = B / W).
- Prefill arrives in chunks: a fraction ``f = min(P / chunk, 1)`` of steps are *mixed*
  (decode + one chunk), the rest pure decode. ``TPOT = (1 - f) * t_pure + f * t_mixed``.
- Closed-loop clients with equal lengths stay in step: prompts reach the engine in groups
  that fill the budget left by the decodes, ``G = max(min(B * isl, budget - dec), chunk)``.
  Clients that draw their lengths drift apart: the group keeps a share
  ``q = prefill_wave_fraction`` of that and otherwise holds the own chunk plus one step's
  arriving prompt tokens, ``G = max(G_lock - (1 - q) (G_lock - min(chunk + P, budget -
  dec)), chunk)`` (``prefill_group_tokens``), and a prompt sent mid-step first waits out
  the step in progress, ``(1 - q) * t_step / 2``.
  ``TTFT = (n_ch - 1 + wait) * t_group + t_last`` (a step carrying G prompt tokens; the
  last carries the prompt's remainder) with ``wait =
  rho^2 / (2 (1 - rho)) * n_ch`` steps behind other groups (``rho = P / (budget - dec)``
  capped at 0.95; M/D/1's wait damped by rho, the groups being nearly deterministic).
- When ``P > chunk`` the grouped TPOT ``(1 - P/G) t_pure + (P/G) t_group`` is blended in
  over ``chunk < P < 2 chunk`` (lumpy group steps leave pure decodes' compute idle).
- Held within 10 % of the discrete-event simulator (simulate.py) for TTFT and TPOT over
  concurrency 1-512 by tests/sizing/test_simulate.py.
- Closed-loop waves: clients released together re-arrive together, so a wave of B prompts
  takes ``B * isl / (budget - dec)`` full-budget steps and a request waits for half the wave
  ahead of it (at most ``WAVE_MAX_STEPS``: a longer wave staggers itself), scaled by
  ``prefill_wave_fraction`` (how coherent the waves stay); the wait is the larger of this
  and the M/D/1 term (at a given concurrency only: at max throughput a backlog refills
  slots one by one). Every TTFT adds the engine's fixed ``frontend_latency_s``; the
  prefill step itself carries the decode batch (co-scheduled decode slows it).
- KV capacity is sized at the live context ``isl + osl / 2`` (paged blocks are allocated
  as tokens are written); the memory fit still needs one sequence at the full context.
- Max throughput (blank concurrency) is the batch with the highest request rate, not the
  largest batch.
- Residence ``W = TTFT + osl * TPOT``; throughput ``X = B / W`` per rank (Little).
- Closed loop at concurrency C above what the engine admits (``B_max = min(KV-limited
  sequences, max_num_seqs * DP)``): the extra ``C - B_max`` clients wait, and by Little the
  residence becomes ``C / X``, so ``TTFT += (C - B_max) / X``.

These are means; simulate.py gives the percentiles, lumpy chunks and preemption.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.lora import swap_in_s
from sizing.memory import (
    R_WEIGHTS,
    MemoryFit,
    expected_cached_tokens,
    kv_bytes_per_request_per_gpu,
)
from sizing.steptime import StepTime, decode_step

MIN_CHUNK_TOKENS = 64.0  # the engine always leaves some budget for prompts
#: Most full-budget steps a request waits behind its wave (see ``_operating_point``); chosen
#: on the shipped closed-loop sweeps (in-sample TTFT median APE 27.0 % uncapped, 28.6 % at
#: 10, 32.6 % at 4), uncapped waves predicted 10-20x the measured TTFT of 7k-token prompts
#: at c >= 32 out of sample.
WAVE_MAX_STEPS = 10.0
MAX_PREFILL_RHO = 0.95

BINDING_NAMES = ("", "memory", "throughput", "tpot", "ttft", "layout")
B_NONE, B_MEMORY, B_THROUGHPUT, B_TPOT, B_TTFT, B_LAYOUT = range(6)


@dataclass(frozen=True)
class OperatingPoint:
    """Per-instance operating point (a replica = one instance; DP ranks inside it).

    Attributes (units in names; tokens and sequences are counts)
    ----------
    isl_tokens, osl_tokens : prompt and output tokens per request
    concurrency : offered closed-loop clients (per instance)
    batch : sequences actually decoding together, ``min(C, batch_max)``
    batch_max : ``min(kv max concurrency, max_num_seqs * DP)``
    batch_per_rank, chunk_tokens, n_chunks, decode_seqs_per_step, prefill_tokens_per_step,
    mixed_step_fraction, context_tokens : see the module docstring (per DP rank)
    pure_step, mixed_step : StepTime of a pure decode / a decode + chunk step
    tpot_s, ttft_s, queue_s, residence_s : seconds (means)
    requests_per_s, output_tokens_per_s, total_tokens_per_s : per instance
    """

    isl_tokens: np.ndarray
    osl_tokens: np.ndarray
    concurrency: np.ndarray
    batch: np.ndarray
    batch_max: np.ndarray
    batch_per_rank: np.ndarray
    chunk_tokens: np.ndarray
    n_chunks: np.ndarray
    decode_seqs_per_step: np.ndarray
    prefill_tokens_per_step: np.ndarray
    mixed_step_fraction: np.ndarray
    context_tokens: np.ndarray
    pure_step: StepTime
    mixed_step: StepTime
    tpot_s: np.ndarray
    prefill_wait_steps: np.ndarray
    ttft_s: np.ndarray
    queue_s: np.ndarray
    residence_s: np.ndarray
    requests_per_s: np.ndarray
    output_tokens_per_s: np.ndarray
    total_tokens_per_s: np.ndarray
    #: the step that prefills a prompt: its chunk and the prompts released with it
    prefill_step: StepTime | None = None
    prefill_step_tokens: np.ndarray | None = None
    #: closed-loop TTFT terms: the engine's fixed front-end latency (s) and the steps a
    #: request waits behind its own wave of re-arriving prompts (included in prefill_wait_steps)
    frontend_s: np.ndarray | None = None
    wave_wait_steps: np.ndarray | None = None
    #: share of the lock-step prefill group that arrives together (1: equal lengths or a
    #: backlog; ``prefill_wave_fraction`` where closed-loop clients draw their lengths)
    prefill_group_coherence: np.ndarray | None = None
    #: the step in progress a drifted-apart prompt waits out (s), the step holding the
    #: prompt's last chunk (s) and a LoRA adapter's swap-in (s): the rest of the TTFT
    arrival_residual_s: np.ndarray | None = None
    last_prefill_step_s: np.ndarray | None = None
    swap_in_s: np.ndarray | None = None
    #: prompt tokens actually prefilled per request: ``isl`` minus the expected cached prefix
    prefill_isl_tokens: np.ndarray | None = None
    #: the wait for the scheduler's next poll for new requests (s, ``recv_wait_s``)
    recv_wait_s: np.ndarray | None = None


def live_context_tokens(isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Mean context a running sequence holds: ``isl + osl / 2`` (tokens). Paged attention
    allocates blocks as tokens are written, so across a batch of sequences at uniformly
    spread decode positions the cache holds the prompt plus half the output on average."""
    return np.asarray(isl, dtype=np.float64) + 0.5 * np.asarray(osl, dtype=np.float64)


def admitted_context_tokens(c: CandidateArrays, isl: np.ndarray, osl: np.ndarray) -> np.ndarray:
    """Context each admitted sequence claims in the KV pool (tokens): the live context
    ``isl + osl / 2`` where the engine admits on the tokens written so far and preempts under
    pressure (vLLM, SGLang), the whole ``isl + osl`` where it reserves the output up front
    (``kv_reserves_output``: TensorRT-LLM's default GUARANTEED_NO_EVICT scheduler). The
    attention still reads only the live context; this is the admission count's divisor.

    Worked: 128-token prompts, 4,096-token outputs: 2,176 tokens live, 4,224 reserved, so
    TensorRT-LLM holds 1.94x fewer sequences in the same pool."""
    whole = np.asarray(isl, dtype=np.float64) + np.asarray(osl, dtype=np.float64)
    return np.where(np.asarray(c.kv_reserves_output) > 0, whole, live_context_tokens(isl, osl))


def kv_sequences_live(
    c: CandidateArrays, fit: MemoryFit, isl: np.ndarray, osl: np.ndarray
) -> np.ndarray:
    """Sequences the KV budget holds at the context each claims (``admitted_context_tokens``:
    the live context, or the whole one where the engine reserves the output; rounded up to
    whole blocks), ``floor(kv_budget / kv_seq_gpu(claimed)) * DP``; never fewer than
    ``fit.max_concurrency`` (sized at the full context). 0 where the row does not fit."""
    per_seq = kv_bytes_per_request_per_gpu(c, admitted_context_tokens(c, isl, osl))
    with np.errstate(divide="ignore", invalid="ignore"):
        held = np.floor(np.maximum(fit.kv_budget_bytes_per_gpu, 0.0) / per_seq) * c.dp
    held = np.where(np.isfinite(held), held, 0.0)
    return np.where(fit.fits, np.maximum(held, fit.max_concurrency), 0.0)


def batch_limit(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray | None = None,
    osl: np.ndarray | None = None,
) -> np.ndarray:
    """Sequences one instance admits: ``min(KV-limited, max_num_seqs * DP)``; KV-limited at
    the live context when the lengths are given, else at the context ``fit`` was sized at."""
    kv = fit.max_concurrency if isl is None or osl is None else kv_sequences_live(c, fit, isl, osl)
    return np.minimum(kv, c.max_num_seqs * c.dp)


#: Batch sizes tried for the throughput maximum, as fractions of the largest admitted batch;
#: where the best of them is not the largest, it is refined by ``MAX_THROUGHPUT_REFINE``
#: bisection rounds on log B between its neighbours.
MAX_THROUGHPUT_FRACTIONS = (1.0, 0.5, 0.25, 1.0 / 16.0, 1.0 / 64.0)
MAX_THROUGHPUT_REFINE = 4


def closed_loop(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    concurrency: np.ndarray | float = np.nan,
    envelope: bool = True,
    lengths_drawn: np.ndarray | bool = False,
) -> OperatingPoint:
    """Operating point at ``concurrency`` clients per instance. NaN: max throughput, the batch
    in ``[1, batch_max]`` with the highest request rate (a geometric scan, refined by
    bisection on log B); with long prompts the largest batch is not the fastest, since its
    prefill waves stall more decode than the extra sequences add. Misfit rows get batch 0
    and zero throughput.

    At a given concurrency the engine admits ``min(C, batch_max)`` sequences, and
    ``envelope`` (the default) runs it at the best batch up to that: where prefill saturates
    the token budget, sequences beyond the best batch only wait for their prefill (they hold
    KV but do not decode), so the rate is the envelope ``max_{b <= min(C, batch_max)} X(b)``
    and the rest of the clients queue (``queue_s = (C - b) / X``, Little). Holding more
    sequences therefore never lowers the rate (a GPU with more HBM is never slower).
    Searches over the batch itself (``slo_operating_point``, the tail model) pass
    ``envelope=False`` to evaluate exactly the batch they ask for.

    ``lengths_drawn`` marks rows whose clients draw their lengths (a benchmark's random
    range ratio, real traffic): their re-arrivals drift apart, so the step that prefills a
    prompt holds only a share ``prefill_wave_fraction`` of the lock-step group
    (``prefill_group_tokens``). Rows with equal lengths (the default) keep the whole group,
    as the simulator's fixed-length closed loop runs it."""
    n = len(c)
    isl = np.broadcast_to(np.asarray(isl, dtype=np.float64), (n,))
    osl = np.broadcast_to(np.maximum(np.asarray(osl, dtype=np.float64), 1.0), (n,))
    conc = np.broadcast_to(np.asarray(concurrency, dtype=np.float64), (n,))
    b_max = batch_limit(c, fit, isl, osl)
    drawn = np.broadcast_to(np.asarray(lengths_drawn, dtype=bool), (n,))
    coherence = np.where(drawn, c.prefill_wave_fraction, 1.0)
    blank = np.isnan(conc)
    admitted = np.where(blank, b_max, np.minimum(np.maximum(conc, 1.0), b_max))
    best = admitted.copy()
    scan = blank & fit.fits
    if envelope:
        scan |= _past_the_peak(
            c, fit, isl, osl, admitted, ~blank & fit.fits & (admitted > 1), coherence
        )
    rows = np.flatnonzero(scan)
    if len(rows):
        sub_fit = fit.take(rows)
        best[rows] = max_throughput_batch(
            c.take(rows), sub_fit, isl[rows], osl[rows], admitted[rows], waves=~blank[rows],
            coherence=coherence[rows],
        )  # fmt: skip
    offered = np.where(blank, best, conc)
    op = _operating_point(
        c, fit, isl, osl, offered, np.where(scan, best, b_max), waves=~blank, coherence=coherence
    )
    return replace(op, batch_max=b_max)


#: Bisection steps on log N for the open-loop operating point: N in [1, B_max] to within
#: 2^-14 of its log range (under 0.1 % of N for B_max up to 4,096).
OPEN_LOOP_STEPS = 14


def open_loop(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    rate_rps: np.ndarray | float,
    run_requests: np.ndarray | float = np.nan,
) -> OperatingPoint:
    """Operating point under open-loop Poisson arrivals at ``rate_rps`` requests/s per
    instance (a benchmark's ``--request-rate``, a service's traffic).

    The requests in flight ``N`` solve ``N / W(N) = lambda`` (Little), ``W`` the mean
    residence with ``N`` sequences whose prompts arrive one by one (``poisson``: no
    lock-step group, half a step's wait for the step in progress, M/D/1's
    ``rho / (2 (1 - rho)) n_ch`` steps behind other prompts); bisection on ``log N`` over
    ``[1, B_max]`` (below one request in flight a request runs alone, as at ``N = 1``).

    At or above the saturation rate ``X = X(B_max)`` the queue grows through the run: with
    ``run_requests`` requests sent at ``lambda``, request ``k`` starts about ``k (1/X -
    1/lambda)`` late, ``run_requests / 2 * (1/X - 1/lambda)`` on average, added to TTFT
    (NaN ``run_requests``: the run's length is unknown and no backlog term is added).

    Example: Llama 3.1 8B on one H100 at 2 req/s with 467/256-token requests holds
    ``N = 2 x W`` ~ 2 x 2.3 s ~ 4.6 sequences; TTFT is the front end, half a step and
    the prompt's own prefill step (``rho`` ~ 0.002: no queue).
    """
    n = len(c)
    isl = np.broadcast_to(np.asarray(isl, dtype=np.float64), (n,))
    osl = np.broadcast_to(np.maximum(np.asarray(osl, dtype=np.float64), 1.0), (n,))
    rate = np.broadcast_to(np.asarray(rate_rps, dtype=np.float64), (n,))
    b_max = batch_limit(c, fit, isl, osl)

    def at(in_flight: np.ndarray) -> OperatingPoint:
        return _operating_point(c, fit, isl, osl, in_flight, b_max, poisson=True)

    lo = np.zeros(n)
    hi = np.log(np.maximum(b_max, 1.0))
    for _ in range(OPEN_LOOP_STEPS):
        mid = 0.5 * (lo + hi)
        below = at(np.exp(mid)).requests_per_s < rate
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    op = at(np.exp(hi))
    x_max = np.maximum(op.requests_per_s, 1e-12)
    late = np.maximum(1.0 / x_max - 1.0 / np.maximum(rate, 1e-12), 0.0)
    backlog = np.where(fit.fits, np.nan_to_num(0.5 * run_requests * late), 0.0)
    return replace(
        op,
        batch_max=b_max,
        ttft_s=op.ttft_s + backlog,
        queue_s=op.queue_s + backlog,
        residence_s=op.residence_s + backlog,
    )


def with_open_loop_rows(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    op: OperatingPoint,
    rate_rps: np.ndarray,
    run_requests: np.ndarray | float = np.nan,
) -> OperatingPoint:
    """``op`` with the rows that have a finite ``rate_rps`` replaced by their ``open_loop``
    operating point (mixed closed- and open-loop rows, as a calibration set has)."""
    n = len(c)
    rate = np.broadcast_to(np.asarray(rate_rps, dtype=np.float64), (n,))
    rows = np.flatnonzero(np.isfinite(rate))
    if not len(rows):
        return op
    requests = np.broadcast_to(np.asarray(run_requests, dtype=np.float64), (n,))
    part = open_loop(
        c.take(rows), fit.take(rows), np.broadcast_to(isl, (n,))[rows],
        np.broadcast_to(osl, (n,))[rows], rate[rows], requests[rows],
    )  # fmt: skip
    return scatter_rows(op, rows, part, n)


def scatter_rows(full, rows: np.ndarray, part, n: int):
    """``full`` (an OperatingPoint, or any dataclass of per-row arrays, over ``n`` rows) with
    rows ``rows`` replaced by ``part`` (the same over ``len(rows)`` rows)."""
    if dataclasses.is_dataclass(full):
        changes = {
            f.name: scatter_rows(getattr(full, f.name), rows, getattr(part, f.name), n)
            for f in dataclasses.fields(full)
        }
        return replace(full, **changes)
    if full is None or (np.ndim(full) == 0 and np.ndim(part) == 0 and full == part):
        return full
    out = np.array(np.broadcast_to(full, (n,)), copy=True)
    out[rows] = part
    return out


#: A fixed-concurrency row is searched for its envelope only where 5 % fewer sequences run
#: faster (the rate is unimodal in B, so elsewhere the admitted batch is the best up to it).
PEAK_CHECK_FRACTION = 0.95
#: ... and wherever the prompts load the token budget past this share (see _past_the_peak).
PREFILL_RHO_SCAN = 0.5


def _past_the_peak(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    admitted: np.ndarray,
    candidates: np.ndarray,
    coherence: np.ndarray | float = 1.0,
) -> np.ndarray:
    """Rows (of ``candidates``) whose closed-loop rate falls with the batch at ``admitted``;
    ``coherence`` as in ``_operating_point``."""
    past = np.zeros(len(c), dtype=bool)
    rows = np.flatnonzero(candidates)
    if len(rows) == 0:
        return past
    sub = c.take(rows)
    sub_fit = fit.take(rows)
    at = admitted[rows]
    fewer = np.maximum(np.floor(at * PEAK_CHECK_FRACTION), 1.0)
    args = (sub, sub_fit, isl[rows], osl[rows])
    share = np.broadcast_to(np.asarray(coherence, dtype=np.float64), (len(c),))[rows]
    op = _operating_point(*args, at, at, waves=True, coherence=share)
    x_fewer = _operating_point(*args, fewer, at, waves=True, coherence=share).requests_per_s
    # the prompt queue's load: past PREFILL_RHO_SCAN its wait grows steeply and can drop the
    # rate below a much smaller batch's (a cliff, not a local slope)
    room = np.maximum(sub.max_num_batched_tokens - op.decode_seqs_per_step, 1.0)
    queued = op.prefill_tokens_per_step / room > PREFILL_RHO_SCAN
    past[rows] = queued | (x_fewer > op.requests_per_s * (1.0 + 1e-9))
    return past


def max_throughput_batch(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    b_max: np.ndarray,
    waves: np.ndarray | bool = False,
    coherence: np.ndarray | float = 1.0,
) -> np.ndarray:
    """Per row, the batch in ``[1, b_max]`` maximizing requests/s (sequences, per instance);
    ``waves`` where the clients re-arrive in waves (a fixed concurrency) and ``coherence``
    the share of their lock-step group that stays together (see ``_operating_point``).

    A coarse scan (``MAX_THROUGHPUT_FRACTIONS``); rows whose best is an inner point are
    refined between its scan neighbours (the rate is unimodal in B: more sequences share
    each weight read until prefill stalls and KV reads dominate)."""
    n = len(c)
    waves = np.broadcast_to(np.asarray(waves, dtype=bool), (n,))
    coherence = np.broadcast_to(np.asarray(coherence, dtype=np.float64), (n,))
    isl = np.broadcast_to(np.asarray(isl, dtype=np.float64), (n,))
    osl = np.broadcast_to(np.asarray(osl, dtype=np.float64), (n,))
    top = np.maximum(b_max, 1.0)
    fractions = np.asarray(MAX_THROUGHPUT_FRACTIONS)
    batches = np.maximum(np.floor(top[None, :] * fractions[:, None]), 1.0)  # (scan, row)
    # every scan point of every row in one call (the point's rate is its row's alone: a
    # call's cost is mostly per numpy operation, so the scan costs one call, not five)
    rates = _rates_at(c, fit, isl, osl, b_max, waves, coherence, np.arange(n), batches)
    k = np.argmax(rates, axis=0)  # first (largest batch) wins ties
    best_b = batches[k, np.arange(n)]
    inner = np.flatnonzero(k > 0)
    if len(inner) == 0:
        return best_b
    sub = c.take(inner)
    sub_fit = fit.take(inner)
    rows = np.arange(len(inner))
    b, x = best_b[inner], rates[k[inner], inner]
    t = top[inner]
    lo = np.maximum(t * fractions[np.minimum(k[inner] + 1, len(fractions) - 1)], 1.0)
    hi = t * fractions[k[inner] - 1]
    args = (sub, sub_fit, isl[inner], osl[inner], b_max[inner], waves[inner], coherence[inner])
    for _ in range(MAX_THROUGHPUT_REFINE):
        # both probes of an iteration (placed from the same b) in one call; the lower one is
        # judged first
        probes = np.clip(np.floor(np.sqrt(np.stack([lo, hi]) * b)), 1.0, t)
        xp = _rates_at(*args, rows, probes)
        for j in range(2):
            better = xp[j] > x * (1.0 + 1e-9)
            b, x = np.where(better, probes[j], b), np.where(better, xp[j], x)
        lo, hi = np.sqrt(lo * b), np.sqrt(hi * b)
    best_b[inner] = b
    return best_b


def _rates_at(c, fit, isl, osl, b_max, waves, coherence, rows, batches) -> np.ndarray:
    """Requests/s of ``rows`` at each row of ``batches`` (points x rows), in one call."""
    points = batches.shape[0]
    every = np.tile(rows, points)
    op = _operating_point(
        c.take(every), fit.take(every), isl[every], osl[every], batches.reshape(-1),
        b_max[every], waves=waves[every], coherence=coherence[every],
    )  # fmt: skip
    return op.requests_per_s.reshape(points, len(rows))


def prompt_chunk_tokens(
    budget_tokens: np.ndarray, decoding_seqs: np.ndarray, prompt_tokens: np.ndarray | float = np.inf
) -> np.ndarray:
    """Tokens of one prompt a step carries (tokens): the budget the decoding sequences leave
    (one token each), at least ``MIN_CHUNK_TOKENS``, at most the prompt, at least 1.
    Example: 8,192 tokens a step beside 256 decoding sequences: 7,936 of a 20,000-token prompt
    (3 chunks), all of a 2,000-token one; beside 8,192 sequences still 64.
    """
    room = np.maximum(budget_tokens - decoding_seqs, MIN_CHUNK_TOKENS)
    return np.maximum(np.minimum(prompt_tokens, room), 1.0)


def prefill_group_tokens(
    wave_tokens: np.ndarray,
    chunk_tokens: np.ndarray,
    arriving_tokens_per_step: np.ndarray,
    room_tokens: np.ndarray,
    coherence: np.ndarray | float,
) -> np.ndarray:
    """Prompt tokens in the step that prefills a request's chunk (tokens, per DP rank).

    ``G = max(G_lock - (1 - q) * (G_lock - G_apart), chunk)`` with

    - ``G_lock = min(B * isl, budget - dec)``: clients in lock step (equal lengths, released
      together) send their prompts together, and one step carries the whole wave;
    - ``G_apart = min(chunk + P, budget - dec)``: clients whose re-arrivals have drifted
      apart (drawn lengths) send a stream of ``P`` prompt tokens per step, so the step holds
      the request's own chunk and about one step's arrivals of the others;
    - ``q = coherence`` (``prefill_wave_fraction`` for drawn lengths, 1 for equal ones).

    Parameters
    ----------
    wave_tokens : ``B * isl``, every client's prompt at once (tokens)
    chunk_tokens : the request's own chunk (tokens)
    arriving_tokens_per_step : ``P``, prompt tokens arriving per step (tokens)
    room_tokens : ``budget - dec``, the budget the decodes leave (tokens)
    coherence : ``q`` in 0..1
    """
    lock = np.minimum(wave_tokens, room_tokens)
    apart = np.minimum(chunk_tokens + arriving_tokens_per_step, room_tokens)
    # a drifted-apart step is never larger than the lock-step one (both capped by the room);
    # written from G_lock so that q = 1 gives G_lock exactly
    apart = np.minimum(apart, lock)
    return np.maximum(lock - (1.0 - coherence) * (lock - apart), chunk_tokens)


def recv_interval(c: CandidateArrays) -> np.ndarray:
    """Decode steps between the scheduler's polls for new requests, ``k >= 1`` per row."""
    return np.maximum(np.asarray(c.scheduler_recv_interval, dtype=np.float64), 1.0)


def recv_wait_s(
    c: CandidateArrays, batch_per_rank: np.ndarray, decode_step_s: np.ndarray
) -> np.ndarray:
    """Mean wait for the scheduler's next poll for new requests (s).

    An engine that polls once every ``k = scheduler_recv_interval`` decode steps (SGLang's
    ``--scheduler-recv-interval``; a step carrying prompt tokens resets the count and polls at
    once) receives a request that arrives while others decode after ``(k - 1) / 2`` more
    decode steps on average: ``wait = (k - 1) / 2 * t_decode * min(B - 1, 1)``. A request
    alone (``B = 1``) finds the engine idle, which polls at once.

    Worked: k = 30, a 17 ms decode step, 32 sequences: 14.5 x 17 ms = 247 ms on every TTFT.
    k = 1 (every engine's default) gives 0.
    """
    k = recv_interval(c)
    busy = np.clip(np.asarray(batch_per_rank, dtype=np.float64) - 1.0, 0.0, 1.0)
    return 0.5 * (k - 1.0) * decode_step_s * busy


def _operating_point(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    conc: np.ndarray,
    b_max: np.ndarray,
    waves: np.ndarray | bool = False,
    coherence: np.ndarray | float = 1.0,
    poisson: np.ndarray | bool = False,
) -> OperatingPoint:
    """The mean-value model at ``conc`` clients; ``waves`` where closed-loop clients
    re-arrive in waves (a fixed concurrency), not where a backlog refills slots one by one
    (max throughput: offline benchmarks keep every slot busy from a queue); ``coherence``
    (0..1) the share of the lock-step prefill group those waves keep together
    (``prefill_group_tokens``; 1 for equal lengths); ``poisson`` where requests arrive
    independently (open loop, ``open_loop``): no group arrives together, a prompt waits out
    half the step in progress and queues behind the others as M/D/1 does."""
    n = len(c)
    offered = np.maximum(np.broadcast_to(conc, (n,)), 1.0)
    batch = np.where(fit.fits, np.minimum(offered, b_max), 0.0)
    b_rank = np.maximum(batch, 1.0) / c.dp  # evaluate misfits at 1 to keep numbers finite

    budget = c.max_num_batched_tokens
    prompt = isl  # attended context of a prompt (a cached prefix is still attended)
    isl = isl - expected_cached_tokens(c, isl)  # prefilled tokens: a cache hit skips its prefix
    chunk = prompt_chunk_tokens(budget, b_rank, isl)
    n_ch = np.ceil(isl / chunk)
    # speculative decoding emits tau tokens per decode step (1 when off): osl / tau steps
    tau = c.spec_tokens_per_step
    cycle = n_ch + osl / tau
    dec = b_rank * (osl / tau) / cycle
    pre = b_rank * isl / cycle
    mixed_frac = np.minimum(pre / chunk, 1.0)
    mixed_tokens = np.maximum(chunk, pre)
    ctx = prompt + 0.5 * osl

    pure = decode_step(c, dec, ctx)
    mixed = decode_step(c, dec, ctx, mixed_tokens, prompt)
    tpot = (1.0 - mixed_frac) * pure.step_s + mixed_frac * mixed.step_s

    # Closed-loop clients with equal lengths finish in step with each other (they were
    # released together), so their next prompts reach the engine as a group and share one
    # prefill step: the step that prefills a prompt carries up to the whole budget left by
    # the decodes, ``min(B * isl, budget - decodes)`` tokens (>= the prompt's own chunk).
    # Drawn lengths drift the clients apart: only the share ``coherence`` of that group
    # stays together, the rest arrives as a stream (prefill_group_tokens). A backlog (max
    # throughput) fills the budget whatever the lengths, so it keeps the whole group.
    room = np.maximum(budget - dec, chunk)
    together = np.where(waves, np.broadcast_to(coherence, (n,)), np.where(poisson, 0.0, 1.0))
    # an engine polling every k decode steps receives k steps' arrivals together
    polled = pre * recv_interval(c)
    group = prefill_group_tokens(b_rank * isl, chunk, polled, budget - dec, together)
    prefill = decode_step(c, dec, ctx, group, prompt)
    # Once prompts outnumber one chunk per step they arrive in such groups: a share
    # ``pre / group`` of steps carries a whole group and the rest decode alone, which costs
    # more than spreading ``pre`` over every step when pure decodes leave compute idle.
    # Blended in over ``chunk < pre < 2 chunk`` so TPOT stays continuous in B.
    grouped = (1.0 - np.minimum(pre / group, 1.0)) * pure.step_s + np.minimum(
        pre / group, 1.0
    ) * prefill.step_s
    blend = np.clip(pre / chunk - 1.0, 0.0, 1.0)
    tpot = (1.0 - blend) * tpot + blend * np.maximum(grouped, tpot)
    # Drifted-apart clients send mid-step, so a prompt first waits out the step in progress:
    # half a mean step on average (a lock-step group arrives as a step ends, q = 1).
    residual = 0.5 * (1.0 - together) * tpot
    tpot = tpot / tau  # per output token: a step emits tau of them
    rho = np.minimum(pre / np.maximum(budget - dec, 1.0), MAX_PREFILL_RHO)
    # The groups are nearly deterministic (D/D/1 would give no wait below saturation), so the
    # M/D/1 mean wait rho / (2 (1 - rho)) is damped by another rho: rho^2 / (2 (1 - rho)).
    # Independent (Poisson) arrivals are not damped: M/D/1's rho / (2 (1 - rho)).
    damping = np.where(poisson, 1.0, rho)
    wait_steps = damping * rho / (2.0 * (1.0 - rho)) * n_ch
    # Waves: clients released together re-arrive together, so a wave of B prompts needs
    # ``B * isl / room`` full-budget steps and a request waits on average for half of the
    # wave ahead of it. ``prefill_wave_fraction`` (fitted, 0..1) is how coherent the waves
    # stay (drawn lengths and the engine's admission policy smear them out).
    # A long wave staggers itself (its requests start decoding up to N steps apart and
    # re-arrive that far apart), so the wait behind a wave is capped at WAVE_MAX_STEPS.
    wave_steps = np.minimum(np.maximum(b_rank * isl / room - n_ch, 0.0) / 2.0, WAVE_MAX_STEPS)
    wave_steps = np.where(waves, c.prefill_wave_fraction * wave_steps, 0.0)
    wait_steps = np.maximum(wait_steps, wave_steps)
    # The prompt's last chunk holds only its remainder, ``isl - (n_ch - 1) * chunk`` tokens
    # (plus the others' share of the group): a 9,000-token prompt in 8,192-token chunks is
    # one full step and one of 808 tokens, not two full steps.
    last_tokens = np.maximum(group - (n_ch * chunk - isl), 1.0)
    last = decode_step(c, dec, ctx, last_tokens, prompt)
    prefill_own = (n_ch - 1.0) * prefill.step_s + last.step_s
    recv = recv_wait_s(c, b_rank, pure.step_s)
    ttft = (
        c.frontend_latency_s + residual + recv + prefill_own + wait_steps * prefill.step_s
        + swap_in_s(c)
    )  # fmt: skip
    residence = ttft + osl * tpot
    x_instance = b_rank / residence * c.dp
    queue = np.where(offered > batch, (offered - batch) / x_instance, 0.0)

    ok = fit.fits
    x_instance = np.where(ok, x_instance, 0.0)
    return OperatingPoint(
        isl_tokens=prompt,
        osl_tokens=osl,
        concurrency=offered,
        batch=batch,
        batch_max=b_max,
        batch_per_rank=b_rank,
        chunk_tokens=chunk,
        n_chunks=n_ch,
        decode_seqs_per_step=dec,
        prefill_tokens_per_step=pre,
        mixed_step_fraction=mixed_frac,
        context_tokens=ctx,
        pure_step=pure,
        mixed_step=mixed,
        tpot_s=tpot,
        prefill_wait_steps=wait_steps,
        ttft_s=ttft + np.where(ok, queue, 0.0),
        queue_s=np.where(ok, queue, 0.0),
        residence_s=residence + np.where(ok, queue, 0.0),
        requests_per_s=x_instance,
        output_tokens_per_s=x_instance * osl,
        total_tokens_per_s=x_instance * (prompt + osl),
        prefill_step=prefill,
        prefill_step_tokens=group,
        frontend_s=c.frontend_latency_s * np.ones(n),
        wave_wait_steps=wave_steps,
        prefill_group_coherence=together,
        arrival_residual_s=residual,
        last_prefill_step_s=last.step_s,
        swap_in_s=swap_in_s(c) * np.ones(n),
        prefill_isl_tokens=isl,
        recv_wait_s=recv,
    )


@dataclass(frozen=True)
class SloPoint:
    """The SLO-bound operating point: the largest batch meeting both latency SLOs."""

    point: OperatingPoint
    meets_slo: np.ndarray  # bool: fits and the chosen batch meets TPOT and TTFT
    binding_code: np.ndarray  # operating.B_*

    @property
    def binding(self) -> np.ndarray:
        return np.array(BINDING_NAMES, dtype=object)[self.binding_code]


def slo_operating_point(
    c: CandidateArrays,
    fit: MemoryFit,
    isl: np.ndarray,
    osl: np.ndarray,
    tpot_slo_s: np.ndarray,
    ttft_slo_s: np.ndarray,
) -> SloPoint:
    """Largest batch per DP rank in ``[1, batch_max / DP]`` whose mean TPOT and TTFT meet the
    SLOs, by vectorized bisection (both grow with the batch). If even batch 1 misses, the row
    reports batch 1 with ``meets_slo`` False and the missed SLO as binding.

    Binding constraint: ``memory`` (KV capacity capped the batch), ``throughput`` (the
    engine's max_num_seqs capped it), ``tpot`` / ``ttft`` (the SLO did), ``layout``
    (the parallel layout is invalid).
    """
    n = len(c)
    tpot_slo = np.broadcast_to(np.asarray(tpot_slo_s, dtype=np.float64), (n,))
    ttft_slo = np.broadcast_to(np.asarray(ttft_slo_s, dtype=np.float64), (n,))
    hi_rank = np.maximum(np.floor(batch_limit(c, fit, isl, osl) / c.dp), 1.0)

    def meets(rank_batch: np.ndarray) -> tuple[np.ndarray, OperatingPoint]:
        op = closed_loop(c, fit, isl, osl, rank_batch * c.dp, envelope=False)
        return (op.tpot_s <= tpot_slo) & (op.ttft_s <= ttft_slo), op

    ok_hi, _ = meets(hi_rank)
    ok_lo, _ = meets(np.ones(n))
    lo = np.ones(n)  # invariant where searching: meets(lo) and not meets(hi)
    hi = hi_rank.copy()
    searching = ok_lo & ~ok_hi
    while np.any(searching & (hi - lo > 1)):
        mid = np.floor(0.5 * (lo + hi))
        ok_mid, _ = meets(mid)
        active = searching & (hi - lo > 1)
        lo = np.where(active & ok_mid, mid, lo)
        hi = np.where(active & ~ok_mid, mid, hi)
    chosen = np.where(ok_hi, hi_rank, lo)
    point = closed_loop(c, fit, isl, osl, chosen * c.dp, envelope=False)
    # Which SLO stops the next batch size: evaluate one above the choice.
    over = closed_loop(c, fit, isl, osl, np.minimum(chosen + 1, hi_rank) * c.dp, envelope=False)
    binding = np.where(over.tpot_s > tpot_slo, B_TPOT, B_TTFT)
    kv_bound = kv_sequences_live(c, fit, isl, osl) <= c.max_num_seqs * c.dp
    binding = np.where(ok_hi, np.where(kv_bound, B_MEMORY, B_THROUGHPUT), binding)
    first_miss = np.where(point.tpot_s > tpot_slo, B_TPOT, B_TTFT)
    binding = np.where(ok_lo, binding, first_miss)
    binding = np.where(
        fit.fits, binding, np.where(fit.reason_code >= R_WEIGHTS, B_MEMORY, B_LAYOUT)
    )
    return SloPoint(point=point, meets_slo=fit.fits & ok_lo, binding_code=binding)
