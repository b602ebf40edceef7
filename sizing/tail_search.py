"""Search for the highest Poisson rate one replica serves within its SLO, by simulation.

One candidate's replica is simulated (open-loop Poisson arrivals at the scenario's length
distributions, prefix cache included) to find the highest request rate whose TTFT/TPOT
percentiles and goodput meet the SLO, by a safeguarded bisection in log rate. Every
simulation of a candidate uses one seed derived from its key (common random numbers:
``meets(rate)`` is monotone in practice and a rerun reproduces the numbers exactly).
Pure core: no Django; ``planner.tails`` turns the answer into a result row.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from sizing.memory import fit_memory
from sizing.operating import closed_loop
from sizing.simulate import (
    LengthDist,
    SimResult,
    Workload,
    engine_for,
    meets_slo,
    shared_timer,
    simulate,
)

#: Requests per simulation: the p99 of 1,350 measured requests rests on ~14 samples, enough to
#: rank candidates while one bisection stays near a second.
SIM_REQUESTS = 1500
WARMUP_SHARE = 0.1  # first 10 % of requests fill the engine and are left out of statistics
REL_TOL = 0.05  # bisection stops when high / low < 1.05 (5 % on the rate, ~1 replica in 20)
UPPER_OVER_MAX_THROUGHPUT = 1.0  # above the closed-loop max throughput a queue only grows
MAX_PROBES = 12  # simulations per search at most (a safeguard; ~4 are typical)
MAX_STEP_DOWN = 8  # below 1/8 of the mean-value rate a replica is near idle: give up there
#: First probe, as a share of the mean-value rate: the simulated rate came out 0.3-1.1x of
#: it on the examples (median ~0.7): tails and goodput cost capacity that means hide.
START_OVER_MEAN_VALUE = 0.7
#: A failing probe whose median TTFT grew more than this from the first to the last third of
#: its measured requests is overloaded: its queue grows for the whole run, so its distance
#: from the SLO measures the run's length, not where the SLO is met, and the search steps
#: down (4x at most) instead of extrapolating from it. At 0.7x the analytic rate of a
#: 32k-prompt replica one probe read a p90 TTFT of 32,000 s and the secant ended the search
#: with "no rate meets"; 0.104 req/s met. A stable queue's median moves by a few per cent.
OVERLOAD_GROWTH = 2.0
#: A failing probe within this factor of the SLO never ends the search by extrapolation: near
#: the SLO the score can be nearly flat in the rate (a goodput quantile set by the prompt mix,
#: not the load), and a secant through two such probes points at rates far below any that
#: fail. Llama 3.1 405B on B200 (99 % goodput): scores 1.197 and 1.193 at 1.75 and 1.67 req/s
#: extrapolated to 0.09 req/s ("no rate meets"); 1.5 req/s meets at 12,000 requests.
NEAR_SLO_SCORE = 2.0
#: Warm start from the analytic model: the first probe half a tolerance window below it.
WARM_START_SHARE = 1 / (1 + REL_TOL) ** 0.5
#: The score's elasticity in the rate (d log score / d log rate) assumed where the probes do
#: not measure it: the secants of the runs' searches across their SLO crossing measured 0.3-1.2
#: (typical and 1,200-candidate bench scenarios); 1 is "score ~ rate", as one probe assumed.
PRIOR_SLOPE = 1.0
#: Two probes closer than this (rate ratio) give no secant of their own (see ``_estimate``).
SECANT_MIN_SPAN = 1.1


# ============================================================================ simulation
def seed_for(candidate_key: str) -> int:
    """A stable seed per candidate (``hash()`` is salted per process; crc32 is not)."""
    return zlib.crc32(candidate_key.encode())


@dataclass(frozen=True)
class Probe:
    """One simulation of the search: the rate, the verdict and how far from the SLO."""

    rate_rps: float
    meets: bool
    score: float  # worst of (percentile / SLO) and the goodput quantile's ratio; <= 1 meets
    ttft_ms_at_percentile: float
    tpot_ms_at_percentile: float
    goodput: float
    ttft_miss_share: float
    tpot_miss_share: float
    #: median TTFT of the last third of measured requests over the first third's (arrival
    #: order): ~1 when the queue is stable, growing with the run when it is overloaded
    ttft_growth: float = 1.0


@dataclass(frozen=True)
class RateFound:
    rate_rps: float  # 0 when no rate meets the SLO
    low_rps: float
    high_rps: float
    upper_rps: float
    probes: tuple[Probe, ...]
    binding: str  # what fails just above the rate: ttft, tpot or throughput


class Replica:
    """One candidate's replica with its workload: ``run(rate)`` simulates it (shared engine
    limits and step-time memo across the search, which is most of the cost saved; the memo
    is the thread's ``shared_timer`` of the candidate row, so the next search of the same
    row, whatever its traffic, starts with the step times this one filled)."""

    def __init__(
        self, c, isl: LengthDist, osl: LengthDist, traffic, slo, seed: int,
        requests: int = SIM_REQUESTS,
    ):  # fmt: skip
        self.c, self.isl, self.osl, self.slo, self.seed = c, isl, osl, slo, seed
        self.traffic, self.requests = traffic, requests
        self.engine = engine_for(c, isl.mean, osl.mean)
        self.timer = shared_timer(c, self.engine.max_num_seqs)
        #: the last run: the simulation is a function of the rate (one seed), and the search's
        #: caller simulates at the last probe's rate again when no rate meets (a low rate, the
        #: longest simulation of the search)
        self._last: tuple[float, SimResult] | None = None

    def run(self, rate_rps: float) -> SimResult:
        if self._last is not None and self._last[0] == rate_rps:
            return self._last[1]
        result = self._simulate(rate_rps)
        self._last = (rate_rps, result)
        return result

    def _simulate(self, rate_rps: float) -> SimResult:
        return simulate(self.c, self.workload(rate_rps), self.engine, self.timer)

    def workload(self, rate_rps: float) -> Workload:
        """The Poisson workload one probe simulates at ``rate_rps``."""
        return Workload(
            self.isl,
            self.osl,
            requests=self.requests,
            rate_rps=rate_rps,
            shared_prefix_tokens=self.traffic.shared_prefix_tokens,
            prefix_hit_rate=self.traffic.prefix_hit_rate,
            warmup_requests=int(self.requests * WARMUP_SHARE),
            seed=self.seed,
        )

    def probe(self, rate_rps: float) -> Probe:
        r = self.run(rate_rps)
        s = self.slo
        ttft_ratio = r.ttft_s[r.measured] * 1e3 / s.ttft_ms
        tpot_ratio = np.nan_to_num(r.tpot_s[r.measured]) * 1e3 / s.tpot_ms
        worst = np.maximum(ttft_ratio, tpot_ratio)
        score = max(
            float(np.percentile(ttft_ratio, s.percentile)),
            float(np.percentile(tpot_ratio, s.percentile)),
            # the request at the goodput quantile, as ``goodput()`` counts (no interpolation)
            float(np.quantile(worst, s.goodput_target, method="inverted_cdf")),
        )
        ttft, tpot = _at_percentile_ms(r, s.percentile)
        growth = _ttft_growth(r)
        # a queue that grows through the run meets nothing in steady state, whatever a finite
        # run's percentiles say (near the ceiling a 30 s TTFT is reached only after the run)
        meets = meets_slo(r, s.ttft_ms, s.tpot_ms, s.percentile, s.goodput_target)
        return Probe(
            rate_rps=rate_rps,
            meets=meets and growth <= OVERLOAD_GROWTH,
            score=score,
            ttft_ms_at_percentile=ttft,
            tpot_ms_at_percentile=tpot,
            goodput=r.goodput(s.ttft_ms / 1e3, s.tpot_ms / 1e3),
            ttft_miss_share=float(np.mean(ttft_ratio > 1)),
            tpot_miss_share=float(np.mean(tpot_ratio > 1)),
            ttft_growth=growth,
        )


def _ttft_growth(r: SimResult) -> float:
    """Median TTFT of the last third of measured requests over the first third's."""
    ttft = r.ttft_s[r.measured]
    third = ttft.size // 3
    if third == 0:
        return 1.0
    first, last = float(np.median(ttft[:third])), float(np.median(ttft[-third:]))
    return last / first if first > 0 else 1.0


def _at_percentile_ms(r: SimResult, percentile: float) -> tuple[float, float]:
    """TTFT and TPOT (ms) at ``percentile`` over measured requests (TPOT of 1 token is 0,
    as ``meets_slo`` counts it)."""
    ttft = r.ttft_s[r.measured] * 1e3
    tpot = np.nan_to_num(r.tpot_s[r.measured]) * 1e3
    if ttft.size == 0:
        return math.nan, math.nan
    return float(np.percentile(ttft, percentile)), float(np.percentile(tpot, percentile))


def _binding(fail: Probe | None, slo) -> str:
    """The SLO the lowest failing rate broke: a percentile over its limit, else (goodput)
    the latency that more requests missed."""
    if fail is None:
        return "throughput"
    if fail.ttft_ms_at_percentile > slo.ttft_ms:
        return "ttft"
    if fail.tpot_ms_at_percentile > slo.tpot_ms:
        return "tpot"
    return "ttft" if fail.ttft_miss_share >= fail.tpot_miss_share else "tpot"


def _estimate(probes: list[Probe]) -> float | None:
    """Rate where the score crosses 1, on the line in log-log through the two probes nearest
    the SLO (a secant: they bracket the knee best). One probe, or two closer than
    ``SECANT_MIN_SPAN`` whose secant is shallower than ``PRIOR_SLOPE``, use ``PRIOR_SLOPE``
    from the nearer one: between close probes the simulation's noise is most of the score's
    difference, and a flat secant sends the search far below the SLO. None when probes far
    enough apart do not rise with the rate (no slope to follow)."""
    near = sorted(
        {p.rate_rps: p for p in probes if p.score > 0}.values(),
        key=lambda p: abs(math.log(p.score)),
    )
    if not near:
        return None
    a, slope = near[0], PRIOR_SLOPE
    if len(near) > 1:
        b = near[1]
        secant = math.log(b.score / a.score) / math.log(b.rate_rps / a.rate_rps)
        if max(a.rate_rps, b.rate_rps) / min(a.rate_rps, b.rate_rps) > SECANT_MIN_SPAN:
            if not secant > 0.05:
                return None
            slope = secant
        else:
            slope = max(secant, PRIOR_SLOPE)
    return a.rate_rps * math.exp(-math.log(a.score) / slope)


def max_rate_rps(
    replica: Replica, hint_rps: float, upper_rps: float, warm: bool = False
) -> RateFound:
    """Highest rate meeting the SLO percentiles and goodput (req/s per replica).

    A safeguarded bisection in log rate: each probe's distance from the SLO (``score``)
    places the next one where a secant through the probes nearest the SLO crosses it; once
    that estimate sits within the tolerance of a bracket end, the probe goes to the far edge
    of the tolerance window, so one more verdict closes the bracket; plain halving takes over
    when the secant says nothing useful. It starts at ``START_OVER_MEAN_VALUE`` of the
    mean-value rate ``hint_rps`` and stops when ``high / low < 1 + REL_TOL``: ~4 simulations
    where halving from a 2x bracket takes ~6, which is most of the time per candidate.

    ``warm``: ``hint_rps`` is the analytic percentile model's rate (``sizing.tail_model``,
    fitted to this simulator), so the first probe sits just under it; when that probe's
    score puts the crossing within half a tolerance window, the second goes just across the
    window and two simulations close the bracket; otherwise the search goes on as above.
    (The runs' searches of the typical and the 1,200-candidate bench scenarios: 3.2 and 3.6
    probes each, from 3.9 and 4.2 with a fixed step across the window and no prior slope.)
    """
    probes: list[Probe] = []
    floor_rps = hint_rps / MAX_STEP_DOWN if hint_rps > 0 else upper_rps * 1e-3
    lo: Probe | None = None
    hi: Probe | None = None
    start = WARM_START_SHARE if warm else START_OVER_MEAN_VALUE
    x = min(hint_rps * start, upper_rps) if hint_rps > 0 else upper_rps / 4
    while len(probes) < MAX_PROBES:
        p = replica.probe(x)
        probes.append(p)
        if p.meets:
            lo = p
        else:
            hi = p
        if lo is not None and lo.rate_rps >= upper_rps:
            break  # the ceiling itself meets the SLO
        if lo is not None and hi is not None and hi.rate_rps / lo.rate_rps <= 1 + REL_TOL:
            break
        if warm and len(probes) == 1 and _within_half_window(p):
            step_factor = (1 + REL_TOL) / 1.002  # a hair inside the window: one verdict closes
            x = min(x * step_factor, upper_rps) if p.meets else x / step_factor
            continue
        x = _next_rate(lo, hi, probes, upper_rps, floor_rps)
        if x is None:
            break  # failing down near an idle replica: no rate meets the SLO
    rate = lo.rate_rps if lo is not None else 0.0
    high = hi.rate_rps if hi is not None else upper_rps
    binding = "throughput" if hi is None else _binding(hi, replica.slo)
    return RateFound(rate, rate, high, upper_rps, tuple(probes), binding)


def _within_half_window(p: Probe) -> bool:
    """Whether ``p``'s score puts the crossing within half a tolerance window of its rate
    (at ``PRIOR_SLOPE``): then one step across the window closes the bracket; farther, the
    estimate places the next probe (a warm start's probe at score 1.19 is ~16 % off)."""
    return p.score > 0 and abs(math.log(p.score)) <= PRIOR_SLOPE * math.log(1 + REL_TOL) / 2


def _next_rate(lo, hi, probes, upper_rps: float, floor_rps: float) -> float | None:
    """The next rate to simulate (see ``max_rate_rps``), or None to give up."""
    estimate = _estimate(probes)
    window = 1 + REL_TOL
    if lo is None:  # everything failed so far: step down (at most 4x a probe) to the floor
        at_floor = hi.rate_rps <= floor_rps * (1 + 1e-9)
        # give up when the secant says no rate down to the floor meets and the probe's
        # distance means something: its queue is stable (an overloaded probe's distance is a
        # growing queue) and it is far from the SLO (near it the score can be flat in rate)
        stable = hi.ttft_growth <= OVERLOAD_GROWTH
        far = hi.score > NEAR_SLO_SCORE
        hopeless = estimate is not None and estimate < floor_rps and stable and far
        if at_floor or hopeless:
            return None
        guess = estimate / window if estimate else hi.rate_rps / 4
        return min(max(guess, hi.rate_rps / 4, floor_rps), hi.rate_rps / 1.25)
    if hi is None:  # everything met so far: step up (at most 4x a probe) to the ceiling
        guess = estimate * window if estimate else lo.rate_rps * 2
        return min(max(guess, lo.rate_rps * 1.25), lo.rate_rps * 4, upper_rps)
    a, b = lo.rate_rps, hi.rate_rps
    same_side_twice = len(probes) > 2 and probes[-1].meets == probes[-2].meets
    # an estimate just past an end (within a window) puts the crossing at that end: the
    # probe a hair inside the window from it closes the bracket; one farther out is noise
    inside = estimate is not None and a / window < estimate < b * window
    if not inside or (same_side_twice and b / a > 1.5):
        estimate = math.sqrt(a * b)
    edge = 1.002  # stay a hair inside the window so the stop test passes
    if estimate / a < window:
        return a * window / edge  # a failure here closes the bracket
    if b / estimate < window:
        return b / window * edge  # a success here closes the bracket
    return estimate


def upper_rps(c, isl_mean: float, osl_mean: float) -> float:
    """The closed-loop request rate at the largest batch that fits (req/s): no open-loop
    rate above a replica's saturation throughput is sustainable, whatever a finite
    simulation says."""
    fit = fit_memory(c, np.array([isl_mean + osl_mean]))
    op = closed_loop(c, fit, isl_mean, osl_mean, np.nan)
    return UPPER_OVER_MAX_THROUGHPUT * float(op.requests_per_s[0])
