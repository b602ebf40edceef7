"""Size a slice of a run's candidates with the core and rank a finished run (no Celery here).

Tasks call these; keeping them free of Celery makes them testable and reusable from
``manage.py plan``.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from planner import packing
from planner import snapshot as snap
from sizing.chain import Plan, PlanRow, plan
from sizing.fleet import band_json, size_fleet

RESULT_FIELDS = (
    "fits",
    "reason",
    "batch",
    "ttft_ms",
    "tpot_ms",
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


def finite(value) -> float | None:
    """JSON and the database get None, never NaN or inf."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def clean_json(value):
    """Recursively replace NaN/inf by None so a derivation is valid JSON."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def _breakeven(row: PlanRow) -> dict | None:
    if row.breakeven is None:
        return None
    return clean_json(asdict(row.breakeven))


def _percentiles(row: PlanRow) -> dict:
    """``ttft_ms_p50`` ... ``tpot_ms_p99`` columns from the row's latency table."""
    out = {}
    for name in ("ttft", "tpot"):
        table = row.latency_ms.get(name, {})
        for p in (50, 95, 99):
            out[f"{name}_ms_p{p}"] = finite(table.get(f"p{p}"))
    return out


def row_values(row: PlanRow, inputs: dict, candidate_index: int) -> dict:
    """A CandidateResult's field values from one core PlanRow (any latency source)."""
    candidate = inputs["candidates"][candidate_index]
    gpu_name = inputs.get("gpu_names", {}).get(candidate["gpu"], candidate["gpu"])
    values = {
        "candidate_key": candidate["key"],
        "model_name": row.model,
        "gpu_slug": candidate["gpu"],
        "gpu_name": gpu_name,
        "precision": row.weight_precision,
        "kv_precision": row.kv_precision,
        "expert_precision": row.expert_precision,  # the core's: a blank one as published
        "tp": row.tp,
        "pp": row.pp,
        "ep": row.ep,
        "gpus_per_replica": row.gpus_per_replica,
        "fits": bool(row.fits),
        "reason": row.reason,
        "batch": int(row.batch) if row.fits and math.isfinite(row.batch) else 0,
        "ttft_ms": finite(row.ttft_ms),
        "tpot_ms": finite(row.tpot_ms),
        **_percentiles(row),
        "throughput_tok_s": finite(row.output_tok_s_per_replica),
        "replicas": int(row.replicas),
        "gpus": int(row.gpus),
        "usd_per_hour": finite(row.usd_per_hour),
        "usd_per_month": finite(row.usd_per_month),
        "usd_per_mtok": finite(row.usd_per_mtok),
        "tokens_per_usd": finite(row.tokens_per_usd),
        "headroom": finite(1 - row.utilization) if row.fits and row.replicas else None,
        "binding_constraint": row.binding or "",
        "meets_slo": bool(row.meets_slo),
        "latency_source": row.latency_source,
        "latency_statistic": row.latency_statistic,
        "profile": row.profile,
        "evaluated": True,
        **pool_columns(row),
        "derivation": {
            "steps": [step.as_dict() for step in row.derivation],  # JSON-ready already
            "weights_gb_per_gpu": finite(row.weights_gb_per_gpu),
            "kv_bytes_per_token": finite(row.kv_bytes_per_token),
            "kv_capacity_tokens": finite(row.kv_capacity_tokens),
            "max_concurrency": finite(row.max_concurrency),
            "in_flight_at_peak": finite(row.in_flight_at_peak),
            "serving_replicas": row.serving_replicas,
            "warm_pool_replicas": row.warm_pool_replicas,
            "utilization": finite(row.utilization),
            "usd_per_mtok_total": finite(row.usd_per_mtok_total),
            "requests_per_s_per_replica": finite(row.requests_per_s_per_replica),
            "mean_value": {
                "requests_per_s_per_replica": finite(row.mean_value_rps),
                "ttft_ms": finite(row.mean_value_ttft_ms),
                "tpot_ms": finite(row.mean_value_tpot_ms),
            },
            "latency_ms": clean_json(row.latency_ms),
            "band": clean_json(band_json(row.band)) if row.band else None,
            "pools": clean_json(row.pools) if row.pools else None,
            "breakeven": _breakeven(row),
        },
    }
    price, _ = snap.gpu_price(inputs, candidate["gpu"], candidate["tp"] * candidate["pp"])
    if not price > 0:  # no price, or no instance on the sheet holds this replica (NaN)
        _without_price(values, gpu_name, inputs)
    nodes = packing.node_fields(inputs, values)
    values["nodes"], values["gpus_per_node"] = nodes["nodes"], nodes["gpus_per_node"]
    values["derivation"]["nodes"] = {k: v for k, v in nodes.items() if k != "steps"}
    values["derivation"]["steps"] += [{**s, "stage": "Nodes"} for s in nodes["steps"]]
    return values


def pool_columns(row: PlanRow) -> dict:
    """``mode`` and, on a disaggregated row, each pool's workers, layout and GPUs and the KV
    transfer (``prefill_workers`` ... ``decode_dp``, ``prefill_gpus``, ``kv_transfer_ms``: the
    names ``predict`` uses); None on aggregated rows."""
    out: dict = {"mode": row.mode, "kv_transfer_ms": finite(row.kv_transfer_ms)}
    for pool in ("prefill", "decode"):
        layout = row.pools.get(pool) or {}
        for name in ("workers", "tp", "pp", "ep", "dp", "gpus"):
            out[f"{pool}_{name}"] = layout.get(name)
    return out


def size_candidates(inputs: dict, indices) -> list[dict]:
    """Run the core chain (analytic tails) on ``inputs["candidates"][indices]``; return
    result field values, each with the optimistic bound that pruning uses. Disaggregated
    candidates go through ``sizing.disagg_plan`` (the same headroom, cost and break-even)."""
    indices = list(indices)
    candidates = snap.candidates(inputs, indices)
    traffic, policy = snap.traffic(inputs), snap.policy(inputs)
    rows = chain_rows(inputs, indices, candidates)
    bounds = optimistic_bounds(rows, [k.gpu.usd_per_gpu_hour for k in candidates], traffic, policy)
    out = []
    for i, row, bound in zip(indices, rows, bounds, strict=True):
        values = row_values(row, inputs, i)
        values["derivation"]["bound"] = bound
        out.append(values)
    return out


def chain_rows(inputs: dict, indices: list[int], cores: list, tail=None) -> list[PlanRow]:
    """``cores`` (the core candidates of ``inputs["candidates"][indices]``) through the chain,
    in their order: the aggregated ones in one ``plan`` call, the disaggregated in one
    ``sizing.disagg_plan`` call, each row with its own model's API price for the break-even
    (a row's numbers are its own whatever it is sized beside, and a vectorized call costs per
    numpy operation more than per row). ``tail``: per candidate, what the simulations found
    (a ``Capacity`` for an aggregated row, ``PoolsGiven`` for a disaggregated one), else the
    analytic sizing."""
    tail = list(tail) if tail is not None else [None] * len(cores)
    split = [snap.is_disagg(inputs["candidates"][i]) for i in indices]
    by_label: dict[str, PlanRow] = {}
    agg = [k for k, disagg in enumerate(split) if not disagg]
    if agg:
        prices = [snap.api_price(inputs, inputs["candidates"][indices[k]]["model"]) for k in agg]
        result: Plan = plan(
            snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs),
            [cores[k] for k in agg], prices, capacity=[tail[k] for k in agg],
        )  # fmt: skip
        by_label.update((row.label, row) for row in result.rows)
    disagg = [k for k, is_disagg in enumerate(split) if is_disagg]
    if disagg:
        group = [cores[k] for k in disagg]
        rows = disagg_rows(inputs, group, given=[tail[k] for k in disagg])
        by_label.update((row.label, row) for row in rows)
    return [by_label[core.label] for core in cores]


def disagg_rows(inputs: dict, group: list, given=None) -> list[PlanRow]:
    """Disaggregated candidates through ``sizing.disagg_plan``, each with its model's API
    price (``given``: the tail stage's pool sizes, else the mean-value sizing)."""
    from sizing.disagg_plan import plan_disagg

    rows = {c["key"]: c for c in inputs["candidates"]}
    scales = [snap.disagg_fit(inputs, rows[c.label]).wait_scale for c in group]
    allowed = [rows[c.label].get("pool_tp_options") for c in group]
    prices = [snap.api_price(inputs, rows[c.label]["model"]) for c in group]
    return plan_disagg(
        group, snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs), prices,
        given=given, prefill_wait_scale=scales, allowed_tps=allowed,
    )  # fmt: skip


#: The simulated capacity per replica has stayed under this multiple of the larger of the
#: analytic and mean-value rates on every point of the agreement grid (docs/tail-agreement.md
#: reports the largest ratio seen), so a fleet sized at it is a lower bound on cost.
BOUND_MARGIN = 1.5


def optimistic_bounds(rows: list[PlanRow], prices, traffic, policy) -> list[dict | None]:
    """Per row, the fleet at ``BOUND_MARGIN x max(analytic, mean-value)`` capacity: no
    simulation of that row can size fewer replicas, so when its cost is above a simulated
    option's, simulating it cannot change the recommendation (bound-and-prune). None for rows
    that cannot serve (misfits, and rows that miss the SLO in both closed forms)."""
    x = np.array(
        [
            max(r.requests_per_s_per_replica, r.mean_value_rps if r.fits else 0.0)
            * BOUND_MARGIN
            * (r.fits and (r.meets_slo or r.mean_value_rps > 0))
            * (r.mode != "disagg")
            for r in rows
        ]
    )
    gpi = np.array([r.gpus_per_replica for r in rows], dtype=np.float64)
    price = np.asarray(prices, dtype=np.float64)
    # a warm pool from the burst shrinks as capacity grows: at the bound's capacity it is no
    # larger than any simulation's, so the bound stays a lower bound
    weights = np.array([r.weights_gb_per_gpu for r in rows], dtype=np.float64)
    fleet = size_fleet(x, 0.0, traffic, policy, gpi, np.nan_to_num(price), x > 0, weights)
    out = []
    for i in range(len(rows)):
        if rows[i].mode == "disagg":
            out.append(disagg_bound(rows[i], price[i]))
            continue
        if not x[i] > 0 or not math.isfinite(fleet.replicas[i]):
            out.append(None)
            continue
        out.append(
            {
                "capacity_rps": float(x[i]),
                "margin": BOUND_MARGIN,
                "replicas": int(fleet.replicas[i]),
                "gpus": int(fleet.gpus[i]),
                "usd_per_month": finite(fleet.usd_per_month[i]) if price[i] > 0 else None,
            }
        )
    return out


def disagg_bound(row: PlanRow, usd_per_gpu_hour: float) -> dict | None:
    """A disaggregated row's bound is its mean-value sizing: the tail stage only ever adds
    workers to it (planner.disagg_tails), so no simulation of it costs less. None when it
    cannot serve."""
    if not row.fits or not row.gpus or not math.isfinite(row.usd_per_hour):
        return None
    return {
        "capacity_rps": finite(row.requests_per_s_per_replica),
        "margin": 1.0,
        "replicas": int(row.replicas),
        "gpus": int(row.gpus),
        "usd_per_month": finite(row.usd_per_month) if usd_per_gpu_hour > 0 else None,
    }


def _without_price(values: dict, gpu_name: str, inputs: dict) -> None:
    """No price for this GPU and tier on the sheet: sizes stand, money is unknown (not $0)."""
    for key in ("usd_per_hour", "usd_per_month", "usd_per_mtok", "tokens_per_usd"):
        values[key] = None
    values["derivation"]["breakeven"] = None
    if values["derivation"].get("band"):
        values["derivation"]["band"]["usd_per_month"] = None
    sheet = inputs.get("price_sheet") or {}
    values["derivation"]["price_note"] = (
        f"no {inputs.get('tier', 'on_demand')} price for {gpu_name} on "
        f"{sheet.get('name', 'the price sheet')}: cost not computed"
    )


def rank_key(values: dict) -> tuple:
    """SLO-meeting first, then cheapest per month, then fewest GPUs (what decides between
    unpriced options), then cheapest per token; misfits last."""
    inf = float("inf")
    return (
        not values["meets_slo"],
        not values["fits"],
        values["usd_per_month"] if values["usd_per_month"] is not None else inf,
        values["gpus"] or inf,
        values["usd_per_mtok"] if values["usd_per_mtok"] is not None else inf,
        values["candidate_key"],
    )


#: The fields ranking and the per-GPU recommendation read.
RANK_FIELDS = (
    "candidate_key",
    "gpu_slug",
    "meets_slo",
    "fits",
    "usd_per_month",
    "gpus",
    "usd_per_mtok",
)


def rank_and_pick(views: list[dict]) -> tuple[list[str], dict[str, str]]:
    """Order result views best first (``rank_key``) and pick each GPU SKU's recommendation:
    its first row that meets the SLOs. Returns (candidate keys in rank order,
    {gpu_slug: recommended candidate key}). Shared by runs and the ``plan`` command."""
    ordered = sorted(views, key=rank_key)
    best: dict[str, str] = {}
    for view in ordered:
        if view["meets_slo"]:
            best.setdefault(view["gpu_slug"], view["candidate_key"])
    return [view["candidate_key"] for view in ordered], best


def why_none(views: list[dict], gpu_slug: str) -> str:
    """Why no option on this GPU meets the SLOs: up to three distinct reasons."""
    reasons = sorted(
        {
            v["reason"] or f"misses the SLO ({v['binding_constraint']})"
            for v in views
            if v["gpu_slug"] == gpu_slug
        }
    )[:3]
    return "; ".join(reasons) or "no candidate"
