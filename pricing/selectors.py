"""Reads on price sheets: sheet rows -> quotes (pricing.quotes) for a scenario's GPUs."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from .loaders import SHEET_NAME
from .models import GpuHourPrice, PriceSheet
from .quotes import CHEAPEST, PriceRow, Quote, resolve_quote


def reference_sheet() -> PriceSheet | None:
    """The newest version of the shipped reference sheet (the per-GPU fallback)."""
    return PriceSheet.objects.filter(name=SHEET_NAME).order_by("-version").first()


def sheet_label(sheet: PriceSheet | None) -> str:
    return f"{sheet.name} v{sheet.version}" if sheet else ""


def rows_by_gpu(sheet: PriceSheet | None, gpu_slugs) -> dict[str, list[PriceRow]]:
    out: dict[str, list[PriceRow]] = defaultdict(list)
    if sheet is None:
        return out
    fields = [
        "gpu_slug",
        "provider",
        "item",
        "gpus_per_instance",
        "region",
        "tier",
        "usd_per_gpu_hour",
        "as_of",
        "source",
    ]
    for values in GpuHourPrice.objects.filter(sheet=sheet, gpu_slug__in=list(gpu_slugs)).values(
        *fields
    ):
        out[values["gpu_slug"]].append(PriceRow(**values))
    return out


def providers(sheet: PriceSheet | None = None) -> list[str]:
    """Providers with a GPU-hour row on ``sheet`` and on the reference sheet."""
    sheets = [s for s in (sheet, reference_sheet()) if s is not None]
    names = GpuHourPrice.objects.filter(sheet__in=sheets).values_list("provider", flat=True)
    return sorted(set(names), key=str.casefold)


def gpu_quotes(
    *,
    sheet: PriceSheet | None,
    sizes_by_gpu: dict[str, set[int]],
    tier: str,
    gpu_prices: dict[str, float] | None = None,
    provider: str = CHEAPEST,
    reserved_discount: float | None = None,
    scenario_name: str = "",
    today: dt.date | None = None,
) -> dict[str, dict[int, Quote | None]]:
    """{gpu slug: {replica GPUs: quote or None}} for every GPU and replica size asked."""
    reference = reference_sheet()
    fallback = reference if reference is not None and reference != sheet else None
    own = rows_by_gpu(sheet, sizes_by_gpu)
    ref = rows_by_gpu(fallback, sizes_by_gpu) if fallback else None
    custom = gpu_prices or {}
    out = {}
    for slug, sizes in sizes_by_gpu.items():
        out[slug] = {
            n: resolve_quote(
                custom_usd=custom.get(slug),
                sheet_rows=own.get(slug, []),
                sheet_label=sheet_label(sheet) or "no sheet",
                reference_rows=ref.get(slug, []) if ref is not None else None,
                reference_label=sheet_label(fallback),
                tier=tier,
                replica_gpus=n,
                provider=provider or CHEAPEST,
                reserved_discount=reserved_discount,
                scenario_name=scenario_name,
                today=today,
            )
            for n in sorted(sizes)
        }
    return out
