"""Writes on price sheets."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from .models import ApiTokenPrice, GpuHourPrice, PriceSheet


@transaction.atomic
def price_sheet_new_version(sheet: PriceSheet, **changes) -> PriceSheet:
    """Copy ``sheet`` and all its prices into version N+1 (unlocked), applying ``changes``.

    The old version stays untouched, so results that used it can be recomputed exactly.
    """
    latest = PriceSheet.objects.filter(name=sheet.name).aggregate(v=Max("version"))["v"]
    copy = PriceSheet.objects.create(
        name=sheet.name,
        version=latest + 1,
        effective_date=changes.get("effective_date", sheet.effective_date),
        source=changes.get("source", sheet.source),
        as_of=changes.get("as_of", sheet.as_of),
    )
    for price in sheet.gpu_prices.all():
        price.pk = None
        price.sheet = copy
        price.save()
    for price in sheet.api_prices.all():
        price.pk = None
        price.sheet = copy
        price.save()
    return copy


def price_sheet_lock(sheet: PriceSheet) -> None:
    """Freeze a sheet because a saved result used it (an UPDATE, bypassing save())."""
    PriceSheet.objects.filter(pk=sheet.pk).update(locked=True)
    sheet.locked = True


__all__ = ["price_sheet_new_version", "price_sheet_lock", "GpuHourPrice", "ApiTokenPrice"]
