"""The inputs snapshot of a sizing run: plain JSON in, core dataclasses out (no Django).

A run stores everything it used — model and GPU specs, prices, calibration, traffic, SLOs,
policy and the expanded candidate list — so it can be recomputed later even after the catalog
or the prices changed, and two runs can be compared field by field.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from sizing.chain import Candidate
from sizing.specs import (
    ApiPrice,
    Calibration,
    EngineSettings,
    GpuSpec,
    ModelSpec,
    Parallelism,
    Policy,
    Slo,
    Traffic,
)

SNAPSHOT_VERSION = 1


def to_json(obj) -> dict:
    data = asdict(obj)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _build(cls, data: dict[str, Any]):
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    if cls is Traffic and "hourly_rps" in values:
        values["hourly_rps"] = tuple(values["hourly_rps"] or ())
    return cls(**values)


def traffic(snapshot: dict) -> Traffic:
    return _build(Traffic, snapshot["traffic"])


def slo(snapshot: dict) -> Slo:
    return _build(Slo, snapshot["slo"])


def policy(snapshot: dict) -> Policy:
    return _build(Policy, snapshot["policy"])


def api_price(snapshot: dict) -> ApiPrice | None:
    data = snapshot.get("api_price")
    return _build(ApiPrice, data) if data else None


def candidates(snapshot: dict, indices: range | list[int] | None = None) -> list[Candidate]:
    """Core candidates for the given indices of ``snapshot["candidates"]`` (all by default)."""
    models = {k: _build(ModelSpec, v) for k, v in snapshot["models"].items()}
    gpus = {k: _build(GpuSpec, v) for k, v in snapshot["gpus"].items()}
    calibrations = {k: _build(Calibration, v) for k, v in snapshot["calibrations"].items()}
    engine = _build(EngineSettings, snapshot["engine"])
    rows = snapshot["candidates"]
    chosen = range(len(rows)) if indices is None else indices
    out = []
    for i in chosen:
        row = rows[i]
        out.append(
            Candidate(
                model=models[row["model"]],
                gpu=gpus[row["gpu"]],
                weight_precision=row["precision"],
                kv_precision=row.get("kv_precision") or None,
                parallelism=Parallelism(tp=row["tp"], pp=row["pp"], ep=row["ep"]),
                engine=engine,
                calibration=calibrations.get(
                    f"{row['gpu']}|{row['precision']}", calibrations.get(row["gpu"], Calibration())
                ),
                label=row["key"],
            )
        )
    return out
