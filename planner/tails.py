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
from planner.sizing import breakeven as be
from planner.sizing import cost, headroom
from planner.sizing.chain import BreakEvenResult, candidate_arrays
from planner.sizing.derivation import q, step
from planner.sizing.memory import fit_memory
from planner.sizing.operating import closed_loop
from planner.sizing.simulate import (
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
PER_GPU = 2  # candidates simulated per GPU SKU
MAX_SIMULATED = 12  # per run: bounds the aggregate phase to ~12 s
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


# ============================================================================ simulation
def seed_for(candidate_key: str) -> int:
    """A stable seed per candidate (``hash()`` is salted per process; crc32 is not)."""
    return zlib.crc32(candidate_key.encode())


@dataclass(frozen=True)
class Probe:
    rate_rps: float
    meets: bool
    ttft_ms_at_percentile: float
    tpot_ms_at_percentile: float
    goodput: float


@dataclass(frozen=True)
class RateFound:
    rate_rps: float  # 0 when no rate meets the SLO
    low_rps: float
    high_rps: float
    upper_rps: float
    probes: tuple[Probe, ...]
    binding: str  # what fails just above the rate: ttft, tpot or throughput


class _Replica:
    """One candidate's replica with its workload: ``run(rate)`` simulates it (shared engine
    limits and step-time memo across the bisection)."""

    def __init__(self, c, isl: LengthDist, osl: LengthDist, traffic, slo, seed: int):
        self.c, self.isl, self.osl, self.slo, self.seed = c, isl, osl, slo, seed
        self.traffic = traffic
        self.engine = engine_for(c, isl.mean, osl.mean)
        self.timer = StepTimer(c, self.engine.max_num_seqs)

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

    def probe(self, rate_rps: float) -> tuple[Probe, SimResult]:
        r = self.run(rate_rps)
        s = self.slo
        ok = meets_slo(r, s.ttft_ms, s.tpot_ms, s.percentile, s.goodput_target)
        ttft, tpot = _at_percentile_ms(r, s.percentile)
        return Probe(rate_rps, ok, ttft, tpot, r.goodput(s.ttft_ms / 1e3, s.tpot_ms / 1e3)), r


def _at_percentile_ms(r: SimResult, percentile: float) -> tuple[float, float]:
    """TTFT and TPOT (ms) at ``percentile`` over measured requests (TPOT of 1 token is 0,
    as ``meets_slo`` counts it)."""
    ttft = r.ttft_s[r.measured] * 1e3
    tpot = np.nan_to_num(r.tpot_s[r.measured]) * 1e3
    if ttft.size == 0:
        return math.nan, math.nan
    return float(np.percentile(ttft, percentile)), float(np.percentile(tpot, percentile))


def _binding(fail: Probe | None, slo) -> str:
    """Which SLO the first failing rate broke hardest (goodput counts as the worse ratio)."""
    if fail is None:
        return "throughput"
    ttft_ratio = fail.ttft_ms_at_percentile / slo.ttft_ms
    tpot_ratio = fail.tpot_ms_at_percentile / slo.tpot_ms
    return "ttft" if ttft_ratio >= tpot_ratio else "tpot"


def max_rate_rps(replica: _Replica, hint_rps: float, upper_rps: float) -> RateFound:
    """Highest rate meeting the SLO percentiles and goodput, bracketed from the mean-value
    rate ``hint_rps`` (the answer is usually within 2x of it, which saves the 16x search of
    ``simulate.max_rate_for_slo``), then bisected in log rate to ``REL_TOL``."""
    probes: list[Probe] = []

    def meets(rate: float) -> bool:
        p, _ = replica.probe(rate)
        probes.append(p)
        return p.meets

    lo, hi = 0.0, upper_rps
    x = min(hint_rps, upper_rps) if hint_rps > 0 else upper_rps / 4
    if meets(x):
        lo = x
        while lo < upper_rps:  # step up 2x until a rate fails or the ceiling holds
            x = min(2 * lo, upper_rps)
            if not meets(x):
                hi = x
                break
            lo = x
        else:
            hi = upper_rps
    else:
        hi = x
        while hi > upper_rps * 1e-6:  # step down 4x until a rate meets
            x = hi / 4
            if meets(x):
                lo = x
                break
            hi = x
    while lo > 0 and hi / lo > 1 + REL_TOL:
        mid = math.sqrt(lo * hi)
        if meets(mid):
            lo = mid
        else:
            hi = mid
    failed = [p for p in probes if not p.meets and p.rate_rps >= hi * (1 - 1e-12)]
    first_fail = min(failed, key=lambda p: p.rate_rps) if failed else None
    binding = "throughput" if lo >= upper_rps else _binding(first_fail, replica.slo)
    return RateFound(lo, lo, hi, upper_rps, tuple(probes), binding)


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
    change = (
        "more" if serving > mean_serving else "fewer" if serving < mean_serving else "the same"
    )
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
