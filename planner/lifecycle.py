"""The fleet over time and over its life, for one recommendation: cold start, the autoscaling
policy and its simulated day, and buy vs rent.

Two halves. ``clean_blocks`` validates the scenario's ``cold_start``, ``autoscaling`` and
``ownership`` blocks (every key optional; errors keyed ``block.field`` with the limit).
``fleet_life`` turns one ranked row and the run's inputs snapshot into the core's inputs
(``sizing.coldstart``, ``sizing.autoscale``, ``sizing.ownership``) and returns the per-GPU
summary fields with their derivation steps. The formulas live in the core.
"""

from __future__ import annotations

import math

import numpy as np

from sizing import autoscale, burst_check, coldstart, ownership
from sizing import breakeven as be
from sizing.chain import candidate_arrays
from sizing.cost import HOURS_PER_MONTH
from sizing.derivation import q, step
from sizing.simulate import lengths_from_mean_p95

BLOCKS = ("cold_start", "autoscaling", "ownership")

# field -> (kind, low, high, low_inclusive); kind: "number", "int", "bool" or a tuple of choices
SPEC: dict[str, dict[str, tuple]] = {
    "cold_start": {
        "image_gb": ("number", 0, 1000, True),
        # bandwidths from 10 MB/s: slower is a broken mirror, and keeps the cold start finite
        "registry_gb_s": ("number", 0.01, 1000, True),
        "image_cached": ("bool",),
        "weights_source": (coldstart.WEIGHTS_SOURCES,),
        "weights_gb_s": ("number", 0.01, 10_000, True),
        "init_s": ("number", 0, 3600, True),
        "graph_capture_s": ("number", 0, 3600, True),
        "warmup_s": ("number", 0, 3600, True),
    },
    "autoscaling": {
        "enabled": ("bool",),
        "min_replicas": ("int", 0, 100_000, True),
        "burst_ramp_rps_per_s": ("number", 0, 1e7, True),
        "burst_s": ("number", 0, 3600, False),
        "spot_share": ("number", 0, 1, True),
        "spot_interruptions_per_hour": ("number", 0, 60, True),
        "spot_discount": ("number", 0, 0.99, True),
    },
    "ownership": {
        "capex_usd_per_node": ("number", 0, 1e9, True),
        "depreciation_years": ("number", 0, 30, False),
        "cost_of_capital": ("number", 0, 1, True),
        "host_watts_per_node": ("number", 0, 1e6, True),
        "pue": ("number", 1, 5, True),
        "usd_per_kwh": ("number", 0, 10, True),
        "colo_usd_per_kw_month": ("number", 0, 1e5, True),
        "ops_usd_per_node_month": ("number", 0, 1e7, True),
    },
}


def _field_error(value, spec: tuple) -> str | None:
    kind = spec[0]
    if isinstance(kind, tuple):
        return None if value in kind else f"must be one of {', '.join(kind)}, got {value!r}"
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if kind == "int" and value != int(value):
        return f"must be a whole number, got {value!r}"
    low, high, inclusive = spec[1], spec[2], spec[3]
    if value < low or (value == low and not inclusive):
        return f"must be {'at least' if inclusive else 'greater than'} {low:g}, got {value:g}"
    if value > high:
        return f"must be at most {high:g}, got {value:g}"
    return None


def clean_block(name: str, block) -> tuple[dict, dict[str, list[str]]]:
    """(cleaned block, errors keyed ``name.field``). None values mean "use the default"."""
    if block in (None, ""):
        return {}, {}
    if not isinstance(block, dict):
        return {}, {name: ["must be an object of the documented keys"]}
    errors: dict[str, list[str]] = {}
    spec = SPEC[name]
    unknown = sorted(set(block) - set(spec))
    if unknown:
        errors[name] = [f"unknown keys: {', '.join(map(str, unknown))}; known: {', '.join(spec)}"]
    clean = {}
    for key, value in block.items():
        if key not in spec or value is None:
            continue
        message = _field_error(value, spec[key])
        if message:
            errors[f"{name}.{key}"] = [message]
        else:
            clean[key] = int(value) if spec[key][0] == "int" else value
    return clean, errors


# ---------------------------------------------------------------------------- per row
def _residence_s(row: dict, traffic) -> float:
    d = row.get("derivation") or {}
    in_flight = d.get("in_flight_at_peak")
    if in_flight and traffic.peak_rps > 0:
        return in_flight / traffic.peak_rps
    # TTFT + (output - 1) x TPOT, the residence the chain uses
    ttft, tpot = (row.get("ttft_ms") or 0) / 1000, (row.get("tpot_ms") or 0) / 1000
    return ttft + max(traffic.output_tokens_mean - 1, 0) * tpot


def _slack_s(row: dict, slo: dict) -> float:
    """The TTFT margin a request may queue for and still meet the SLO."""
    ttft = row.get("ttft_ms_p95") or row.get("ttft_ms") or 0.0
    return max((slo.get("ttft_ms", 0.0) - ttft) / 1000.0, 0.0)


def fleet_life(row: dict, inputs: dict, usd_per_gpu_hour: float) -> dict | None:
    """The per-GPU summary fields of one recommended row (None if it cannot serve)."""
    from planner import snapshot as snap

    d = row.get("derivation") or {}
    x = d.get("requests_per_s_per_replica")
    gpi = row.get("gpus_per_replica") or row["tp"] * row.get("pp", 1)
    weights = d.get("weights_gb_per_gpu")
    if not x or not weights or not row.get("replicas"):
        return None
    traffic, policy = snap.traffic(inputs), snap.policy(inputs)
    blocks = inputs.get("fleet_life") or {}
    cs_in = coldstart.from_block(blocks.get("cold_start"))
    cs, cs_steps = coldstart.cold_start(cs_in, weights, gpi)
    t_cold = cs.cold_start_s
    w = _residence_s(row, traffic)
    serving = int(d.get("serving_replicas") or row["replicas"])
    as_in = autoscale.from_block(blocks.get("autoscaling"))
    # the warm pool the fixed fleet was sized with (from the burst when one is stated): the
    # autoscaled day holds the same one
    warm = d.get("warm_pool_replicas")
    pol, pol_steps = autoscale.design(
        as_in, x, w, policy.target_utilization, serving, traffic.peak_rps,
        policy.burst_factor, t_cold, int(warm) if warm is not None else None,
    )  # fmt: skip
    slack = _slack_s(row, inputs.get("slo") or {})
    hourly = be.daily_profile_rps(traffic)
    rates, start = autoscale.minute_rates(hourly, pol.ramp_rps_per_s, as_in.burst_s)
    usd_replica_h = gpi * usd_per_gpu_hour
    fixed_usd_month = row.get("usd_per_month")
    if as_in.enabled:
        day = autoscale.simulate(rates, 60.0, pol, x, w, t_cold, slack)
        auto_usd, auto_steps = autoscale.autoscaled_usd_per_month(
            day, policy.spare_replicas, usd_replica_h, as_in, t_cold
        )
    else:
        day, auto_usd, auto_steps = None, fixed_usd_month, []
    burst, burst_steps = _burst(pol, x, w, t_cold, slack, float(hourly.max()), as_in.burst_s)
    burst_steps += _burst_simulated(burst, row, inputs)
    tco, tco_steps = _tco(row, inputs, usd_per_gpu_hour, auto_usd, fixed_usd_month)
    return {
        "cold_start_s": {
            "total": t_cold,
            "links": cs.links(),
            "weights_source": cs_in.weights_source,
            "weights_gb_s": cs_in.source_gb_s,
            "defaults": list(cs_in.defaults),
            "default_sources": coldstart.default_sources(cs_in),
        },
        "warm_pool_replicas": pol.warm_pool_replicas,
        "autoscaling": {
            **pol.as_dict(),
            "enabled": as_in.enabled,
            "spot_share": as_in.spot_share,
            "defaults": list(as_in.defaults),
            "default_sources": autoscale.default_sources(as_in),
            "burst": burst,
        },
        "autoscaled_usd_per_month": auto_usd if usd_per_gpu_hour > 0 else None,
        "autoscaled_saving_usd_per_month": (
            fixed_usd_month - auto_usd
            if usd_per_gpu_hour > 0 and fixed_usd_month is not None and auto_usd is not None
            else None
        ),
        "day": _day_series(day, policy.spare_replicas, usd_replica_h) if day is not None else None,
        "tco": tco,
        "lifecycle_steps": [
            {**s.as_dict(), "stage": stage}
            for stage, steps in (
                ("Cold start", cs_steps),
                ("Autoscaling", pol_steps + auto_steps + burst_steps),
                ("Buy vs rent", tco_steps),
            )
            for s in steps
        ],
    }


def _burst(pol, x, w, t_cold, slack, base_rps, burst_s) -> tuple[dict, list]:
    """The worst burst (on the busiest hour) at 1 s resolution, with and without the pool;
    ``window`` keeps the per-second rates and ready replicas for the simulator's check."""
    if pol.ramp_rps_per_s <= 0:
        return {"slo_share": 1.0, "slo_share_without_warm_pool": 1.0,
                "late_requests_without_warm_pool": 0.0, "late_requests": 0.0,
                "simulated": None}, []  # fmt: skip
    # two cold starts after the burst (at most two hours): the queue it left has drained
    tail_s = min(2 * t_cold, 7200.0)
    rates = autoscale.burst_window_rates(base_rps, pol.ramp_rps_per_s, burst_s, tail_s)
    with_pool = autoscale.simulate(rates, 1.0, pol, x, w, t_cold, slack)
    without = autoscale.simulate(rates, 1.0, pol, x, w, t_cold, slack, warm_pool_replicas=0)
    out = {
        "slo_share": with_pool.slo_share,
        "late_requests": float(with_pool.late.sum()),
        "slo_share_without_warm_pool": without.slo_share,
        "late_requests_without_warm_pool": float(without.late.sum()),
        "simulated": None,
        "_window": (rates, with_pool.active + with_pool.warm),
    }
    step_ = step(
        "burst_fluid_slo_share",
        "1 - sum(late) / sum(arrived), 1 s steps",
        [
            q("base_rps", base_rps, "req/s (busiest hour)"),
            q("ramp", pol.ramp_rps_per_s, "req/s per s"),
            q("burst_s", burst_s, "s"),
            q("tail_s", tail_s, "s"),
            q("late_requests", out["late_requests"], "requests"),
        ],
        with_pool.slo_share,
        "",
        "the worst burst window through the policy (fluid queue, warm pool included)",
        kind="model",
    )
    return out, [step_]


def _burst_simulated(burst: dict, row: dict, inputs: dict) -> list:
    """The worst burst window through the engine simulator (``sizing.burst_check``): one
    bounded simulation of one replica's share of the window; None when it cannot run."""
    from planner import snapshot as snap
    from planner import tails

    window = burst.pop("_window", None)
    if window is None:
        return []
    index = next(
        (
            i
            for i, c in enumerate(inputs.get("candidates") or [])
            if c["key"] == row["candidate_key"]
        ),
        None,
    )
    if index is None:
        return []
    [core] = snap.candidates(inputs, [index])
    c = candidate_arrays([core])
    traffic, slo = snap.traffic(inputs), snap.slo(inputs)
    isl = lengths_from_mean_p95(traffic.prompt_tokens_mean, traffic.prompt_tokens_p95)
    osl = lengths_from_mean_p95(traffic.output_tokens_mean, traffic.output_tokens_p95)
    rates, ready = window
    try:
        check, steps = burst_check.check_burst(
            c, isl, osl, rates, ready, 1.0, slo.ttft_ms, slo.tpot_ms, slo.percentile,
            burst["slo_share"], tails.seed_for(tails.cache_key(inputs, index)),
            traffic.shared_prefix_tokens, traffic.prefix_hit_rate,
        )  # fmt: skip
    except ValueError as exc:  # no KV room for one sequence: the row would not fit
        burst["simulated"] = {"error": str(exc)}
        return []
    burst["simulated"] = check.as_dict()
    return steps


def _day_series(day, spares: int, usd_replica_h: float) -> dict:
    """Replicas over the day, every 10 minutes (the chart's points), and the on-demand $/h
    of what is billed then (ready + warm + cold-starting + spares)."""
    pick = slice(0, None, 10)
    billed = day.billed_replicas[pick] + spares
    return {
        "minute": list(range(0, 1440, 10)),
        "rate_rps": [round(float(v), 4) for v in day.rate_rps[pick]],
        "ready": [int(v) for v in day.active[pick]],
        "warm": [int(v) for v in day.warm[pick]],
        "cold_starting": [int(v) for v in day.starting[pick]],
        "spare": spares,
        "usd_per_hour": [round(float(v) * usd_replica_h, 4) for v in billed],
        "slo_share": day.slo_share,
    }


def _tco(row, inputs, usd_per_gpu_hour, auto_usd, fixed_usd) -> tuple[dict | None, list]:
    gpu = (inputs.get("gpus") or {}).get(row["gpu_slug"]) or {}
    tdp = gpu.get("tdp_w") or 0.0
    per_node = int(gpu.get("gpus_per_node") or 8)  # the server one buys, not the packing
    own_in = ownership.from_block((inputs.get("fleet_life") or {}).get("ownership"))
    node, node_steps = ownership.node_hour(own_in, per_node, tdp)
    if not usd_per_gpu_hour > 0:
        return {"owned_usd_per_gpu_hour": node.usd_per_gpu_hour, "breakeven_utilization": None,
                "owned_usd_per_month": None, "rented_usd_per_month": None,
                "months_to_breakeven": None, "note": "no GPU price: nothing to compare",
                "defaults": list(own_in.defaults),
                "default_sources": ownership.default_sources(own_in)}, node_steps  # fmt: skip
    rented = auto_usd if auto_usd is not None else fixed_usd
    t = inputs.get("traffic") or {}
    tokens = t.get("mean_rps", 0.0) * (
        t.get("prompt_tokens_mean", 0.0) + t.get("output_tokens_mean", 0.0)
    )
    result, steps = ownership.tco(
        node, row["gpus"], usd_per_gpu_hour, rented, tokens * 3600 * HOURS_PER_MONTH,
        own_in.depreciation_years,
    )  # fmt: skip
    out = result.as_dict() | {
        "defaults": list(own_in.defaults),
        "default_sources": ownership.default_sources(own_in),
        "tdp_w": tdp,
    }
    out["curve"] = _curve(row, inputs, node.usd_per_gpu_hour, usd_per_gpu_hour)
    return out, node_steps + steps


def _curve(row, inputs, owned_gpu_h, rented_gpu_h) -> dict:
    """$/M tokens (input + output) vs utilization: own, rent, and the API's blended price."""
    u = np.linspace(0.05, 1.0, 20)
    d = row.get("derivation") or {}
    x = d.get("requests_per_s_per_replica") or 0.0
    t = inputs.get("traffic") or {}
    tokens = t.get("prompt_tokens_mean", 0.0) + t.get("output_tokens_mean", 0.0)
    capacity = row["replicas"] * x * tokens
    curve = ownership.usd_per_mtok_curve(u, row["gpus"], capacity, owned_gpu_h, rented_gpu_h)
    api = (d.get("breakeven") or {}).get("api_usd_per_mtok")
    return {
        "utilization": [round(float(v), 4) for v in u],
        "own_usd_per_mtok": [float(v) for v in curve["own"]],
        "rent_usd_per_mtok": [float(v) for v in curve["rent"]],
        "api_usd_per_mtok": api,
        "hours_per_month": HOURS_PER_MONTH,
    }
