"""The inputs snapshot of a sizing run: plain JSON in, core dataclasses out (no Django).

A run stores everything it used — model and GPU specs, prices, calibration, traffic, SLOs,
policy and the expanded candidate list — so it can be recomputed later even after the catalog
or the prices changed, and two runs can be compared field by field.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields, replace
from typing import Any

from sizing import autoscale, coldstart
from sizing.chain import Candidate
from sizing.fleet import BurstWarmPool
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


#: Field annotations whose values are stored as floats (see ``to_json``).
_FLOAT_TYPES = {"float", "float | None"}


def to_json(obj) -> dict:
    """The dataclass as JSON, without the fields marked ``metadata={"snapshot": False}``.

    A field declared ``float`` is written as a float even when it was given as an int: a
    scenario just created holds ``1000`` where the same scenario read back from the database
    holds ``1000.0``, and the snapshot (hence the simulation's cache key and seed) must not
    depend on which of the two a door started from."""
    data = asdict(obj)
    out = {}
    for f in fields(obj):
        if f.metadata.get("snapshot") is False:
            continue
        value = data[f.name]
        if f.type in _FLOAT_TYPES and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif f.type == "tuple[float, ...]" and value:
            value = tuple(float(v) for v in value)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def _build(cls, data: dict[str, Any]):
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in data.items() if k in known}
    if cls is EngineSettings:  # tuple fields come back from JSON as lists
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    if cls is Traffic and "hourly_rps" in values:
        values["hourly_rps"] = tuple(values["hourly_rps"] or ())
    return cls(**values)


def traffic(snapshot: dict) -> Traffic:
    return _build(Traffic, snapshot["traffic"])


def slo(snapshot: dict) -> Slo:
    return _build(Slo, snapshot["slo"])


def policy(snapshot: dict) -> Policy:
    """The headroom policy, with the scenario's cold-start and autoscaling blocks attached:
    when they state a burst, the warm pool is sized from it (``sizing.fleet.warm_pool``).
    Snapshots from before the blocks keep the typed warm pool."""
    built = _build(Policy, snapshot["policy"])
    blocks = snapshot.get("fleet_life")
    if blocks is None:
        return built
    burst = BurstWarmPool(
        coldstart.from_block(blocks.get("cold_start")),
        autoscale.from_block(blocks.get("autoscaling")),
    )
    return replace(built, burst_warm_pool=burst)


def api_price(snapshot: dict, model_slug: str | None = None) -> ApiPrice | None:
    """The API a model's self-hosting is compared with: the scenario's when it gives one,
    else that model's row of the price sheet (``api_prices_by_model``), else None."""
    data = api_price_json(snapshot, model_slug)
    return _build(ApiPrice, data) if data else None


def api_price_json(snapshot: dict, model_slug: str | None = None) -> dict | None:
    """``api_price``'s source as stored (sheet rows carry provider, model, sheet, as_of)."""
    given = snapshot.get("api_price")
    if given or model_slug is None:
        return given or None
    return (snapshot.get("api_prices_by_model") or {}).get(model_slug)


def gpu_price(snapshot: dict, gpu_slug: str, replica_gpus: int) -> tuple[float, dict | None]:
    """($/GPU-hour, price_source) a replica of ``replica_gpus`` GPUs pays on this GPU.

    The quote for that replica size (``prices_by_replica_gpus``, priced from instances that can
    hold it) when the snapshot has one, else the GPU's default; (0.0, None) means no price.
    Snapshots written before per-size quotes carry only ``usd_per_gpu_hour``.
    """
    gpu = snapshot["gpus"][gpu_slug]
    by_size = gpu.get("prices_by_replica_gpus") or {}
    quote = by_size.get(str(replica_gpus), gpu.get("price_source"))
    if quote is None and not by_size and "price_source" not in gpu:
        return float(gpu.get("usd_per_gpu_hour") or 0.0), None
    return (float(quote["usd_per_gpu_hour"]), quote) if quote else (0.0, None)


def priced_replica_gpus(snapshot: dict, candidate_key: str, tp: int, pp: int = 1) -> int:
    """The replica size (GPUs) a result row's GPU-hour is priced at: its candidate's
    ``tp x pp``. A disaggregated candidate carries the GPU's largest TP (its pools rent whole
    nodes, ``planner.services``) while its row's ``tp``/``pp`` are the decode worker's, so
    every door that shows a row's quote or prices its fleet asks here, as the runner does."""
    if candidate_key.endswith("|disagg"):
        for candidate in snapshot.get("candidates") or ():
            if candidate.get("key") == candidate_key:
                return int(candidate["tp"]) * int(candidate.get("pp") or 1)
    return int(tp) * int(pp or 1)


def gpus_per_node(snapshot: dict, gpu_slug: str, replica_gpus: int) -> int:
    """GPUs in one node for packing: the priced instance's GPU count, else the catalog's."""
    _, quote = gpu_price(snapshot, gpu_slug, replica_gpus)
    stated = (quote or {}).get("gpus_per_instance")
    return int(stated or snapshot["gpus"][gpu_slug].get("gpus_per_node") or 1)


def candidates(snapshot: dict, indices: range | list[int] | None = None) -> list[Candidate]:
    """Core candidates for the given indices of ``snapshot["candidates"]`` (all by default).
    Only the models, GPUs and calibrations the chosen rows name are built (a tail search
    builds one candidate of a snapshot holding a sweep's dozens of each)."""
    rows = snapshot["candidates"]
    chosen = range(len(rows)) if indices is None else indices
    named = [rows[i] for i in chosen]
    models = {k: _build(ModelSpec, snapshot["models"][k]) for k in {r["model"] for r in named}}
    gpus = {k: _build(GpuSpec, snapshot["gpus"][k]) for k in {r["gpu"] for r in named}}
    wanted = {k for r in named for k in (f"{r['gpu']}|{r['precision']}", r["gpu"])}
    calibrations = {
        k: _build(Calibration, v) for k, v in snapshot["calibrations"].items() if k in wanted
    }
    engine = _build(EngineSettings, snapshot["engine"])
    out = []
    for i in chosen:
        row = rows[i]
        usd, quote = gpu_price(snapshot, row["gpu"], row["tp"] * row["pp"])
        if quote is None and "price_source" in snapshot["gpus"][row["gpu"]]:
            usd = math.nan  # no instance on the sheet holds this replica: cost unknown, not $0
        gpu = gpus[row["gpu"]]
        calibration = calibrations.get(
            f"{row['gpu']}|{row['precision']}", calibrations.get(row["gpu"], Calibration())
        )
        if is_disagg(row):
            calibration = disagg_fit(snapshot, row).calibrate(calibration)
        out.append(
            Candidate(
                model=models[row["model"]],
                gpu=gpu if usd == gpu.usd_per_gpu_hour else replace(gpu, usd_per_gpu_hour=usd),
                weight_precision=row["precision"],
                kv_precision=row.get("kv_precision") or None,
                expert_precision=row.get("expert_precision") or None,
                embedding_precision=row.get("embedding_precision") or None,
                parallelism=Parallelism(tp=row["tp"], pp=row["pp"], ep=row["ep"]),
                engine=engine,
                calibration=calibration,
                label=row["key"],
            )
        )
    return out


def is_disagg(row: dict) -> bool:
    """A disaggregated prefill/decode candidate (``mode`` "disagg"; sizing.disagg_plan)."""
    return row.get("mode") == "disagg"


def disagg_fit(snapshot: dict, row: dict):
    """The disaggregated constants a candidate's GPU uses (``sizing.disagg.DisaggFit``), as
    stored in the snapshot; the prior when the snapshot has none for it."""
    from sizing.disagg import UNFITTED, DisaggFit

    stored = (snapshot.get("disagg_fits") or {}).get(row["gpu"])
    if not stored:
        return UNFITTED
    return DisaggFit(stored["engine"], dict(stored["values"]), int(stored.get("points", 0)))
