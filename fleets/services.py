"""Writes on the fleets catalog: GPU SKUs and model architectures."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import fields

from django.core.exceptions import ValidationError
from django.db import transaction

from .architecture import Architecture, ConfigError, count_parameters, parse_hf_config
from .models import GpuSku, ModelArchitecture
from .validation import check_range

GPU_REQUIRED = (
    "memory_gb",
    "hbm_bandwidth_tb_s",
    "bf16_tflops",
    "scale_up_bw_gb_s",
    "gpus_per_node",
    "scale_up_domain_gpus",
)
GPU_OPTIONAL = ("fp8_tflops", "fp4_tflops", "int8_tops", "tdp_w", "nic_gb_s")
GPU_TEXT = (
    "name",
    "vendor",
    "form_factor",
    "memory_type",
    "scale_up_link",
    "scale_up_interconnect",
    "notes",
    "source",
    "nic_source",
)
ARCH_FIELDS = [f.name for f in fields(Architecture) if f.name != "notes"]


def _number(value: str | float | None) -> float | None:
    if value in (None, ""):
        return None
    return float(value)


def gpu_values_from_row(row: dict) -> dict:
    """Validate one catalog row (strings, as read from CSV) and return model field values.

    Raises ValidationError naming every bad field.
    """
    errors: dict[str, list[str]] = {}
    for name in GPU_REQUIRED + GPU_OPTIONAL:
        problems = check_range(name, row.get(name), required=name in GPU_REQUIRED)
        if problems:
            errors[name] = problems
    for name in ("slug", "name", "source", "as_of", "scale_up_link"):
        if not (row.get(name) or "").strip():
            errors[name] = [f"{name} is required"]
    if row.get("scale_up_link") and row["scale_up_link"] not in GpuSku.Link.values:
        errors["scale_up_link"] = [f"scale_up_link must be one of {GpuSku.Link.values}"]
    if errors:
        raise ValidationError(errors)
    values = {name: _number(row.get(name)) for name in GPU_REQUIRED + GPU_OPTIONAL}
    values["gpus_per_node"] = int(values["gpus_per_node"])
    values["scale_up_domain_gpus"] = int(values["scale_up_domain_gpus"])
    values.update({name: (row.get(name) or "").strip() for name in GPU_TEXT})
    mig = row.get("mig_max_instances")
    values["mig_max_instances"] = int(mig) if mig not in (None, "") else None
    aliases = row.get("aliases") or []
    values["aliases"] = (
        aliases if isinstance(aliases, list) else [a for a in aliases.split("|") if a]
    )
    values["as_of"] = dt.date.fromisoformat(str(row["as_of"]))
    return values


def _upsert(model, lookup: dict, values: dict) -> tuple[object, str]:
    """Create or update a row, writing only when something changed. Returns (row, action)."""
    row = model.objects.filter(**lookup).first()
    if row is None:
        row = model(**lookup, **values)
        row.full_clean()
        row.save()
        return row, "created"
    changed = {k: v for k, v in values.items() if getattr(row, k) != v}
    if not changed:
        return row, "unchanged"
    for key, value in changed.items():
        setattr(row, key, value)
    row.full_clean()
    row.save()
    return row, "updated"


def gpu_sku_upsert(row: dict) -> tuple[GpuSku, str]:
    values = gpu_values_from_row(row)
    return _upsert(GpuSku, {"slug": row["slug"].strip()}, values)


def _model_slug(hf_id: str) -> str:
    base = hf_id.split("/")[-1].lower()
    return re.sub(r"[^a-z0-9._-]+", "-", base).strip("-._")[:120] or "model"


def architecture_values(config: dict) -> dict:
    """Parse a config.json dict into ModelArchitecture field values (parameter counts too)."""
    arch = parse_hf_config(config)
    counts = count_parameters(arch)
    values = {name: getattr(arch, name) for name in ARCH_FIELDS}
    values.update(
        total_params=float(counts["total"]),
        active_params=float(counts["active"]),
        embedding_params=float(counts["embedding"]),
        params_per_expert=float(counts["per_expert"]),
        config_json=config,
        notes="; ".join(arch.notes),
    )
    return values


@transaction.atomic
def model_architecture_upsert(
    *,
    hf_id: str,
    config: dict,
    source: str,
    as_of: dt.date,
    name: str = "",
    slug: str = "",
    aliases: list[str] | None = None,
    published_total_params: float | None = None,
    published_active_params: float | None = None,
    published_source: str = "",
    owner=None,
) -> tuple[ModelArchitecture, str]:
    """Add or update a model from its config.json; nothing is written if parsing fails.

    ``owner`` is set on a new row only (a user's import; the catalog's rows have none)."""
    values = architecture_values(config)
    existing = ModelArchitecture.objects.filter(hf_id=hf_id).first()
    values.update(name=name or hf_id.split("/")[-1], source=source, as_of=as_of)
    if existing is None:
        values["slug"] = slug or _model_slug(hf_id)
        values["owner"] = owner
    elif slug:
        values["slug"] = slug
    optional = {
        "aliases": aliases,
        "published_total_params": published_total_params,
        "published_active_params": published_active_params,
        "published_source": published_source,
    }
    # A re-import from a bare config.json keeps what the catalog knew (aliases, headlines).
    values.update({key: value for key, value in optional.items() if value})
    return _upsert(ModelArchitecture, {"hf_id": hf_id}, values)


class ModelImportRefused(ValueError):
    """A config.json that cannot be imported, in one line; nothing was written.

    ``field`` is "name" when the name is at fault, else "config"."""

    def __init__(self, message: str, field: str = "config"):
        super().__init__(message)
        self.field = field


MAX_MODEL_ID_CHARS = 200


def model_import(
    *, config, source: str, name: str = "", hf_id: str = "", fallback_id: str = "", owner=None
) -> tuple[ModelArchitecture, str]:
    """Import a Hugging Face config.json: ``manage.py import_hf_config``, the UI and the API.

    The id is ``hf_id``, else ``name``, else the config's ``_name_or_path``, else
    ``fallback_id``. An ``owner`` (a user's import) may update only their own model; the
    catalog's and other users' ids are taken.

    Raises
    ------
    ModelImportRefused
        Not a JSON object, no id, an id taken, or a config the sizing cannot use (the reason
        from ``parse_hf_config`` / the field validators).
    """
    if not isinstance(config, dict):
        raise ModelImportRefused("a config.json must be a JSON object")
    guessed = str(config.get("_name_or_path") or "").strip("/")
    if guessed.startswith("/") or not guessed:
        guessed = fallback_id
    hf_id = (hf_id or name or guessed).strip()
    if not hf_id:
        raise ModelImportRefused("give the model a name", "name")
    if len(hf_id) > MAX_MODEL_ID_CHARS:
        raise ModelImportRefused(f"the name is {len(hf_id)} characters; at most 200", "name")
    existing = ModelArchitecture.objects.filter(hf_id=hf_id).first()
    if owner is not None and existing is not None and existing.owner_id != owner.pk:
        raise ModelImportRefused(f"the name {hf_id!r} is taken; choose another", "name")
    try:
        return model_architecture_upsert(
            hf_id=hf_id,
            name=name or hf_id.split("/")[-1],
            config=config,
            source=source,
            as_of=dt.date.today(),
            owner=owner,
        )
    except ConfigError as exc:
        raise ModelImportRefused(str(exc)) from exc
    except ValidationError as exc:
        fields = getattr(exc, "error_dict", {})
        name_fault = bool({"slug", "hf_id", "name"} & set(fields))
        raise ModelImportRefused(exc.messages[0], "name" if name_fault else "config") from exc


class CatalogRowInUse(ValidationError):
    """A GPU or model that scenarios name as a candidate: deleting it would silently empty
    their candidate lists."""


def check_deletable(row: GpuSku | ModelArchitecture) -> None:
    count = row.scenarios.count()
    if count:
        raise CatalogRowInUse(
            f"{row.name} is a candidate in {count} scenario{'s' if count != 1 else ''}; "
            "remove it from them before deleting it"
        )
