"""The worst burst window, checked with the discrete-event simulator.

The day's fluid queue (``sizing.autoscale.simulate``) says what share of the burst's requests
is served within the SLO, from capacity and queue alone. Here the same window runs through the
engine simulator (``sizing.simulate``) to see the tails the fluid model cannot.

The window's fleet-wide rate ``lambda(t)`` (req/s, per second: the base rate, the burst ramp,
then the base rate while new replicas boot) is split evenly over the replicas that are ready
in that second, ``n(t) = active(t) + warm`` (the fluid run's own replica counts, warm pool
included): one replica sees ``lambda(t) / n(t)``. A load balancer that splits a Poisson
stream at random hands each replica a Poisson stream of that rate, so one replica's trace is
a non-homogeneous Poisson process drawn second by second: ``N_k ~ Poisson(lambda_k / n_k)``
arrivals in second ``k``, placed uniformly within it. The trace replays through one simulated
replica (``Workload(arrival="trace")``) with the scenario's length distributions; the
share of requests with TTFT and TPOT inside the SLO, and both latencies at the SLO
percentile, are reported beside the fluid model's share.

Bounded: a warm-up of ``WARMUP_S`` at the window's first per-replica rate fills the engine
(left out of the statistics, at most ``MAX_WARMUP_REQUESTS``); the window's requests are capped
at ``MAX_REQUESTS`` by cutting the window's tail (after the burst, while the queue drains),
and the result says when it did. Worked number: a busiest hour of 20 req/s on 14 ready
replicas is 1.43 req/s each; a ramp of 0.2 req/s per s for 60 s adds 12 req/s at its top,
0.86 req/s more per replica; over a 10 + 60 + 160 s window one replica sees ~360 requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from sizing.derivation import Step, q, step
from sizing.simulate import (
    LengthDist,
    SimResult,
    StepTimer,
    Workload,
    engine_for,
    simulate,
)

#: Requests in the window at most (one bounded simulation per recommendation, ~1 s).
MAX_REQUESTS = 2500
WARMUP_S = 60.0  # the engine fills in a few residence times (tens of seconds)
MAX_WARMUP_REQUESTS = 250


def per_replica_rates(rate_rps, ready_replicas) -> np.ndarray:
    """``lambda(t) / n(t)`` per step (req/s per replica); ``n`` below 1 counts as 1 (the first
    replica takes the traffic while the rest boot)."""
    rates = np.asarray(rate_rps, dtype=np.float64)
    ready = np.maximum(np.asarray(ready_replicas, dtype=np.float64), 1.0)
    return rates / ready


def nhpp_arrivals(rate_rps, dt_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s, sorted) of a Poisson process whose rate is ``rate_rps[k]`` in step
    ``[k dt, (k + 1) dt)``: ``Poisson(rate_k dt)`` arrivals per step, uniform within it."""
    rates = np.asarray(rate_rps, dtype=np.float64)
    counts = rng.poisson(rates * dt_s)
    starts = np.repeat(np.arange(rates.size) * dt_s, counts)
    return np.sort(starts + rng.uniform(0.0, dt_s, starts.size))


@dataclass(frozen=True)
class BurstCheck:
    """The simulated window beside the fluid model's share."""

    slo_share: float  # simulated: requests with TTFT <= SLO and TPOT <= SLO
    fluid_slo_share: float
    ttft_ms_at_percentile: float
    tpot_ms_at_percentile: float
    percentile: float
    requests: int  # measured (warm-up excluded)
    warmup_requests: int
    window_s: float  # simulated part of the window
    window_cut: bool  # the tail was cut at MAX_REQUESTS
    peak_rps_per_replica: float
    seed: int

    def as_dict(self) -> dict:
        """JSON-ready: a percentile of no requests (NaN) becomes None."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in out.items()
        }


def _cut(per_replica: np.ndarray, dt_s: float, max_requests: int) -> int:
    """Steps of the window kept so that the expected requests stay within ``max_requests``."""
    expected = np.cumsum(per_replica * dt_s)
    keep = int(np.searchsorted(expected, max_requests, side="right"))
    return max(min(keep, per_replica.size), 1)


def check_burst(
    c,
    isl: LengthDist,
    osl: LengthDist,
    rate_rps,
    ready_replicas,
    dt_s: float,
    ttft_slo_ms: float,
    tpot_slo_ms: float,
    percentile: float,
    fluid_slo_share: float,
    seed: int,
    shared_prefix_tokens: float = 0.0,
    prefix_hit_rate: float = 0.0,
    max_requests: int = MAX_REQUESTS,
) -> tuple[BurstCheck, list[Step]]:
    """Simulate one replica (row 0 of ``c``) through the window (see the module docstring)."""
    per = per_replica_rates(rate_rps, ready_replicas)
    keep = _cut(per, dt_s, max_requests)
    cut = keep < per.size
    per = per[:keep]
    rng = np.random.default_rng(seed)
    warm_s = min(WARMUP_S, MAX_WARMUP_REQUESTS / per[0]) if per[0] > 0 else 0.0
    warm = nhpp_arrivals([per[0]], warm_s, rng) if warm_s > 0 else np.zeros(0)
    window = nhpp_arrivals(per, dt_s, rng) + warm_s
    times = np.concatenate([warm, window])
    n = times.size
    isl_tokens, osl_tokens = isl.sample(n, rng), osl.sample(n, rng)
    workload = Workload(
        isl,
        osl,
        requests=n,
        arrival="trace",
        trace_s=times,
        trace_prompt_tokens=isl_tokens,
        trace_output_tokens=osl_tokens,
        shared_prefix_tokens=shared_prefix_tokens,
        prefix_hit_rate=prefix_hit_rate,
        warmup_requests=int(warm.size),
        seed=seed,
    )
    engine = engine_for(c, isl.mean, osl.mean)
    result: SimResult = simulate(c, workload, engine, StepTimer(c, engine.max_num_seqs))
    measured = result.requests
    ttft = result.ttft_s[result.measured] * 1e3
    tpot = np.nan_to_num(result.tpot_s[result.measured]) * 1e3
    share = result.goodput(ttft_slo_ms / 1e3, tpot_slo_ms / 1e3) if measured else 1.0
    ttft_p = float(np.percentile(ttft, percentile)) if measured else math.nan
    tpot_p = float(np.percentile(tpot, percentile)) if measured else math.nan
    check = BurstCheck(
        slo_share=share,
        fluid_slo_share=float(fluid_slo_share),
        ttft_ms_at_percentile=ttft_p,
        tpot_ms_at_percentile=tpot_p,
        percentile=float(percentile),
        requests=int(measured),
        warmup_requests=int(warm.size),
        window_s=float(keep * dt_s),
        window_cut=bool(cut),
        peak_rps_per_replica=float(per.max()),
        seed=int(seed),
    )
    note = (
        f"one replica's share of the window ({measured} requests, {keep * dt_s:g} s"
        + (f", tail cut at {max_requests} requests" if cut else "")
        + f"; {warm.size} warm-up requests left out); at p{percentile:g}: TTFT "
        f"{ttft_p:.0f} ms (SLO {ttft_slo_ms:g}), TPOT {tpot_p:.1f} ms (SLO {tpot_slo_ms:g}); "
        f"the fluid model says {fluid_slo_share:.1%}"
    )
    steps = [
        step(
            "burst_simulated_slo_share",
            "share of simulated requests with TTFT <= SLO and TPOT <= SLO; arrivals "
            "Poisson(lambda(t) / (active(t) + warm)) per second on one replica",
            [
                q("peak_rps_per_replica", check.peak_rps_per_replica, "req/s"),
                q("requests", measured, "requests"),
                q("ttft_slo", ttft_slo_ms, "ms"),
                q("tpot_slo", tpot_slo_ms, "ms"),
                q("seed", seed, ""),
            ],
            share,
            "",
            note,
            kind="simulation",
        )
    ]
    return check, steps
