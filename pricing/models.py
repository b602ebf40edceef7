"""What it costs: versioned price sheets of GPU-hours and API tokens.

A sheet that a saved result used is frozen (``locked``): edits then go to a new version made
by :func:`pricing.services.price_sheet_new_version`, so a past run can always be recomputed with
the prices it saw.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models


class LockedSheetError(ValidationError):
    """Raised on an attempt to change a sheet that a saved result used."""


class PriceSheet(models.Model):
    name = models.CharField(max_length=120)
    version = models.PositiveIntegerField(default=1)
    effective_date = models.DateField(help_text="Date from which these prices apply.")
    source = models.TextField(help_text="Where the prices come from.")
    as_of = models.DateField(help_text="Date the source was read.")
    locked = models.BooleanField(
        default=False, help_text="Set once a saved result used this sheet; it is then immutable."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="unique_sheet_version")
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version} ({self.effective_date})"

    def save(self, *args, **kwargs):
        if self.pk and PriceSheet.objects.filter(pk=self.pk, locked=True).exists():
            raise LockedSheetError(
                f"price sheet {self} was used by a saved result; make a new version instead"
            )
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self.locked:
            raise LockedSheetError(f"price sheet {self} was used by a saved result")
        return super().delete(*args, **kwargs)


class SheetRow(models.Model):
    """A row of a sheet: refuses writes once the sheet is locked."""

    sheet = models.ForeignKey(PriceSheet, on_delete=models.CASCADE)
    provider = models.CharField(max_length=80)
    source = models.TextField()
    as_of = models.DateField()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        self._check_unlocked()
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        self._check_unlocked()
        return super().delete(*args, **kwargs)

    def _check_unlocked(self) -> None:
        if PriceSheet.objects.filter(pk=self.sheet_id, locked=True).exists():
            raise LockedSheetError(
                f"price sheet {self.sheet} was used by a saved result; make a new version instead"
            )


def validate_price(value):
    if value is not None and not 0 < value < 10_000:
        raise ValidationError(f"price must be between 0 and 10,000 $, got {value}")


class GpuHourPrice(SheetRow):
    class Tier(models.TextChoices):
        ON_DEMAND = "on_demand", "on-demand"
        RESERVED = "reserved", "reserved / committed"
        SPOT = "spot", "spot"

    sheet = models.ForeignKey(PriceSheet, on_delete=models.CASCADE, related_name="gpu_prices")
    gpu_slug = models.SlugField(help_text="fleets.GpuSku slug this price is for.")
    item = models.CharField(
        max_length=200, help_text="Instance or product as the provider names it."
    )
    gpus_per_instance = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="GPUs in one instance of this item (blank: not stated); a replica is priced "
        "only from instances that can hold it.",
    )
    region = models.CharField(max_length=120, blank=True)
    tier = models.CharField(max_length=20, choices=Tier.choices)
    usd_per_gpu_hour = models.FloatField(validators=[validate_price])

    class Meta:
        ordering = ["gpu_slug", "tier", "usd_per_gpu_hour"]
        constraints = [
            models.UniqueConstraint(
                fields=["sheet", "provider", "item", "region", "tier"], name="unique_gpu_price"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.item} {self.tier} ${self.usd_per_gpu_hour}/GPU-h"


class ApiTokenPrice(SheetRow):
    sheet = models.ForeignKey(PriceSheet, on_delete=models.CASCADE, related_name="api_prices")
    model = models.CharField(max_length=200)
    input_usd_per_mtok = models.FloatField(validators=[validate_price])
    output_usd_per_mtok = models.FloatField(validators=[validate_price])
    cached_input_usd_per_mtok = models.FloatField(
        null=True, blank=True, validators=[validate_price]
    )

    class Meta:
        ordering = ["provider", "model"]
        constraints = [
            models.UniqueConstraint(fields=["sheet", "provider", "model"], name="unique_api_price")
        ]

    def __str__(self) -> str:
        return (
            f"{self.provider} {self.model} ${self.input_usd_per_mtok}/${self.output_usd_per_mtok}"
        )
