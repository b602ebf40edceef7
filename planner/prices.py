"""The scenario's own prices: validate ``pricing.*`` input and freeze quotes into a run's inputs.

``clean_pricing`` is called by ``services.clean_scenario_data`` (errors under the flat field
names ``gpu_prices``, ``price_provider``, ``reserved_discount``); ``snapshot_prices`` by
``services.build_inputs_snapshot``. Which row a replica pays is decided in ``pricing.quotes``.
"""

from __future__ import annotations

import datetime as dt
import math

from fleets.models import GpuSku
from pricing import selectors as price_selectors
from pricing.quotes import CHEAPEST
from pricing.quotes import label as quote_label

MAX_USD_PER_GPU_HOUR = 10_000


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _clean_gpu_prices(errors, value, index) -> dict[str, float]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict):
        errors.add("gpu_prices", 'must be an object of GPU name -> $/GPU-hour, e.g. {"H100": 2.5}')
        return {}
    ids: dict[int, float] = {}
    for name, price in value.items():
        try:
            pk = index.gpu_id(str(name))
        except LookupError as exc:
            errors.add("gpu_prices", str(exc))
            continue
        number = _number(price)
        if number is None or not 0 < number < MAX_USD_PER_GPU_HOUR:
            errors.add(
                "gpu_prices",
                f"{name}: {price!r} is not a price between 0 and {MAX_USD_PER_GPU_HOUR:,} "
                "$/GPU-hour",
            )
            continue
        ids[pk] = number
    slugs = dict(GpuSku.objects.filter(pk__in=ids).values_list("pk", "slug"))
    return {slugs[pk]: price for pk, price in ids.items()}


def _clean_provider(errors, value, sheet) -> str:
    if value in (None, "") or str(value).strip().casefold() == CHEAPEST:
        return ""
    if not isinstance(value, str):
        errors.add("price_provider", f'must be a provider name or "{CHEAPEST}"')
        return ""
    known = price_selectors.providers(sheet)
    match = next((p for p in known if p.casefold() == value.strip().casefold()), None)
    if match is None:
        errors.add(
            "price_provider",
            f"no GPU prices from {value!r}; known: {', '.join(known) or 'none'}, or {CHEAPEST}",
        )
        return ""
    return match


def _clean_discount(errors, value, tier: str) -> float | None:
    if value in (None, ""):
        return None
    number = _number(value)
    if number is None or not 0 <= number <= 0.95:
        errors.add("reserved_discount", f"{value!r} is not a fraction from 0 to 0.95")
        return None
    if tier != "reserved":
        errors.add("reserved_discount", "applies to tier reserved only; set pricing.tier")
        return None
    return number


def clean_pricing(errors, merged: dict, index, sheet) -> None:
    """Validate and normalise the scenario's pricing fields in ``merged`` (in place)."""
    merged["gpu_prices"] = _clean_gpu_prices(errors, merged.get("gpu_prices"), index)
    merged["price_provider"] = _clean_provider(errors, merged.get("price_provider"), sheet)
    merged["reserved_discount"] = _clean_discount(
        errors, merged.get("reserved_discount"), merged.get("tier") or "on_demand"
    )


def replica_gpus(candidate: dict) -> int:
    """GPUs of one replica of a snapshot candidate row (tp x pp; dp is 1 in runs)."""
    return int(candidate["tp"]) * int(candidate.get("pp", 1)) * int(candidate.get("dp", 1))


def snapshot_prices(scenario, sheet, gpus, candidates: list[dict]) -> dict:
    """Per GPU: its default quote (smallest replica) and one quote per replica size.

    Returns ``{"quotes": {slug: {"default": dict|None, "by_replica_gpus": {"8": dict|None}}},
    "missing": [names], "notes": [text]}``.
    """
    sizes: dict[str, set[int]] = {g.slug: set() for g in gpus}
    for row in candidates:
        sizes.setdefault(row["gpu"], set()).add(replica_gpus(row))
    for found in sizes.values():
        if not found:
            found.add(1)
    quotes = price_selectors.gpu_quotes(
        sheet=sheet,
        sizes_by_gpu=sizes,
        tier=scenario.tier,
        gpu_prices=scenario.gpu_prices or {},
        provider=scenario.price_provider or CHEAPEST,
        reserved_discount=scenario.reserved_discount,
        scenario_name=scenario.name,
        today=(scenario.updated_at or dt.datetime.now(dt.UTC)).date(),
    )
    names = {g.slug: g.name for g in gpus}
    out, missing, notes = {}, [], []
    for slug, by_size in quotes.items():
        as_json = {str(n): (q.as_dict() if q else None) for n, q in by_size.items()}
        default = as_json[str(min(by_size))]
        out[slug] = {"default": default, "by_replica_gpus": as_json}
        unpriced = [n for n, q in by_size.items() if q is None]
        name = names.get(slug, slug)
        if len(unpriced) == len(by_size):
            missing.append(name)
        elif unpriced:
            missing.append(f"{name} ({', '.join(str(n) for n in unpriced)}-GPU replicas)")
        for note in sorted({q.note for q in by_size.values() if q and q.note}):
            notes.append(f"{name}: {note}")
    return {"quotes": out, "missing": missing, "notes": notes}


def price_rows(inputs: dict) -> list[dict]:
    """Every quote a run used, one row per GPU and replica size (for the page and exports)."""
    names = inputs.get("gpu_names", {})
    rows = []
    for slug, gpu in (inputs.get("gpus") or {}).items():
        by_size = gpu.get("prices_by_replica_gpus") or {"": gpu.get("price_source")}
        for size, quote in sorted(by_size.items(), key=lambda kv: int(kv[0] or 0)):
            rows.append(
                {
                    "gpu": names.get(slug, slug),
                    "gpu_slug": slug,
                    "replica_gpus": int(size) if size else None,
                    "quote": quote,
                    "label": quote_label(quote),
                }
            )
    return rows


def row_price_source(inputs: dict, gpu_slug: str, replica_gpus: int) -> dict | None:
    """The quote a result row of ``replica_gpus`` GPUs on ``gpu_slug`` paid (None: no price)."""
    from planner import snapshot as snap

    if gpu_slug not in (inputs.get("gpus") or {}):
        return None
    return snap.gpu_price(inputs, gpu_slug, replica_gpus)[1]


def result_price_source(inputs: dict, result) -> dict | None:
    """The quote a stored ``CandidateResult`` paid: at its candidate's replica size
    (``snapshot.priced_replica_gpus``: a disaggregated row is priced at node size)."""
    from planner import snapshot as snap

    gpus = snap.priced_replica_gpus(inputs, result.candidate_key, result.tp, result.pp)
    return row_price_source(inputs, result.gpu_slug, gpus)
