"""A price sheet that a saved result used is never edited in place."""

import pytest

from pricing.models import GpuHourPrice, LockedSheetError, PriceSheet
from pricing.services import price_sheet_lock, price_sheet_new_version


@pytest.mark.django_db
def test_locked_sheet_refuses_edits_and_new_version_copies_prices(catalog):
    # given the reference sheet, used by a saved result
    sheet = PriceSheet.objects.get()
    price_sheet_lock(sheet)
    price = sheet.gpu_prices.filter(gpu_slug="h100_sxm").first()
    # when someone edits a price or the sheet, then it is refused
    price.usd_per_gpu_hour = 1.0
    with pytest.raises(LockedSheetError):
        price.save()
    sheet.source = "changed"
    with pytest.raises(LockedSheetError):
        sheet.save()
    with pytest.raises(LockedSheetError):
        sheet.delete()
    # and a change goes to version 2, with every price copied and editable
    copy = price_sheet_new_version(PriceSheet.objects.get(pk=sheet.pk))
    assert copy.version == 2 and not copy.locked
    assert copy.gpu_prices.count() == sheet.gpu_prices.count() > 0
    assert copy.api_prices.count() == sheet.api_prices.count() > 0
    edited = copy.gpu_prices.first()
    edited.usd_per_gpu_hour = 1.23
    edited.save()
    assert GpuHourPrice.objects.get(pk=edited.pk).usd_per_gpu_hour == 1.23


@pytest.mark.django_db
def test_reloading_catalog_after_lock_keeps_the_locked_sheet(catalog):
    from django.core.management import call_command

    sheet = PriceSheet.objects.get()
    price_sheet_lock(sheet)
    call_command("load_catalog", verbosity=0)
    assert PriceSheet.objects.count() == 1  # same content: nothing new
