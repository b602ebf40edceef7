"""Tail-latency sizing of one candidate with the discrete-event simulator (no Django here).

The mean-value chain (``sizing.chain.plan``) sizes replicas from an operating point where the
*mean* TTFT and TPOT meet the SLO; the SLO is stated at a percentile with a goodput target.
Here one candidate's replica is simulated (open-loop Poisson arrivals at the scenario's length
distributions, prefix cache included) to find the highest request rate per replica whose
TTFT/TPOT percentiles and goodput meet the SLO, by bisection in log rate; that rate sets the
serving replicas through the same headroom and cost formulas as the chain, and a second
simulation at the fleet's per-replica peak load gives the p50/p95/p99 that are saved.

Every simulation of a candidate uses one seed derived from its key (common random numbers:
``meets(rate)`` is monotone in practice and a rerun reproduces the numbers exactly).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass

import numpy as np

from planner import runner
from planner import snapshot as snap
from sizing import breakeven as be
from sizing import cost, headroom
from sizing.chain import BreakEvenResult, candidate_arrays
from sizing.derivation import q, step
from sizing.memory import fit_memory
from sizing.operating import closed_loop
from sizing.simulate import (
    EXACT_BELOW,
    GRID_PER_OCTAVE,
    PREFILL_GRID_PER_OCTAVE,
    LengthDist,
    SimResult,
    StepTimer,
    Workload,
    engine_for,
    lengths_from_mean_p95,
    meets_slo,
    simulate,
)

#: Requests per simulation: the p99 of 1,350 measured requests rests on ~14 samples, enough to
#: rank candidates while one bisection stays near a second.
SIM_REQUESTS = 1500
WARMUP_SHARE = 0.1  # first 10 % of requests fill the engine and are left out of statistics
REL_TOL = 0.05  # bisection stops when high / low < 1.05 (5 % on the rate, ~1 replica in 20)
UPPER_OVER_MAX_THROUGHPUT = 1.2  # rates above the closed-loop max throughput only queue
MAX_PROBES = 12  # simulations per search at most (a safeguard; ~4 are typical)
MAX_STEP_DOWN = 8  # below 1/8 of the mean-value rate a replica is near idle: give up there
#: First probe, as a share of the mean-value rate: the simulated rate came out 0.3-1.1x of
#: it on the examples (median ~0.7): tails and goodput cost capacity that means hide.
START_OVER_MEAN_VALUE = 0.7
PER_GPU = 1  # candidates simulated per GPU SKU (the mean-value best; the re-pick uses it)
MAX_SIMULATED = 8  # per run: bounds the aggregate phase to ~8 s on one worker
#: Fields a tails result overwrites; their mean-value values are kept in the derivation so a
#: reviewer sees both and a rerun can select the same candidates.
MEAN_VALUE_FIELDS = (
    "throughput_tok_s",
    "replicas",
    "gpus",
    "usd_per_hour",
    "usd_per_month",
    "usd_per_mtok",
    "tokens_per_usd",
    "headroom",
    "binding_constraint",
    "meets_slo",
)
COST_FIELDS = ("usd_per_hour", "usd_per_month", "usd_per_mtok", "tokens_per_usd")


# ============================================================================ selection
def mean_value_view(values: dict) -> dict:
    """The ranking fields at the mean-value model: the stored ones, or those a tails pass
    saved in the derivation before it overwrote them."""
    saved = (values.get("derivation") or {}).get("simulated", {}).get("mean_value")
    return {**values, **saved} if saved else values


def is_simulated(values: dict) -> bool:
    """A tails pass already ran (or failed) for this row: never apply it twice."""
    return "simulated" in (values.get("derivation") or {})


def pick_for_simulation(
    rows: list[dict], per_gpu: int = PER_GPU, cap: int = MAX_SIMULATED
) -> list[str]:
    """Candidate keys to simulate, in mean-value rank order: per GPU SKU the ``per_gpu``
    best that fit and meet the SLO at the mean, or the best-fitting one when none does;
    at most ``cap`` in all (GPUs in order of their best candidate, so the cap drops the
    least competitive SKUs)."""
    views = sorted((mean_value_view(r) for r in rows), key=runner.rank_key)
    chosen: dict[str, list[str]] = {}
    fallback: dict[str, str] = {}
    for v in views:
        if not v["fits"]:
            continue
        fallback.setdefault(v["gpu_slug"], v["candidate_key"])
        if v["meets_slo"] and len(chosen.setdefault(v["gpu_slug"], [])) < per_gpu:
            chosen[v["gpu_slug"]].append(v["candidate_key"])
    picked: list[str] = []
    for slug in dict.fromkeys(v["gpu_slug"] for v in views):
        keys = chosen.get(slug) or ([fallback[slug]] if slug in fallback else [])
        picked += keys
    return picked[:cap]


def latency_summary(ttft_ms_p95, tpot_ms_p95, derivation: dict) -> dict:
    """Tail latencies of a recommendation and where its sizing came from: ``simulated``
    (replicas from the simulated SLO percentile) or ``mean-value`` (the analytic chain)."""
    simulated = (derivation or {}).get("simulated") or {}
    if "max_rate_rps" not in simulated:  # not simulated, or the simulation failed
        return {"latency_source": "mean-value", "ttft_ms_p95": None, "tpot_ms_p95": None}
    return {
        "latency_source": "simulated",
        "ttft_ms_p95": ttft_ms_p95,
        "tpot_ms_p95": tpot_ms_p95,
        "slo_percentile": simulated.get("slo_percentile"),
        "ttft_ms_at_slo_percentile": simulated.get("ttft_ms_at_percentile"),
        "tpot_ms_at_slo_percentile": simulated.get("tpot_ms_at_percentile"),
        "goodput": simulated.get("goodput"),
    }


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


@dataclass(frozen=True)
class RateFound:
    rate_rps: float  # 0 when no rate meets the SLO
    low_rps: float
    high_rps: float
    upper_rps: float
    probes: tuple[Probe, ...]
    binding: str  # what fails just above the rate: ttft, tpot or throughput


class RunLengthStepTimer(StepTimer):
    """``StepTimer`` with the same grid and memo that remembers the last cell it served.

    At low load a replica decodes alone for hundreds of steps while the context grows by one
    token a step, so consecutive steps fall in the same 1/64-octave cell; the parent
    recomputes three logarithm keys per step (~1.7 us, half the simulation's time there).
    Here a step with the same prefill inputs and a context strictly inside the last cell's
    interval reuses that row; anything else goes through the parent, so every step time is
    the one the parent returns (a test checks runs are identical).
    """

    def __init__(self, c, max_decodes: int):
        super().__init__(c, max_decodes)
        self._last: tuple[float, float, float, float, list[float]] | None = None

    def step_s(self, n_dec: int, ctx_mean: float, pre: float, p_eq: float) -> float:
        last = self._last
        if last is not None and pre == last[0] and p_eq == last[1] and last[2] < ctx_mean < last[3]:
            return last[4][n_dec]
        value = super().step_s(n_dec, ctx_mean, pre, p_eq)
        key = (
            self._key(ctx_mean, GRID_PER_OCTAVE),
            self._key(pre, PREFILL_GRID_PER_OCTAVE),
            self._key(p_eq, PREFILL_GRID_PER_OCTAVE),
        )
        low, high = _context_cell(key[0])
        self._last = (pre, p_eq, low, high, self.rows[key])
        return value


def _context_cell(k: int) -> tuple[float, float]:
    """Open interval of contexts that surely map to key ``k`` (a hair inside the rounding
    edges, where float ties could go either way)."""
    if k <= EXACT_BELOW:
        return k - 0.49, min(k + 0.49, EXACT_BELOW)
    m = k - EXACT_BELOW - 1
    low = max(2.0 ** ((m - 0.49) / GRID_PER_OCTAVE), EXACT_BELOW + 1e-9)
    return low, 2.0 ** ((m + 0.49) / GRID_PER_OCTAVE)


class _Replica:
    """One candidate's replica with its workload: ``run(rate)`` simulates it (shared engine
    limits and step-time memo across the search, which is most of the cost saved)."""

    def __init__(self, c, isl: LengthDist, osl: LengthDist, traffic, slo, seed: int):
        self.c, self.isl, self.osl, self.slo, self.seed = c, isl, osl, slo, seed
        self.traffic = traffic
        self.engine = engine_for(c, isl.mean, osl.mean)
        self.timer = RunLengthStepTimer(c, self.engine.max_num_seqs)

    def run(self, rate_rps: float) -> SimResult:
        workload = Workload(
            self.isl,
            self.osl,
            requests=SIM_REQUESTS,
            rate_rps=rate_rps,
            shared_prefix_tokens=self.traffic.shared_prefix_tokens,
            prefix_hit_rate=self.traffic.prefix_hit_rate,
            warmup_requests=int(SIM_REQUESTS * WARMUP_SHARE),
            seed=self.seed,
        )
        return simulate(self.c, workload, self.engine, self.timer)

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
        return Probe(
            rate_rps=rate_rps,
            meets=meets_slo(r, s.ttft_ms, s.tpot_ms, s.percentile, s.goodput_target),
            score=score,
            ttft_ms_at_percentile=ttft,
            tpot_ms_at_percentile=tpot,
            goodput=r.goodput(s.ttft_ms / 1e3, s.tpot_ms / 1e3),
            ttft_miss_share=float(np.mean(ttft_ratio > 1)),
            tpot_miss_share=float(np.mean(tpot_ratio > 1)),
        )


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
    the SLO (a secant: they bracket the knee best); one probe assumes score ~ rate. None when
    the scores do not rise with the rate (no slope to follow)."""
    near = sorted(
        {p.rate_rps: p for p in probes if p.score > 0}.values(),
        key=lambda p: abs(math.log(p.score)),
    )
    if not near:
        return None
    if len(near) == 1:
        return near[0].rate_rps / near[0].score
    a, b = near[0], near[1]
    slope = math.log(b.score / a.score) / math.log(b.rate_rps / a.rate_rps)
    if not slope > 0.05:
        return None
    return a.rate_rps * math.exp(-math.log(a.score) / slope)


def max_rate_rps(replica: _Replica, hint_rps: float, upper_rps: float) -> RateFound:
    """Highest rate meeting the SLO percentiles and goodput (req/s per replica).

    A safeguarded bisection in log rate: each probe's distance from the SLO (``score``)
    places the next one where a secant through the probes nearest the SLO crosses it; once
    that estimate sits within the tolerance of a bracket end, the probe goes to the far edge
    of the tolerance window, so one more verdict closes the bracket; plain halving takes over
    when the secant says nothing useful. It starts at ``START_OVER_MEAN_VALUE`` of the
    mean-value rate ``hint_rps`` and stops when ``high / low < 1 + REL_TOL``: ~4 simulations
    where halving from a 2x bracket takes ~6, which is most of the time per candidate.
    """
    probes: list[Probe] = []
    floor_rps = hint_rps / MAX_STEP_DOWN if hint_rps > 0 else upper_rps * 1e-3
    lo: Probe | None = None
    hi: Probe | None = None
    x = min(hint_rps * START_OVER_MEAN_VALUE, upper_rps) if hint_rps > 0 else upper_rps / 4
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
        x = _next_rate(lo, hi, probes, upper_rps, floor_rps)
        if x is None:
            break  # failing down near an idle replica: no rate meets the SLO
    rate = lo.rate_rps if lo is not None else 0.0
    high = hi.rate_rps if hi is not None else upper_rps
    binding = "throughput" if hi is None else _binding(hi, replica.slo)
    return RateFound(rate, rate, high, upper_rps, tuple(probes), binding)


def _next_rate(lo, hi, probes, upper_rps: float, floor_rps: float) -> float | None:
    """The next rate to simulate (see ``max_rate_rps``), or None to give up."""
    estimate = _estimate(probes)
    window = 1 + REL_TOL
    if lo is None:  # everything failed so far: step down (at most 4x a probe) to the floor
        if hi.rate_rps <= floor_rps * (1 + 1e-9) or (estimate is not None and estimate < floor_rps):
            return None
        guess = estimate / window if estimate else hi.rate_rps / 4
        return min(max(guess, hi.rate_rps / 4, floor_rps), hi.rate_rps / 1.25)
    if hi is None:  # everything met so far: step up (at most 4x a probe) to the ceiling
        guess = estimate * window if estimate else lo.rate_rps * 2
        return min(max(guess, lo.rate_rps * 1.25), lo.rate_rps * 4, upper_rps)
    a, b = lo.rate_rps, hi.rate_rps
    same_side_twice = len(probes) > 2 and probes[-1].meets == probes[-2].meets
    if estimate is None or not a < estimate < b or (same_side_twice and b / a > 1.5):
        estimate = math.sqrt(a * b)
    edge = 1.002  # stay a hair inside the window so the stop test passes
    if estimate / a < window:
        return a * window / edge  # a failure here closes the bracket
    if b / estimate < window:
        return b / window * edge  # a success here closes the bracket
    return estimate


def _upper_rps(c, isl_mean: float, osl_mean: float) -> float:
    """1.2x the closed-loop request rate at the largest batch that fits (req/s)."""
    fit = fit_memory(c, np.array([isl_mean + osl_mean]))
    op = closed_loop(c, fit, isl_mean, osl_mean, np.nan)
    return UPPER_OVER_MAX_THROUGHPUT * float(op.requests_per_s[0])


# ============================================================================ the row
def simulate_tails(inputs: dict, candidate_index: int, mean_value_row: dict) -> dict:
    """CandidateResult field updates for one candidate sized on its simulated tails.

    ``mean_value_row`` holds the row's values from the mean-value chain (``runner``'s
    ``result_values``); what is overwritten is kept in ``derivation["simulated"]
    ["mean_value"]``. Raises on a simulation error (see ``simulate_tails_or_reason``).
    """
    candidate = inputs["candidates"][candidate_index]
    [core] = snap.candidates(inputs, [candidate_index])
    c = candidate_arrays([core])
    traffic, slo, policy = snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs)
    isl = lengths_from_mean_p95(traffic.prompt_tokens_mean, traffic.prompt_tokens_p95)
    osl = lengths_from_mean_p95(traffic.output_tokens_mean, traffic.output_tokens_p95)
    seed = seed_for(candidate["key"])
    replica = _Replica(c, isl, osl, traffic, slo, seed)
    hint_rps = mean_value_row["derivation"].get("requests_per_s_per_replica") or 0.0
    found = max_rate_rps(replica, hint_rps, _upper_rps(c, isl.mean, osl.mean))

    mean_serving = mean_value_row["derivation"].get("serving_replicas") or 1
    if found.rate_rps > 0:
        serving = int(
            headroom.serving_replicas(
                traffic.peak_rps, found.rate_rps, policy.target_utilization, policy.burst_factor
            )
        )
    else:  # no rate meets the SLO: keep the mean-value fleet, simulate its load, say so
        serving = int(mean_serving)
    load_rps = traffic.peak_rps * policy.burst_factor / max(serving, 1)
    at_load = replica.run(load_rps)
    ok_at_load = meets_slo(at_load, slo.ttft_ms, slo.tpot_ms, slo.percentile, slo.goodput_target)
    meets = bool(found.rate_rps > 0 and ok_at_load)

    gpu = inputs["gpus"][candidate["gpu"]]
    price = float(gpu.get("usd_per_gpu_hour") or 0.0)
    capacity_rps = found.rate_rps if found.rate_rps > 0 else hint_rps
    fleet = _fleet(traffic, policy, serving, capacity_rps, int(c.gpus_per_instance[0]), price)
    ttft, tpot = at_load.percentiles_ms("ttft"), at_load.percentiles_ms("tpot")
    ttft_pct, tpot_pct = _at_percentile_ms(at_load, slo.percentile)
    goodput = at_load.goodput(slo.ttft_ms / 1e3, slo.tpot_ms / 1e3)

    updates = {
        "throughput_tok_s": runner.finite(capacity_rps * osl.mean),
        "replicas": fleet["replicas"],
        "gpus": fleet["gpus"],
        "ttft_ms_p50": runner.finite(ttft["p50"]),
        "ttft_ms_p95": runner.finite(ttft["p95"]),
        "ttft_ms_p99": runner.finite(ttft["p99"]),
        "tpot_ms_p50": runner.finite(tpot["p50"]),
        "tpot_ms_p95": runner.finite(tpot["p95"]),
        "tpot_ms_p99": runner.finite(tpot["p99"]),
        "meets_slo": meets,
        "binding_constraint": found.binding,
        "headroom": runner.finite(1 - fleet["utilization"]),
        **{k: (runner.finite(fleet[k]) if price > 0 else None) for k in COST_FIELDS},
    }
    block = {
        "isl_tokens": _dist_json(isl),
        "osl_tokens": _dist_json(osl),
        "shared_prefix_tokens": traffic.shared_prefix_tokens,
        "prefix_hit_rate": traffic.prefix_hit_rate,
        "arrivals": "poisson (open loop)",
        "requests_per_simulation": SIM_REQUESTS,
        "warmup_requests": int(SIM_REQUESTS * WARMUP_SHARE),
        "seed": seed,
        "rel_tol": REL_TOL,
        "slo_percentile": slo.percentile,
        "goodput_target": slo.goodput_target,
        "upper_rps": found.upper_rps,
        "mean_value_rps": hint_rps,
        "max_rate_rps": found.rate_rps,
        "bracket_rps": [found.low_rps, found.high_rps],
        "simulations": len(found.probes) + 1,
        "probes": [dataclasses.asdict(p) for p in found.probes],
        "serving_replicas": serving,
        "mean_value_serving_replicas": mean_serving,
        "load_rps_per_replica": load_rps,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "ttft_ms_at_percentile": ttft_pct,
        "tpot_ms_at_percentile": tpot_pct,
        "goodput": goodput,
        "preemptions": int(at_load.preemptions),
        "meets_slo": meets,
        "binding": found.binding,
        "mean_value": {k: mean_value_row[k] for k in MEAN_VALUE_FIELDS},
        "note": _note(found, meets, serving, mean_serving),
    }
    derivation = dict(mean_value_row["derivation"])
    derivation["steps"] = list(derivation.get("steps", [])) + _steps(
        traffic, slo, policy, found, block, fleet, price
    )
    derivation["simulated"] = block
    derivation["serving_replicas"] = serving
    derivation["utilization"] = fleet["utilization"]
    derivation["requests_per_s_per_replica"] = capacity_rps
    if price > 0 and derivation.get("breakeven") is not None:
        derivation["breakeven"] = _breakeven(inputs, traffic, policy, c, capacity_rps, fleet)
    updates["derivation"] = runner.clean_json(derivation)
    return updates


def simulate_tails_or_reason(inputs: dict, candidate_index: int, mean_value_row: dict) -> dict:
    """``simulate_tails``, or on any error only a derivation recording why: the row keeps its
    mean-value numbers and the run goes on (a simulator bug must not fail a sizing run)."""
    try:
        return simulate_tails(inputs, candidate_index, mean_value_row)
    except Exception as exc:  # noqa: BLE001 - any failure degrades to the mean-value row
        derivation = dict(mean_value_row["derivation"])
        derivation["simulated"] = {
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "note": "tail simulation failed: replicas and costs are the mean-value model's",
        }
        return {"derivation": runner.clean_json(derivation)}


def _fleet(traffic, policy, serving: int, capacity_rps: float, gpus_per_replica: int, price):
    """Replicas, GPUs, utilization and money from the core's headroom and cost formulas."""
    total = int(headroom.total_replicas(serving, policy.spare_replicas, policy.warm_pool_replicas))
    util = float(headroom.utilization(traffic.mean_rps, total, capacity_rps))
    usd_h = float(cost.usd_per_hour(total, gpus_per_replica, price))
    capacity_tok_s = total * capacity_rps * traffic.output_tokens_mean
    usd_mtok = float(cost.usd_per_mtok(usd_h, capacity_tok_s, util))
    return {
        "serving": serving,
        "replicas": total,
        "gpus": total * gpus_per_replica,
        "utilization": util,
        "usd_per_hour": usd_h,
        "usd_per_month": float(cost.usd_per_month(usd_h)),
        "usd_per_mtok": usd_mtok,
        "tokens_per_usd": float(cost.tokens_per_usd(usd_mtok)),
        "capacity_tok_s": capacity_tok_s,
    }


def _breakeven(inputs, traffic, policy, c, capacity_rps: float, fleet: dict) -> dict | None:
    """The chain's break-even against the API, redone at the simulated capacity."""
    api = snap.api_price(inputs)
    if api is None:
        return None
    api_p = be.api_usd_per_token(api, traffic)
    isl, osl = traffic.prompt_tokens_mean, traffic.output_tokens_mean
    gpi, price = float(c.gpus_per_instance[0]), float(c.usd_per_gpu_hour[0])
    k_month = gpi * price * cost.HOURS_PER_MONTH
    fixed = policy.spare_replicas + policy.warm_pool_replicas
    peak_to_mean = traffic.peak_rps / traffic.mean_rps if traffic.mean_rps > 0 else 1.0
    v_r = (
        capacity_rps
        * policy.target_utilization
        * (isl + osl)
        * be.SECONDS_PER_MONTH
        / (peak_to_mean * policy.burst_factor)
    )
    v_traffic = traffic.mean_rps * (isl + osl) * be.SECONDS_PER_MONTH
    result = BreakEvenResult(
        api_usd_per_mtok=api_p * 1e6,
        api_usd_per_month=float(be.api_usd_per_month(v_traffic, api_p)),
        selfhost_usd_per_month=fleet["usd_per_month"],
        crossing_tokens_per_month=float(be.crossing_tokens_per_month(v_r, k_month, fixed, api_p)),
        traffic_tokens_per_month=v_traffic,
        utilization_to_win=float(
            be.utilization_to_win(gpi * price, capacity_rps * (isl + osl), api_p)
        ),
        hybrid=be.hybrid_split(
            be.daily_profile_rps(traffic),
            capacity_rps,
            policy.target_utilization,
            k_month,
            fixed,
            isl + osl,
            api_p,
        ),
    )
    return runner.clean_json(dataclasses.asdict(result))


def _dist_json(d: LengthDist) -> dict:
    return {"kind": d.kind, "mean": d.mean, "p95": d.p95}


def _note(found: RateFound, meets: bool, serving: int, mean_serving: int) -> str:
    if found.rate_rps <= 0:
        return (
            "no request rate meets the SLO percentiles and goodput in simulation: the "
            "mean-value fleet is kept and marked as missing the SLO"
        )
    change = "more" if serving > mean_serving else "fewer" if serving < mean_serving else "the same"
    text = f"sized on simulated tails: {serving} serving replicas ({change} than the mean-value"
    text += f" {mean_serving})"
    if not meets:
        text += "; the simulation at the fleet's peak load still misses the SLO"
    return text


def _steps(traffic, slo, policy, found: RateFound, block: dict, fleet: dict, price) -> list:
    pct = f"p{slo.percentile:g}"
    steps = [
        step(
            "simulated_max_rate_rps",
            f"max rate with {pct} TTFT <= SLO, {pct} TPOT <= SLO, goodput >= target "
            "(bisection in log rate, Poisson arrivals)",
            [
                q("ttft_slo", slo.ttft_ms, "ms"),
                q("tpot_slo", slo.tpot_ms, "ms"),
                q("percentile", slo.percentile, ""),
                q("goodput_target", slo.goodput_target, ""),
                q("requests per simulation", SIM_REQUESTS, "requests"),
                q("seed", block["seed"], ""),
                q("simulations", len(found.probes), ""),
                q("upper bound", found.upper_rps, "req/s per replica"),
                q("mean-value X", block["mean_value_rps"], "req/s per replica"),
            ],
            found.rate_rps,
            "req/s per replica",
            f"bracket {found.low_rps:.4g}..{found.high_rps:.4g} req/s; binding: {found.binding}",
        ),
        step(
            "simulated_serving_replicas",
            "ceil(peak_rps * burst / (X_sim * target_utilization))",
            [
                q("peak_rps", traffic.peak_rps, "req/s"),
                q("burst", policy.burst_factor, ""),
                q("X_sim", found.rate_rps, "req/s per replica"),
                q("target_utilization", policy.target_utilization, ""),
            ],
            fleet["serving"],
            "replicas",
            block["note"],
        ),
        step(
            "simulated_replicas",
            "serving + spare (N+k) + warm pool",
            [
                q("serving", fleet["serving"], "replicas"),
                q("spare", policy.spare_replicas, "replicas"),
                q("warm_pool", policy.warm_pool_replicas, "replicas"),
            ],
            fleet["replicas"],
            "replicas",
        ),
        step(
            "simulated_load_rps_per_replica",
            "peak_rps * burst / serving",
            [
                q("peak_rps", traffic.peak_rps, "req/s"),
                q("burst", policy.burst_factor, ""),
                q("serving", fleet["serving"], "replicas"),
            ],
            block["load_rps_per_replica"],
            "req/s per replica",
            "the percentiles below are simulated at this load (one more simulation)",
        ),
    ]
    for name in ("ttft", "tpot"):
        pcts = block[f"{name}_ms"]
        steps.append(
            step(
                f"simulated_{name}_ms_{pct}",
                f"{pct} of simulated {name.upper()} at the peak load per replica",
                [q(k, v, "ms") for k, v in pcts.items()],
                block[f"{name}_ms_at_percentile"],
                "ms",
            )
        )
    steps.append(
        step(
            "simulated_goodput",
            "share of requests with TTFT <= SLO and TPOT <= SLO",
            [q("goodput_target", slo.goodput_target, "")],
            block["goodput"],
            "",
            "meets the SLO" if block["meets_slo"] else "misses the SLO",
        )
    )
    if price > 0:
        steps += [
            step(
                "simulated_usd_per_month",
                "replicas * gpus_per_replica * usd_per_gpu_hour * 730",
                [q("replicas", fleet["replicas"], ""), q("usd_per_gpu_hour", price, "$/GPU-h")],
                fleet["usd_per_month"],
                "$/month",
            ),
            step(
                "simulated_usd_per_mtok",
                "usd_per_hour / 3600 / (replicas * X_sim * osl * utilization) * 1e6",
                [
                    q("usd_per_hour", fleet["usd_per_hour"], "$/h"),
                    q("capacity", fleet["capacity_tok_s"], "output tokens/s"),
                    q("utilization", fleet["utilization"], ""),
                ],
                fleet["usd_per_mtok"],
                "$/M output tokens",
            ),
        ]
    return [s.as_dict() for s in steps]
