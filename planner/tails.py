"""Size one candidate on simulated tail latencies (no Django here).

The search (``sizing.tail_search.max_rate_rps``, warm-started at the analytic percentile
model's rate) finds the highest Poisson rate per replica whose TTFT/TPOT at the SLO
percentile and goodput meet the SLO; one more simulation at the fleet's peak load per replica
gives the p50/p95/p99 shown. That capacity re-enters the chain at the headroom stage
(``sizing.chain.plan(capacity=...)``), so replicas, cost, break-even and the band are the
same functions for simulated and analytic rows.

The answer depends only on the candidate's inputs: the seed is derived from them (not from
its key or its neighbours), so the same configuration under another name, in another run or
through another door simulates identically; ``SimulationCache`` (see ``planner.pipeline``)
stores the search by the same key.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import zlib

import numpy as np

from planner import runner
from planner import snapshot as snap
from sizing import headroom, vision
from sizing.candidates import expert_precision_of
from sizing.chain import Capacity, analytic_choices, candidate_arrays, percentile_key
from sizing.derivation import q, step
from sizing.simulate import LengthDist, lengths_from_mean_p95, meets_slo
from sizing.tail_search import (
    REL_TOL,
    SIM_REQUESTS,
    WARMUP_SHARE,
    RateFound,
    Replica,
    max_rate_rps,
    upper_rps,
)

#: Bumped whenever the simulator, the search or their constants change meaning, so cached
#: searches from before are never reused.
SIMULATION_VERSION = 5  # 4: no admission in a step that preempted; 5: chunks whole (vLLM V1)
QUANTILES = (50, 95, 99)


def cache_key(inputs: dict, candidate_index: int) -> str:
    """SHA-256 of everything a simulation depends on: the candidate's model, GPU, precision,
    parallelism, engine and calibration, and the traffic, SLO and policy (not prices)."""
    [core] = snap.candidates(inputs, [candidate_index])
    # the experts as sized (a blank one is the published checkpoint's), so a snapshot naming
    # gpt-oss's mxfp4 and one leaving it blank share their searches
    expert = expert_precision_of(core.model, core.expert_precision)
    payload = {
        "version": SIMULATION_VERSION,
        "model": dataclasses.asdict(core.model),
        "gpu": {**dataclasses.asdict(core.gpu), "usd_per_gpu_hour": None, "name": None},
        "precision": [core.weight_precision, core.kv_precision]
        + [p for p in (expert, core.embedding_precision) if p],
        "parallelism": dataclasses.asdict(core.parallelism),
        "engine": dataclasses.asdict(core.engine),
        "calibration": dataclasses.asdict(core.calibration),
        "traffic": inputs["traffic"],
        "slo": inputs["slo"],
        "policy": inputs["policy"],
    }
    payload["model"]["name"] = None  # an imported copy of a catalog model is the same model
    if not core.calibration.first_token_decode_steps:  # disaggregated only: keys made before
        del payload["calibration"]["first_token_decode_steps"]  # it existed stay valid
    if core.engine.reserves_output:  # a change of the simulator's meaning for these keys only
        payload["kv_reserves_output"] = True
    if snap.is_disagg(inputs["candidates"][candidate_index]):  # (aggregated keys unchanged)
        payload["mode"] = "disagg"
        payload["disagg_fit"] = dataclasses.asdict(
            snap.disagg_fit(inputs, inputs["candidates"][candidate_index])
        )
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def seed_for(key: str) -> int:
    """A stable seed from the inputs' hash (``hash()`` is salted per process)."""
    return zlib.crc32(key.encode())


def simulated_candidate(inputs: dict, candidate_index: int, speculative: str):
    """The core candidate as simulated: without speculative decoding when the analytic plan
    dropped it ("off")."""
    [core] = snap.candidates(inputs, [candidate_index])
    if speculative == "off":
        core = dataclasses.replace(core, engine=dataclasses.replace(core.engine, spec_method=""))
    return core


def search(inputs: dict, candidate_index: int, hint_rps: float, warm: bool, key: str) -> dict:
    """The simulated capacity of one candidate as plain JSON (what the cache stores).

    It runs at what the analytic plan settled on (``chain.analytic_choices``): the prefix-cache
    hit rate its routing policy reaches, and speculative decoding on or off."""
    traffic, slo, policy = snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs)
    [given] = snap.candidates(inputs, [candidate_index])
    hit_rate, speculative = traffic.prefix_hit_rate, ""
    if given.engine.spec_method or (given.engine.routing and traffic.shared_prefix_tokens > 0):
        hit_rate, speculative = analytic_choices(given, traffic, slo, policy)
    core = simulated_candidate(inputs, candidate_index, speculative)
    c = candidate_arrays([core])
    traffic = dataclasses.replace(traffic, prefix_hit_rate=hit_rate)
    if traffic.images_per_request > 0:  # the image tokens join the prompt, as in plan()
        traffic = vision.fold_images(traffic, vision.tokens_per_image(core.model, traffic))
        c = vision.with_images(c, traffic.image_tokens, traffic.prompt_tokens_mean)
    isl = lengths_from_mean_p95(traffic.prompt_tokens_mean, traffic.prompt_tokens_p95)
    osl = lengths_from_mean_p95(traffic.output_tokens_mean, traffic.output_tokens_p95)
    replica = Replica(c, isl, osl, traffic, slo, seed_for(key))
    # the saturation ceiling counts the prefix cache, as the simulation does (the simulator
    # pins and skips the prefix itself, so the replica's rows stay without it)
    cached = c.with_prefix(traffic.shared_prefix_tokens, traffic.prefix_hit_rate)
    ceiling = upper_rps(cached if traffic.prefix_hit_rate > 0 else c, isl.mean, osl.mean)
    found = max_rate_rps(replica, hint_rps, ceiling, warm=warm and hint_rps > 0)
    rate = found.rate_rps
    serving = (
        float(
            headroom.serving_replicas(
                traffic.peak_rps, rate, policy.target_utilization, policy.burst_factor
            )
        )
        if rate > 0
        else math.inf
    )
    # at the fleet's peak load per replica; without a feasible rate, at the lowest probe
    load = (
        traffic.peak_rps * policy.burst_factor / serving if rate > 0 else found.probes[-1].rate_rps
    )
    at_load = replica.run(load)
    quantiles = sorted({*QUANTILES, slo.percentile})
    latency = {
        name: {f"p{p:g}": _pct_ms(at_load, name, p) for p in quantiles} for name in ("ttft", "tpot")
    }
    ok = meets_slo(at_load, slo.ttft_ms, slo.tpot_ms, slo.percentile, slo.goodput_target)
    return {
        "key": key,
        "rate_rps": rate,
        "bracket_rps": [found.low_rps, found.high_rps],
        "upper_rps": found.upper_rps,
        "binding": found.binding,
        "hint_rps": hint_rps,
        "warm_start": bool(warm and hint_rps > 0),
        "probes": [dataclasses.asdict(p) for p in found.probes],
        "simulations": len(found.probes) + 1,
        "serving_replicas": serving if math.isfinite(serving) else None,
        "load_rps_per_replica": load,
        "latency_ms": latency,
        "goodput": at_load.goodput(slo.ttft_ms / 1e3, slo.tpot_ms / 1e3),
        "preemptions": int(at_load.preemptions),
        "meets_slo": bool(rate > 0 and ok),
        "isl_tokens": _dist_json(isl),
        "osl_tokens": _dist_json(osl),
        "requests_per_simulation": SIM_REQUESTS,
        "warmup_requests": int(SIM_REQUESTS * WARMUP_SHARE),
        "seed": seed_for(key),
        "rel_tol": REL_TOL,
        "note": _note(found, bool(rate > 0 and ok)),
        "prefix_hit_rate": hit_rate,
        "speculative": speculative,
    }


def _pct_ms(result, name: str, percentile: float) -> float | None:
    values = getattr(result, f"{name}_s")[result.measured]
    if name == "tpot":
        values = np.nan_to_num(values)  # one-token outputs have no TPOT: 0, as meets_slo counts
    if values.size == 0:
        return None
    return float(np.percentile(values, percentile) * 1e3)


def simulated_rows(inputs: dict, searches: list[tuple[int, dict]]) -> list[dict]:
    """Result rows from simulated capacities, one per ``(candidate index, search)``: the chain
    from the headroom stage on (``runner.chain_rows``: one call for the aggregated rows, one
    for the disaggregated), with the simulation's steps in each derivation."""
    indices = [i for i, _ in searches]
    cores = [simulated_candidate(inputs, i, found.get("speculative", "")) for i, found in searches]
    tail = [
        _pools_given(inputs, found) if found.get("mode") == "disagg" else _capacity(inputs, found)
        for _, found in searches
    ]
    rows = runner.chain_rows(inputs, indices, cores, tail)
    out = []
    for (i, found), row in zip(searches, rows, strict=True):
        values = runner.row_values(row, inputs, i)
        stored = ("key", "given") if found.get("mode") == "disagg" else ("key",)
        values["derivation"]["simulated"] = runner.clean_json(
            {k: v for k, v in found.items() if k not in stored}
        )
        out.append(values)
    return out


def simulated_row(inputs: dict, candidate_index: int, found: dict) -> dict:
    """One candidate's result row from its search (``simulated_rows``)."""
    return simulated_rows(inputs, [(candidate_index, found)])[0]


def _capacity(inputs: dict, found: dict) -> Capacity:
    """An aggregated search's capacity, as the chain's tail stage takes it."""
    return Capacity(
        rate_rps=found["rate_rps"],
        latency_ms=found["latency_ms"],
        meets_slo=found["meets_slo"],
        binding=found["binding"],
        source="simulated",
        steps=tuple(_steps(inputs, found)),
        prefix_hit_rate=found.get("prefix_hit_rate"),
        speculative=found.get("speculative", ""),
    )


def _dist_json(d: LengthDist) -> dict:
    return {"kind": d.kind, "mean": d.mean, "p95": d.p95}


def _note(found: RateFound, meets: bool) -> str:
    if found.rate_rps <= 0:
        return "no request rate meets the SLO percentile and goodput in simulation"
    if not meets:
        return "sized on simulated tails; at the fleet's peak load the simulation still misses"
    return "sized on simulated tails"


def _steps(inputs: dict, found: dict) -> list:
    slo = snap.slo(inputs)
    pct = percentile_key(slo.percentile / 100)
    low, high = found["bracket_rps"]
    steps = [
        step(
            "simulated_max_rate_rps",
            f"max Poisson rate with {pct} TTFT <= SLO, {pct} TPOT <= SLO and goodput >= target "
            "(safeguarded bisection in log rate, warm-started at the analytic rate)",
            [
                q("ttft_slo", slo.ttft_ms, "ms"),
                q("tpot_slo", slo.tpot_ms, "ms"),
                q("percentile", slo.percentile, ""),
                q("goodput_target", slo.goodput_target, ""),
                q("requests per simulation", found["requests_per_simulation"], "requests"),
                q("seed", found["seed"], ""),
                q("simulations", found["simulations"], ""),
                q("analytic start", found["hint_rps"], "req/s per replica"),
                q("upper bound", found["upper_rps"], "req/s per replica"),
            ],
            found["rate_rps"],
            "req/s per replica",
            f"bracket {low:.4g}..{high:.4g} req/s; binding: {found['binding']}",
            kind="simulation",
        ),
    ]
    if found["serving_replicas"]:
        policy, traffic = snap.policy(inputs), snap.traffic(inputs)
        steps.append(
            step(
                "load_rps_per_replica",
                "peak_rps * burst / serving",
                [
                    q("peak_rps", traffic.peak_rps, "req/s"),
                    q("burst", policy.burst_factor, ""),
                    q("serving", found["serving_replicas"], "replicas"),
                ],
                found["load_rps_per_replica"],
                "req/s per replica",
                "the percentiles below are simulated at this load (one more simulation)",
            )
        )
    for name in ("ttft", "tpot"):
        values = found["latency_ms"][name]
        steps.append(
            step(
                f"{name}_ms_{pct}",
                f"{pct} of simulated {name.upper()} at the peak load per replica",
                [q(k, v if v is not None else math.nan, "ms") for k, v in values.items()],
                values.get(pct) if values.get(pct) is not None else math.nan,
                "ms",
                kind="simulation",
            )
        )
    steps.append(
        step(
            "simulated_goodput",
            "share of requests with TTFT <= SLO and TPOT <= SLO",
            [q("goodput_target", slo.goodput_target, "")],
            found["goodput"],
            "",
            "meets the SLO" if found["meets_slo"] else "misses the SLO",
            kind="simulation",
        )
    )
    return steps


# ---------------------------------------------------------------------------- disaggregated
def disagg_search(inputs: dict, candidate_index: int, row: dict, key: str) -> dict:
    """The two-pool simulation of a disaggregated row (``sizing.disagg_plan.simulate_pools``)
    from its mean-value pools, as plain JSON (what the cache stores)."""
    from sizing.disagg_plan import simulate_pools

    [core] = snap.candidates(inputs, [candidate_index])
    pools = (row.get("derivation") or {}).get("pools") or {}
    if not pools:
        raise ValueError("the row has no pools to simulate")
    traffic, slo, policy = snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs)
    warmup = int(SIM_REQUESTS * WARMUP_SHARE)
    given, probes = simulate_pools(
        core, pools["prefill"]["tp"], pools["decode"]["tp"],
        pools["prefill"]["serving_workers"], pools["decode"]["serving_workers"],
        traffic, slo, policy, SIM_REQUESTS, warmup, seed_for(key),
    )  # fmt: skip
    return {
        "key": key,
        "mode": "disagg",
        # the steps are rebuilt from the probes (_pools_given), not stored twice
        "given": {k: v for k, v in dataclasses.asdict(given).items() if k != "steps"},
        "probes": [dataclasses.asdict(p) for p in probes],
        "simulations": len(probes),
        "requests_per_simulation": SIM_REQUESTS,
        "warmup_requests": warmup,
        "seed": seed_for(key),
        "meets_slo": given.meets_slo,
    }


def _pools_given(inputs: dict, found: dict):
    """A disaggregated search's pools, as ``runner.chain_rows`` takes them (the steps
    rebuilt from the probes)."""
    from sizing.disagg_plan import PoolProbe, PoolsGiven, peak_rate_rps, probe_steps

    stored = {k: v for k, v in found["given"].items() if k != "steps"}
    probes = [PoolProbe(**p) for p in found["probes"]]
    rate = peak_rate_rps(snap.traffic(inputs), snap.policy(inputs))
    steps = probe_steps(probes, snap.slo(inputs), rate, found["requests_per_simulation"],
                        found["warmup_requests"], found["seed"])  # fmt: skip
    return PoolsGiven(**stored, steps=tuple(steps))
