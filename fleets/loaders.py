"""Load the catalog fixtures shipped in fleets/catalog/ (users do not have the reference folder)."""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections import Counter
from pathlib import Path

from django.core.exceptions import ValidationError

from .services import gpu_sku_upsert, model_architecture_upsert

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"


class CatalogError(ValueError):
    """A fixture row that cannot be loaded; the message names the file, line and field."""


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and hasattr(exc, "message_dict"):
        return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc)


def load_gpus(path: Path = CATALOG_DIR / "gpus.csv") -> Counter:
    actions: Counter = Counter()
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                _, action = gpu_sku_upsert(row)
            except (ValidationError, ValueError) as exc:
                raise CatalogError(f"{path.name} line {line}: {_describe(exc)}") from exc
            actions[action] += 1
    return actions


def _billions(value: str) -> float | None:
    return float(value) * 1e9 if value not in (None, "") else None


def load_models(path: Path = CATALOG_DIR / "models.csv") -> Counter:
    actions: Counter = Counter()
    with path.open(newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            config_path = path.parent / "model_configs" / row["config_file"]
            try:
                config = json.loads(config_path.read_text())
                _, action = model_architecture_upsert(
                    hf_id=row["hf_id"],
                    slug=row["slug"],
                    name=row["name"],
                    aliases=[a for a in row["aliases"].split("|") if a],
                    config=config,
                    source=row["source"],
                    as_of=dt.date.fromisoformat(row["as_of"]),
                    published_total_params=_billions(row["published_total_b"]),
                    published_active_params=_billions(row["published_active_b"]),
                    published_source=row["published_source"],
                )
            except (ValidationError, ValueError, OSError) as exc:
                raise CatalogError(f"{path.name} line {line}: {_describe(exc)}") from exc
            actions[action] += 1
    return actions
