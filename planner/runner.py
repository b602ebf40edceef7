"""Size a slice of a run's candidates with the core and rank a finished run (no Celery here).

Tasks call these; keeping them free of Celery makes them testable and reusable from
``manage.py plan``.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from planner import snapshot as snap
from sizing.chain import Plan, PlanRow, plan

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


def result_values(row: PlanRow, candidate: dict, gpu_name: str) -> dict:
    """A CandidateResult's field values from one core PlanRow."""
    return {
        "candidate_key": candidate["key"],
        "model_name": row.model,
        "gpu_slug": candidate["gpu"],
        "gpu_name": gpu_name,
        "precision": row.weight_precision,
        "kv_precision": row.kv_precision,
        "tp": row.tp,
        "pp": row.pp,
        "ep": row.ep,
        "gpus_per_replica": row.gpus_per_replica,
        "fits": bool(row.fits),
        "reason": row.reason,
        "batch": int(row.batch) if row.fits and math.isfinite(row.batch) else 0,
        "ttft_ms": finite(row.ttft_ms),
        "tpot_ms": finite(row.tpot_ms),
        "throughput_tok_s": finite(row.output_tok_s_per_replica),
        "replicas": int(row.replicas),
        "gpus": int(row.gpus),
        "usd_per_hour": finite(row.usd_per_hour),
        "usd_per_month": finite(row.usd_per_month),
        "usd_per_mtok": finite(row.usd_per_mtok),
        "tokens_per_usd": finite(row.tokens_per_usd),
        "headroom": finite(1 - row.utilization) if row.fits else None,
        "binding_constraint": row.binding or "",
        "meets_slo": bool(row.meets_slo),
        "derivation": {
            "steps": clean_json([step.as_dict() for step in row.derivation]),
            "weights_gb_per_gpu": finite(row.weights_gb_per_gpu),
            "kv_bytes_per_token": finite(row.kv_bytes_per_token),
            "kv_capacity_tokens": finite(row.kv_capacity_tokens),
            "max_concurrency": finite(row.max_concurrency),
            "in_flight_at_peak": finite(row.in_flight_at_peak),
            "serving_replicas": row.serving_replicas,
            "utilization": finite(row.utilization),
            "usd_per_mtok_total": finite(row.usd_per_mtok_total),
            "requests_per_s_per_replica": finite(row.requests_per_s_per_replica),
            "breakeven": _breakeven(row),
        },
    }


def size_candidates(inputs: dict, indices) -> list[dict]:
    """Run the core chain on ``inputs["candidates"][indices]``; return result field values."""
    indices = list(indices)
    candidates = snap.candidates(inputs, indices)
    result: Plan = plan(
        snap.traffic(inputs),
        snap.slo(inputs),
        snap.policy(inputs),
        candidates,
        snap.api_price(inputs),
    )
    by_label = {row.label: row for row in result.rows}
    out = []
    for i in indices:
        candidate = inputs["candidates"][i]
        gpu_name = inputs.get("gpu_names", {}).get(candidate["gpu"], candidate["gpu"])
        values = result_values(by_label[candidate["key"]], candidate, gpu_name)
        calibration = inputs.get("calibrations", {}).get(candidate["gpu"], {})
        add_error_band(values, by_label[candidate["key"]], calibration)
        if inputs["gpus"][candidate["gpu"]].get("usd_per_gpu_hour", 0) <= 0:
            _without_price(values, gpu_name, inputs)
        out.append(values)
    return out


def add_error_band(values: dict, row: PlanRow, calibration: dict) -> None:
    """Carry the calibration profile's cross-validated error through the chain.

    With relative error e on throughput and TPOT (e_ttft on TTFT), the capacity per replica
    lies in [X(1-e), X(1+e)], so serving replicas lie in
    [ceil(S / (1+e)), ceil(S / (1-e))] and the fleet's cost scales with them (spares fixed).
    """
    if not row.fits or not values["replicas"]:
        return
    e = min(max(float(calibration.get("relative_error", 0.25)), 0.0), 0.9)
    e_ttft = min(max(float(calibration.get("ttft_relative_error", 0.5)), 0.0), 0.9)
    serving = max(int(row.serving_replicas), 1)
    spares = max(int(row.replicas) - serving, 0)
    low = math.ceil(serving / (1 + e) - 1e-9) + spares
    high = math.ceil(serving / (1 - e) - 1e-9) + spares
    per_replica = row.gpus_per_replica
    usd_per_replica_month = (values["usd_per_month"] or 0.0) / max(int(row.replicas), 1)

    def pair(x, rel):
        return [finite(x * (1 - rel)), finite(x * (1 + rel))] if finite(x) is not None else None

    band = {
        "profile": calibration.get("name", "physics defaults"),
        "relative_error": e,
        "ttft_relative_error": e_ttft,
        "throughput_tok_s": pair(row.output_tok_s_per_replica, e),
        "tpot_ms": pair(row.tpot_ms, e),
        "ttft_ms": pair(row.ttft_ms, e_ttft),
        "replicas": [low, high],
        "gpus": [low * per_replica, high * per_replica],
        "usd_per_month": [
            finite(low * usd_per_replica_month),
            finite(high * usd_per_replica_month),
        ],
    }
    values["derivation"]["band"] = band
    values["derivation"]["steps"].append(
        {
            "name": "error_band",
            "formula": "replicas in [ceil(S/(1+e)), ceil(S/(1-e))] + spares; cost scales with them",
            "inputs": [
                {"name": "serving_replicas S", "value": float(serving), "unit": "replicas"},
                {"name": "relative_error e", "value": e, "unit": "fraction"},
                {"name": "spares", "value": float(spares), "unit": "replicas"},
                {"name": "calibration profile", "value": band["profile"], "unit": ""},
            ],
            "value": f"{low}-{high}",
            "unit": "replicas",
            "note": "e is the profile's cross-validated median error on held-out measurements",
        }
    )


def _without_price(values: dict, gpu_name: str, inputs: dict) -> None:
    """No price for this GPU and tier on the sheet: sizes stand, money is unknown (not $0)."""
    for key in ("usd_per_hour", "usd_per_month", "usd_per_mtok", "tokens_per_usd"):
        values[key] = None
    values["derivation"]["breakeven"] = None
    if "band" in values["derivation"]:
        values["derivation"]["band"]["usd_per_month"] = None
    sheet = inputs.get("price_sheet") or {}
    values["derivation"]["price_note"] = (
        f"no {inputs.get('tier', 'on_demand')} price for {gpu_name} on "
        f"{sheet.get('name', 'the price sheet')}: cost not computed"
    )


def rank_key(values: dict) -> tuple:
    """SLO-meeting first, then cheapest per month, then cheapest per token; misfits last."""
    inf = float("inf")
    return (
        not values["meets_slo"],
        not values["fits"],
        values["usd_per_month"] if values["usd_per_month"] is not None else inf,
        values["usd_per_mtok"] if values["usd_per_mtok"] is not None else inf,
        values["candidate_key"],
    )


#: The fields ranking and the per-GPU recommendation read.
RANK_FIELDS = ("candidate_key", "gpu_slug", "meets_slo", "fits", "usd_per_month", "usd_per_mtok")


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
