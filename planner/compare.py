"""Numeric deltas between compared runs: $/month, GPUs, p95, $/M tokens, each vs the first.

``run_metrics`` reads a run's summary (defensively: fields the pipeline may add are optional);
``delta_rows`` lines the columns up and gives each value its difference and percentage against
the first column, formatted for the page.
"""

from __future__ import annotations

from planner.templatetags.headroom import finite_number, num, usd

#: (label, summary entry key(s) tried in order, kind)
BEST_METRICS = [
    ("Best: $/month", ("usd_per_month",), "usd"),
    ("Best: $/M output tokens", ("usd_per_mtok",), "usd"),
    ("Best: GPUs", ("gpus",), "count"),
    ("Best: replicas", ("replicas",), "count"),
    ("Best: nodes", ("nodes",), "count"),
    ("Best: TTFT p95 (ms)", ("ttft_ms_p95", "ttft_ms"), "ms"),
    ("Best: TPOT p95 (ms)", ("tpot_ms_p95", "tpot_ms"), "ms"),
]
PER_GPU_METRICS = [
    ("$/month", ("usd_per_month",), "usd"),
    ("GPUs", ("gpus",), "count"),
    ("TPOT p95 (ms)", ("tpot_ms_p95", "tpot_ms"), "ms"),
]


def _first(entry: dict, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        number = finite_number(entry.get(key))
        if number is not None:
            return number
    return None


def best_option(summary: dict) -> dict | None:
    """The summary's per-GPU entry of the overall best option (cheapest meeting the SLOs)."""
    best = (summary or {}).get("best")
    for entry in (summary or {}).get("per_gpu", []):
        if best and entry.get("recommended") == best:
            return entry
    return None


def run_metrics(run) -> dict[str, tuple[float | None, str]]:
    """{label: (value, kind)} for a finished run's best option and each GPU's recommendation."""
    if run is None or run.status != "succeeded":
        return {}
    summary = run.summary or {}
    best = best_option(summary) or {}
    out = {label: (_first(best, keys), kind) for label, keys, kind in BEST_METRICS}
    for entry in summary.get("per_gpu") or []:
        if not entry.get("recommended"):
            continue
        for label, keys, kind in PER_GPU_METRICS:
            out[f"{entry.get('gpu_name', entry.get('gpu'))}: {label}"] = (_first(entry, keys), kind)
    return out


def _text(value: float | None, kind: str, signed: bool = False) -> str:
    if value is None:
        return "—"
    sign = "+" if signed and value > 0 else ("−" if signed and value < 0 else "")
    magnitude = abs(value) if signed else value
    if kind == "usd":
        return sign + usd(magnitude)
    if kind == "ms":
        return sign + num(magnitude, 3)
    return sign + num(magnitude)


def delta(base: float | None, value: float | None) -> tuple[float | None, float | None]:
    """(value - base, (value - base) / base); None where either is unknown or base is 0.

    >>> delta(24000.0, 30000.0)
    (6000.0, 0.25)
    >>> delta(0.0, 5.0)
    (5.0, None)
    """
    if base is None or value is None:
        return None, None
    diff = value - base
    return diff, (diff / base if base else None)


def delta_rows(metrics: list[dict[str, tuple[float | None, str]]]) -> list[dict]:
    """Rows of {label, cells: [{value, delta, pct, direction}]}, deltas against column 0."""
    labels = list(dict.fromkeys(label for m in metrics for label in m))
    rows = []
    for label in labels:
        kind = next(m[label][1] for m in metrics if label in m)
        values = [m.get(label, (None, kind))[0] for m in metrics]
        cells = []
        for index, value in enumerate(values):
            diff, share = delta(values[0], value) if index else (None, None)
            cells.append(
                {
                    "value": _text(value, kind),
                    "delta": "" if index == 0 or diff is None else _text(diff, kind, True),
                    "pct": "" if share is None else f"{share:+.1%}".replace("-", "−"),
                    "direction": "" if not diff else ("up" if diff > 0 else "down"),
                }
            )
        rows.append({"label": label, "cells": cells, "differs": len(set(values)) > 1})
    return rows
