"""Load the reference price sheet shipped in pricing/catalog/prices.csv.

Idempotent: if the newest version of the sheet already holds exactly these prices nothing is
written; if it differs and is locked (a saved result used it), a new version is made.
"""

from __future__ import annotations

import csv
import datetime as dt
from pathlib import Path

from django.db import transaction

from .models import ApiTokenPrice, GpuHourPrice, PriceSheet

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
SHEET_NAME = "Reference public prices"
SHEET_SOURCE = (
    "GPU-hours: SkyPilot catalog v8 (AWS, GCP, Lambda, RunPod), per GPU; API tokens: "
    "BerriAI/litellm model_prices_and_context_window.json (litellm 1.110.2). Row sources kept."
)
TIERS = {
    "on_demand": "on_demand_usd_per_gpu_hour",
    "reserved": "reserved_or_committed_usd_per_gpu_hour",
    "spot": "spot_usd_per_gpu_hour",
}


class PriceFileError(ValueError):
    pass


def _money(value: str, line: int, field: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except ValueError as exc:
        raise PriceFileError(f"line {line}: {field} is not a number: {value!r}") from exc
    if not 0 < number < 10_000:
        raise PriceFileError(f"line {line}: {field} = {number} is outside 0 to 10,000 $")
    return number


def _count(value: str | None, line: int) -> int | None:
    """GPUs per instance: blank (not stated) or a whole number from 1 to 72."""
    if value in (None, ""):
        return None
    if not value.isdigit() or not 1 <= int(value) <= 72:
        raise PriceFileError(f"line {line}: gpus_per_instance = {value!r} is not 1 to 72")
    return int(value)


def _as_of(value: str, line: int) -> dt.date:
    """ISO date; a month alone ("2024-12 (note)") means its first day, the note kept in source."""
    text = value.strip()
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        pass
    try:
        return dt.date.fromisoformat(text[:7] + "-01")
    except ValueError as exc:
        raise PriceFileError(f"line {line}: as_of_date is not a date: {value!r}") from exc


def read_price_rows(path: Path) -> tuple[list[dict], list[dict]]:
    gpu_rows, api_rows = [], []
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            common = {
                "provider": row["provider"],
                "source": row["source"],
                "as_of": _as_of(row["as_of_date"], line),
            }
            if row["kind"] == "gpu_hour":
                if not row["gpu_slug"]:
                    continue  # a GPU the catalog does not carry (A10G, GH200, A100 40GB...)
                for tier, column in TIERS.items():
                    price = _money(row[column], line, column)
                    if price is not None:
                        gpu_rows.append(
                            common
                            | {
                                "gpu_slug": row["gpu_slug"],
                                "item": row["item"],
                                "gpus_per_instance": _count(row.get("gpus_per_instance"), line),
                                "region": row["region_or_tier"],
                                "tier": tier,
                                "usd_per_gpu_hour": price,
                            }
                        )
            elif row["kind"] == "api_tokens":
                api_rows.append(
                    common
                    | {
                        "model": row["item"],
                        "input_usd_per_mtok": _money(row["input_usd_per_mtok"], line, "input"),
                        "output_usd_per_mtok": _money(row["output_usd_per_mtok"], line, "output"),
                        "cached_input_usd_per_mtok": _money(
                            row["cached_input_usd_per_mtok"], line, "cached_input"
                        ),
                    }
                )
            else:
                raise PriceFileError(f"line {line}: unknown kind {row['kind']!r}")
    return gpu_rows, api_rows


def _snapshot(sheet: PriceSheet) -> tuple[set, set]:
    gpu_fields = [
        "provider",
        "source",
        "as_of",
        "gpu_slug",
        "item",
        "gpus_per_instance",
        "region",
        "tier",
        "usd_per_gpu_hour",
    ]
    api_fields = [
        "provider",
        "source",
        "as_of",
        "model",
        "input_usd_per_mtok",
        "output_usd_per_mtok",
        "cached_input_usd_per_mtok",
    ]
    gpus = {tuple(r.values()) for r in sheet.gpu_prices.values(*gpu_fields)}
    apis = {tuple(r.values()) for r in sheet.api_prices.values(*api_fields)}
    return gpus, apis


@transaction.atomic
def load_prices(path: Path = CATALOG_DIR / "prices.csv") -> str:
    gpu_rows, api_rows = read_price_rows(path)
    as_of = max(r["as_of"] for r in gpu_rows + api_rows)
    wanted = ({tuple(r.values()) for r in gpu_rows}, {tuple(r.values()) for r in api_rows})
    latest = PriceSheet.objects.filter(name=SHEET_NAME).order_by("-version").first()
    if latest is not None and _snapshot(latest) == wanted:
        return "unchanged"
    if latest is not None and not latest.locked:
        latest.gpu_prices.all().delete()
        latest.api_prices.all().delete()
        sheet, action = latest, "updated"
    else:
        sheet = PriceSheet.objects.create(
            name=SHEET_NAME,
            version=(latest.version + 1) if latest else 1,
            effective_date=as_of,
            source=SHEET_SOURCE,
            as_of=as_of,
        )
        action = "created"
    GpuHourPrice.objects.bulk_create(GpuHourPrice(sheet=sheet, **r) for r in gpu_rows)
    ApiTokenPrice.objects.bulk_create(ApiTokenPrice(sheet=sheet, **r) for r in api_rows)
    return action
