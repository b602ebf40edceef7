"""The nested scenario document (API body, plan file) <-> the flat fields of the service.

The document groups fields the way a reviewer thinks (traffic, SLO, candidates, pricing, API
alternative, policy); the service and the model are flat. Error keys are translated back to
the document's dotted paths so a client sees "traffic.prompt_tokens.p95", not a column name.
"""

from __future__ import annotations

from typing import Any

# flat field -> path in the nested document
PATHS: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "description": ("description",),
    "tags": ("tags",),
    "peak_rps": ("traffic", "peak_rps"),
    "mean_rps": ("traffic", "mean_rps"),
    "hourly_rps": ("traffic", "hourly_rps"),
    "prompt_tokens_mean": ("traffic", "prompt_tokens", "mean"),
    "prompt_tokens_p95": ("traffic", "prompt_tokens", "p95"),
    "output_tokens_mean": ("traffic", "output_tokens", "mean"),
    "output_tokens_p95": ("traffic", "output_tokens", "p95"),
    "shared_prefix_tokens": ("traffic", "shared_prefix_tokens"),
    "prefix_hit_rate": ("traffic", "prefix_hit_rate"),
    "images_per_request": ("traffic", "images_per_request"),
    "tokens_per_image": ("traffic", "tokens_per_image"),
    "image_tiles": ("traffic", "image_tiles"),
    "tile_px": ("traffic", "tile_px"),
    "ttft_ms": ("slo", "ttft_ms"),
    "tpot_ms": ("slo", "tpot_ms"),
    "slo_percentile": ("slo", "percentile"),
    "goodput_target": ("slo", "goodput_target"),
    "models": ("candidates", "models"),
    "gpus": ("candidates", "gpus"),
    "precisions": ("candidates", "precisions"),
    "tp_options": ("candidates", "tp"),
    "pp_options": ("candidates", "pp"),
    "ep_options": ("candidates", "ep"),
    "engine": ("candidates", "engine"),
    "calibration_profile": ("candidates", "calibration_profile"),
    "engine_settings": ("engine",),
    "serving": ("serving",),
    "tier": ("pricing", "tier"),
    "price_sheet": ("pricing", "price_sheet"),
    "gpu_prices": ("pricing", "gpu_prices"),
    "price_provider": ("pricing", "provider"),
    "reserved_discount": ("pricing", "reserved_discount"),
    "api_provider": ("api_alternative", "provider"),
    "api_model": ("api_alternative", "model"),
    "api_input_usd_per_mtok": ("api_alternative", "input_usd_per_mtok"),
    "api_output_usd_per_mtok": ("api_alternative", "output_usd_per_mtok"),
    "target_utilization": ("policy", "target_utilization"),
    "spare_replicas": ("policy", "spare_replicas"),
    "burst_factor": ("policy", "burst_factor"),
    "warm_pool_replicas": ("policy", "warm_pool_replicas"),
    "spare_nodes": ("policy", "spare_nodes"),
    # whole blocks, validated key by key in planner.lifecycle
    "cold_start": ("cold_start",),
    "autoscaling": ("autoscaling",),
    "ownership": ("ownership",),
}
GROUPS = {path[0] for path in PATHS.values() if len(path) > 1}
_MISSING = object()


class DocumentError(ValueError):
    def __init__(self, errors: dict[str, list[str]]):
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def _get(document: dict, path: tuple[str, ...]):
    node: Any = document
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def flatten(document: Any) -> dict:
    """Nested document -> flat service fields (only the fields present)."""
    if not isinstance(document, dict):
        raise DocumentError({"non_field_errors": ["expected a JSON object"]})
    errors: dict[str, list[str]] = {}
    for group in GROUPS:
        if group in document and not isinstance(document[group], dict):
            errors[group] = ["must be an object"]
    for group in ("prompt_tokens", "output_tokens"):
        traffic = document.get("traffic")
        if isinstance(traffic, dict) and group in traffic and not isinstance(traffic[group], dict):
            errors[f"traffic.{group}"] = ['must be an object like {"mean": 1000, "p95": 3000}']
    known = set(PATHS) | GROUPS
    unknown = sorted(set(document) - {p[0] for p in PATHS.values()} - known)
    if unknown:
        errors["non_field_errors"] = [f"unknown fields: {', '.join(unknown)}"]
    if errors:
        raise DocumentError(errors)
    flat = {}
    for field, path in PATHS.items():
        value = _get(document, path)
        if value is not _MISSING:
            flat[field] = value
    return flat


def error_path(field: str) -> str:
    """The document path of a flat field; ``engine_settings.max_num_seqs`` (an error inside
    a block) becomes ``engine.max_num_seqs``."""
    head, _, rest = field.partition(".")
    if field not in PATHS and head in PATHS and rest:
        return ".".join((*PATHS[head], rest))
    return ".".join(PATHS[field]) if field in PATHS else field


def nest_errors(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    return {error_path(field): messages for field, messages in errors.items()}


def nest(flat: dict) -> dict:
    """Flat values -> nested document."""
    document: dict = {}
    for field, path in PATHS.items():
        if field not in flat:
            continue
        node = document
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = flat[field]
    return document
