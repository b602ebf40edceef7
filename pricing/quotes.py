"""Which GPU-hour price a replica pays, and where that price comes from.

A quote is one GPU's $/GPU-hour for one replica size, with its provenance: provider, instance,
the instance's GPU count, region, tier, the source's date and text, the sheet it was read from,
and a note when it is not the plain sheet row (a custom price, a committed-term discount, a
fallback to the reference sheet). Runs store quotes in their inputs snapshot, so every cost can
show ``price_source`` beside it.

Rules, in order, for one GPU and a replica of ``n`` GPUs:

1. a price the scenario gives for the GPU (``pricing.gpu_prices``) is used as is;
2. else the cheapest row of the scenario's sheet for the GPU and tier, from the chosen provider
   (or any, for "cheapest"), among instances that hold the replica (GPUs per instance >= n;
   rows without a stated shape count as able to hold it only when no row states one that does);
   with tier ``reserved`` and a ``reserved_discount`` d, the on-demand row x (1 - d) instead;
3. else the same on the reference sheet, saying so;
4. else no quote: the GPU's cost is unknown (never $0).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import asdict, dataclass

CHEAPEST = "cheapest"


@dataclass(frozen=True)
class PriceRow:
    """The fields of a sheet row a quote needs (``pricing.models.GpuHourPrice`` has them)."""

    gpu_slug: str
    provider: str
    item: str
    gpus_per_instance: int | None
    region: str
    tier: str
    usd_per_gpu_hour: float
    as_of: dt.date | str
    source: str


@dataclass(frozen=True)
class Quote:
    usd_per_gpu_hour: float
    provider: str
    instance: str
    gpus_per_instance: int | None
    region: str
    tier: str
    as_of: str
    source: str
    sheet: str
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def holds(row: PriceRow, replica_gpus: int) -> bool:
    return row.gpus_per_instance is None or row.gpus_per_instance >= replica_gpus


def pick_row(
    rows: Iterable[PriceRow], *, tier: str, replica_gpus: int, provider: str = CHEAPEST
) -> PriceRow | None:
    """The cheapest row of ``tier`` from ``provider`` whose instance holds ``replica_gpus``.

    Rows that state an instance shape are preferred; a row without one (a per-GPU component
    price) is taken only when no stated shape holds the replica.

    >>> a = PriceRow("h100", "A", "1x", 1, "", "on_demand", 3.0, "2026-11-29", "s")
    >>> b = PriceRow("h100", "B", "8x", 8, "", "on_demand", 4.0, "2026-11-29", "s")
    >>> pick_row([a, b], tier="on_demand", replica_gpus=1).provider
    'A'
    >>> pick_row([a, b], tier="on_demand", replica_gpus=2).provider  # a 1-GPU box cannot hold TP2
    'B'
    >>> pick_row([a, b], tier="on_demand", replica_gpus=16) is None
    True
    """
    wanted = (provider or CHEAPEST).casefold()
    eligible = [
        r
        for r in rows
        if r.tier == tier and (wanted == CHEAPEST or r.provider.casefold() == wanted)
    ]
    shaped = [r for r in eligible if r.gpus_per_instance is not None and holds(r, replica_gpus)]
    pool = shaped or [r for r in eligible if r.gpus_per_instance is None]
    return min(pool, key=lambda r: (r.usd_per_gpu_hour, r.provider, r.item), default=None)


def _quote(row: PriceRow, sheet: str, usd: float, tier: str, note: str) -> Quote:
    return Quote(
        usd_per_gpu_hour=round(usd, 6),
        provider=row.provider,
        instance=row.item,
        gpus_per_instance=row.gpus_per_instance,
        region=row.region,
        tier=tier,
        as_of=str(row.as_of),
        source=row.source,
        sheet=sheet,
        note=note,
    )


def quote_from_sheet(
    rows: list[PriceRow],
    sheet: str,
    *,
    tier: str,
    replica_gpus: int,
    provider: str = CHEAPEST,
    reserved_discount: float | None = None,
) -> Quote | None:
    """A quote from one sheet's rows for one GPU, or None when the sheet has no usable row."""
    if tier == "reserved" and reserved_discount is not None:
        row = pick_row(rows, tier="on_demand", replica_gpus=replica_gpus, provider=provider)
        if row is None:
            return None
        usd = row.usd_per_gpu_hour * (1 - reserved_discount)
        note = (
            f"on-demand ${row.usd_per_gpu_hour:g}/GPU-h less the {reserved_discount:.0%} "
            "committed-term discount"
        )
        return _quote(row, sheet, usd, "reserved", note)
    row = pick_row(rows, tier=tier, replica_gpus=replica_gpus, provider=provider)
    return _quote(row, sheet, row.usd_per_gpu_hour, tier, "") if row else None


def custom_quote(usd_per_gpu_hour: float, scenario_name: str, as_of: dt.date) -> Quote:
    return Quote(
        usd_per_gpu_hour=float(usd_per_gpu_hour),
        provider="custom",
        instance="",
        gpus_per_instance=None,
        region="",
        tier="custom",
        as_of=as_of.isoformat(),
        source=f"price entered on the scenario {scenario_name!r} (pricing.gpu_prices)",
        sheet="scenario",
        note="custom price: overrides the sheet for this scenario",
    )


def resolve_quote(
    *,
    custom_usd: float | None,
    sheet_rows: list[PriceRow],
    sheet_label: str,
    reference_rows: list[PriceRow] | None,
    reference_label: str,
    tier: str,
    replica_gpus: int,
    provider: str = CHEAPEST,
    reserved_discount: float | None = None,
    scenario_name: str = "",
    today: dt.date | None = None,
) -> Quote | None:
    """Apply the module's rules 1-4 for one GPU and one replica size."""
    if custom_usd is not None:
        return custom_quote(custom_usd, scenario_name, today or dt.date.today())
    options = dict(
        tier=tier, replica_gpus=replica_gpus, provider=provider, reserved_discount=reserved_discount
    )
    found = quote_from_sheet(sheet_rows, sheet_label, **options)
    if found is not None or reference_rows is None:
        return found
    fallback = quote_from_sheet(reference_rows, reference_label, **options)
    if fallback is None:
        return None
    note = f"not on {sheet_label}: price from the reference sheet {reference_label}"
    return Quote(**(fallback.as_dict() | {"note": "; ".join(filter(None, [note, fallback.note]))}))


def label(quote: dict | None) -> str:
    """One line for a cell beside a cost: 'AWS p5.48xlarge (8 GPU), on_demand, 2026-11-29'."""
    if not quote:
        return "no price"
    if quote.get("provider") == "custom":
        return f"custom ${quote['usd_per_gpu_hour']:g}/GPU-h ({quote.get('as_of', '')})"
    parts = [f"{quote.get('provider', '')} {quote.get('instance', '')}".strip()]
    parts += [quote.get("tier", ""), quote.get("as_of", "")]
    if "reference sheet" in (quote.get("note") or ""):
        parts.append("reference sheet")
    return ", ".join(p for p in parts if p)
