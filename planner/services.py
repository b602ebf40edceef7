"""Writes: create and update scenarios, start sizing runs, share links.

Views, the API and tasks call these; they hold no logic of their own. Every write validates
first and saves inside one transaction, so bad input never leaves a half-saved row.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fleets.models import GpuSku, ModelArchitecture
from planner import lifecycle
from planner import prices as scenario_prices
from planner import snapshot as snap
from planner.models import (
    PRECISIONS,
    Scenario,
    ShareLink,
    SizingRun,
    batch_count_for,
    hash_share_token,
)
from planner.selectors import (
    catalog_index,
    gpu_spec,
    latest_price_sheet,
    model_spec,
    models_visible_to,
)
from pricing.models import ApiTokenPrice, PriceSheet
from pricing.services import price_sheet_lock
from sizing.breakeven import api_usd_per_token
from sizing.engine_settings import SettingError, engine_overrides
from sizing.length_law import p95_limit_message
from sizing.precision import checkpoint_from_hf_config
from sizing.serving import (
    component_precisions,
    disaggregation_on,
    draft_model_name,
    serving_overrides,
)
from sizing.specs import (
    ApiPrice,
    EngineSettings,
    Policy,
    Slo,
    Traffic,
)
from sizing.vision import DEFAULT_TILE_PX, derived_tokens_per_image, vision_from_hf_config

log = logging.getLogger(__name__)

SCALAR_FIELDS = [
    "name",
    "description",
    "tags",
    "peak_rps",
    "mean_rps",
    "hourly_rps",
    "prompt_tokens_mean",
    "prompt_tokens_p95",
    "output_tokens_mean",
    "output_tokens_p95",
    "shared_prefix_tokens",
    "prefix_hit_rate",
    "images_per_request",
    "tokens_per_image",
    "image_tiles",
    "tile_px",
    "ttft_ms",
    "tpot_ms",
    "slo_percentile",
    "goodput_target",
    "precisions",
    "tp_options",
    "pp_options",
    "ep_options",
    "engine",
    "calibration_profile",
    "engine_settings",
    "serving",
    "tier",
    "gpu_prices",
    "price_provider",
    "reserved_discount",
    "api_provider",
    "api_model",
    "api_input_usd_per_mtok",
    "api_output_usd_per_mtok",
    "target_utilization",
    "spare_replicas",
    "burst_factor",
    "warm_pool_replicas",
    "spare_nodes",
    *lifecycle.BLOCKS,
]
MAX_CANDIDATES = 20_000
MAX_PROMPT_TOKENS = 10_000_000  # as Scenario.prompt_tokens_mean's limit
MAX_DESCRIPTION_CHARS, MAX_TAGS, MAX_TAG_CHARS = 10_000, 20, 50  # as the API serializer
#: requests/s the fleet is sized for, peak x burst / utilization; far above any real fleet, and
#: low enough that every replica and GPU count fits its (bigint) column.
MAX_PROVISIONED_RPS = 1e8


class Errors:
    """Collects field errors; raises one ValidationError with all of them."""

    def __init__(self):
        self.by_field: dict[str, list[str]] = {}

    def add(self, field: str, message: str) -> None:
        self.by_field.setdefault(field, []).append(message)

    def raise_if_any(self) -> None:
        if self.by_field:
            raise ValidationError(self.by_field)


def _int_list(errors: Errors, field: str, values, low: int, high: int) -> list[int]:
    if values in (None, ""):
        return []
    if not isinstance(values, list | tuple):
        errors.add(field, "must be a list of integers")
        return []
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors.add(field, f"{value!r} is not an integer from {low} to {high}")
        else:
            out.append(value)
    return sorted(set(out))


def _resolve(errors: Errors, field: str, names, finder) -> list[int]:
    if not isinstance(names, list | tuple) or not names:
        errors.add(field, "give at least one name")
        return []
    ids = []
    for name in names:
        try:
            ids.append(finder(str(name)))
        except LookupError as exc:
            errors.add(field, str(exc))
    return list(dict.fromkeys(ids))


def _check_p95_lengths(errors: Errors, data: dict) -> None:
    """Each p95 within the length law's range (``p95_limit_message``), named by its field."""
    for kind in ("prompt_tokens", "output_tokens"):
        mean, p95 = data.get(f"{kind}_mean"), data.get(f"{kind}_p95")
        if isinstance(mean, int | float) and isinstance(p95, int | float) and mean > 0:
            problem = p95_limit_message(mean, p95)  # the length law's own range
            if problem:
                errors.add(f"{kind}_p95", problem)


def _check_lengths(errors: Errors, data: dict) -> None:
    _check_p95_lengths(errors, data)
    peak, mean = data.get("peak_rps"), data.get("mean_rps")
    if isinstance(peak, int | float) and isinstance(mean, int | float) and mean > peak:
        errors.add("mean_rps", f"mean rate ({mean:g}/s) cannot exceed the peak ({peak:g}/s)")
    _check_provisioned_rate(errors, data)
    hourly = data.get("hourly_rps") or []
    if hourly:
        if not isinstance(hourly, list) or len(hourly) != 24:
            errors.add("hourly_rps", "give 24 hourly values (requests/s), or none")
        elif any(not _finite_number(v) or v < 0 for v in hourly):
            errors.add("hourly_rps", "each hourly value must be a finite number >= 0")
        elif _finite_number(mean) and mean > 0:
            _check_profile_mean(errors, hourly, mean)


#: How far a 24-hour profile's mean may sit from the declared mean rate (rounding).
PROFILE_MEAN_TOLERANCE = 0.01


def _check_profile_mean(errors: Errors, hourly: list, mean: float) -> None:
    """The day's cost and the hybrid split use the profile, the fleet's utilization the mean
    rate: they must describe the same traffic."""
    profile_mean = sum(hourly) / len(hourly)
    if abs(profile_mean - mean) > PROFILE_MEAN_TOLERANCE * mean:
        errors.add(
            "hourly_rps",
            f"the 24 hourly values average {profile_mean:.4g} requests/s but mean_rps is "
            f"{mean:g}: they must agree within {PROFILE_MEAN_TOLERANCE:.0%}",
        )


def _check_blocks(errors: Errors, merged: dict) -> None:
    for name in lifecycle.BLOCKS:
        clean, block_errors = lifecycle.clean_block(name, merged.get(name))
        for field, messages in block_errors.items():
            for message in messages:
                errors.add(field, message)
        merged[name] = clean


def _finite_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_text_sizes(errors: Errors, data: dict) -> None:
    """The API's size limits, for every door (form, API, plan file)."""
    description = data.get("description") or ""
    if isinstance(description, str) and len(description) > MAX_DESCRIPTION_CHARS:
        errors.add("description", f"at most {MAX_DESCRIPTION_CHARS:,} characters")
    tags = data.get("tags") or []
    if isinstance(tags, list):
        if len(tags) > MAX_TAGS:
            errors.add("tags", f"at most {MAX_TAGS} tags")
        if any(isinstance(t, str) and len(t) > MAX_TAG_CHARS for t in tags):
            errors.add("tags", f"each tag at most {MAX_TAG_CHARS} characters")


def _check_provisioned_rate(errors: Errors, data: dict) -> None:
    rates = [data.get(f) for f in ("peak_rps", "burst_factor", "target_utilization")]
    if not all(_finite_number(v) and v > 0 for v in rates):
        return  # each is checked on its own
    peak, burst, utilization = rates
    provisioned = peak * burst / utilization
    if provisioned > MAX_PROVISIONED_RPS:
        message = (
            f"peak_rps x burst_factor / target_utilization = {provisioned:.3g} requests/s "
            f"exceeds the limit of {MAX_PROVISIONED_RPS:.0e}"
        )
        for field in ("peak_rps", "burst_factor", "target_utilization"):
            errors.add(field, message)


def _check_tp_divides_heads(errors: Errors, tp_options: list[int], model_ids: list[int]) -> None:
    for row in ModelArchitecture.objects.filter(pk__in=model_ids):
        for tp in tp_options:
            if row.num_attention_heads % tp:
                errors.add(
                    "tp_options",
                    f"TP {tp} does not divide the {row.num_attention_heads} attention heads "
                    f"of {row.name}",
                )


def engine_settings_for(
    engine: str, engine_block, serving_block, model_ids, index=None
) -> EngineSettings:
    """The core's engine settings for a scenario's ``engine`` and ``serving`` blocks (the
    draft model resolved in the catalog, checked against every candidate model); raises
    SettingError naming the field."""
    base = EngineSettings(engine=engine or "vllm")
    values = engine_overrides(engine_block or {}, base)
    draft = None
    name = draft_model_name(serving_block)
    if name:
        index = index or catalog_index()
        try:
            draft = model_spec(ModelArchitecture.objects.get(pk=index.model_id(name)))
        except LookupError as exc:
            raise SettingError("serving.speculative.draft_model", str(exc)) from exc
    targets = tuple(model_spec(m) for m in ModelArchitecture.objects.filter(pk__in=model_ids))
    values |= serving_overrides(serving_block or {}, draft, targets)
    return EngineSettings(**(vars(base) | values))


def _check_engine_and_serving(errors: Errors, merged: dict, model_ids, index) -> None:
    for name in ("engine_settings", "serving"):
        if merged.get(name) in (None, ""):
            merged[name] = {}
    try:
        engine_settings_for(
            merged.get("engine") or "vllm",
            merged["engine_settings"],
            merged["serving"],
            model_ids,
            index,
        )
    except SettingError as exc:
        top = exc.field.split(".")[0]
        field = exc.field if top in ("serving", "engine") else f"engine_settings.{exc.field}"
        errors.add("engine_settings" if field == "engine" else field, exc.message)


def _check_images(errors: Errors, merged: dict, model_ids) -> None:
    """Images need a token count (given, or from every candidate model's vision config), and
    the prompt with its image tokens stays within the prompt limit."""
    images = merged.get("images_per_request")
    if not _finite_number(images) or images <= 0:
        return
    given, prompt = merged.get("tokens_per_image"), merged.get("prompt_tokens_mean")
    tiles, tile_px = merged.get("image_tiles", 1.0), merged.get("tile_px", DEFAULT_TILE_PX)
    if not (_finite_number(tiles) and _finite_number(tile_px)):
        return  # checked on their own
    for row in ModelArchitecture.objects.filter(pk__in=model_ids):
        per_image = given if _finite_number(given) and given > 0 else None
        if per_image is None:
            if not vision_from_hf_config(row.config_json or {}):
                errors.add(
                    "tokens_per_image",
                    f"{row.name} has no vision config: give tokens_per_image for its images",
                )
                continue
            per_image = derived_tokens_per_image(model_spec(row), tiles, tile_px)
        if _finite_number(prompt) and prompt + images * per_image > MAX_PROMPT_TOKENS:
            errors.add(
                "images_per_request",
                f"{row.name}: prompt + images x tokens_per_image = "
                f"{prompt + images * per_image:,.0f} tokens exceeds {MAX_PROMPT_TOKENS:,}",
            )


@dataclass
class CleanScenario:
    scalars: dict
    model_ids: list[int]
    gpu_ids: list[int]
    price_sheet: PriceSheet | None


def clean_scenario_data(
    data: dict, *, partial_of: Scenario | None = None, owner=None
) -> CleanScenario:
    """Validate scenario input (API body, form or plan file); raise ValidationError by field.

    With an ``owner`` (or ``partial_of``'s), models resolve among the catalog and the models
    that user imported, and the calibration profile among the profiles they may use."""
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": ["expected a JSON object"]})
    errors = Errors()
    base = {}
    if partial_of is not None:
        base = {f: getattr(partial_of, f) for f in SCALAR_FIELDS}
    merged = base | {k: v for k, v in data.items() if k in SCALAR_FIELDS}
    owner = owner if owner is not None else (partial_of.owner if partial_of else None)
    index = catalog_index(models_visible_to(owner) if owner is not None else None)
    if partial_of is not None and "models" not in data:
        model_ids = list(partial_of.candidate_models.values_list("pk", flat=True))
    else:
        model_ids = _resolve(errors, "models", data.get("models"), index.model_id)
    if partial_of is not None and "gpus" not in data:
        gpu_ids = list(partial_of.candidate_gpus.values_list("pk", flat=True))
    else:
        gpu_ids = _resolve(errors, "gpus", data.get("gpus"), index.gpu_id)
    precisions = merged.get("precisions") or []
    if not isinstance(precisions, list) or not precisions:
        errors.add("precisions", f"give at least one of {', '.join(PRECISIONS)}")
    else:
        bad = [p for p in precisions if str(p).lower() not in PRECISIONS]
        if bad:
            errors.add("precisions", f"unknown {bad}; known: {', '.join(PRECISIONS)}")
        merged["precisions"] = list(dict.fromkeys(str(p).lower() for p in precisions))
    merged["tp_options"] = _int_list(errors, "tp_options", merged.get("tp_options"), 1, 72)
    merged["pp_options"] = _int_list(errors, "pp_options", merged.get("pp_options"), 1, 16)
    merged["ep_options"] = _int_list(errors, "ep_options", merged.get("ep_options"), 1, 512)
    tags = merged.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        errors.add("tags", "must be a list of strings")
    _check_lengths(errors, merged)
    _check_text_sizes(errors, merged)
    _check_blocks(errors, merged)
    if merged["tp_options"] and model_ids:
        _check_tp_divides_heads(errors, merged["tp_options"], model_ids)
    sheet = _price_sheet(errors, data, partial_of)
    scenario_prices.clean_pricing(errors, merged, index, sheet or latest_price_sheet())
    _check_calibration_profile(errors, merged.get("calibration_profile") or "", owner, gpu_ids)
    _check_engine_and_serving(errors, merged, model_ids, index)
    _check_images(errors, merged, model_ids)
    _check_precision_models(errors, merged, model_ids, index)
    scenario = Scenario(**{k: v for k, v in merged.items() if k in SCALAR_FIELDS})
    try:
        scenario.clean_fields(exclude=["owner", "price_sheet"])
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                errors.add(field, message)
    errors.raise_if_any()
    return CleanScenario(merged, model_ids, gpu_ids, sheet)


def _price_sheet(errors: Errors, data: dict, partial_of: Scenario | None) -> PriceSheet | None:
    if "price_sheet" not in data:
        return partial_of.price_sheet if partial_of else None
    value = data["price_sheet"]
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add("price_sheet", "must be a price sheet id (integer) or null")
        return None
    sheet = PriceSheet.objects.filter(pk=value).first()
    if sheet is None:
        errors.add("price_sheet", f"price sheet {value} does not exist")
    return sheet


def calibration_profile_choices(owner, gpu_ids=None) -> list[tuple[str, str]]:
    """(name, label) of the profiles a scenario may pin: the shared fits and the owner's own
    uploads. A GPU profile pins its GPU; a generation profile (no GPU) pins every candidate GPU
    of that generation; the other GPUs keep the best match. With ``gpu_ids``, only profiles
    that cover one of those GPUs."""
    from django.db.models import Q

    from fleets.calibration import generation_of
    from fleets.models import CalibrationProfile

    visible = Q(owner__isnull=True) | (Q(owner=owner) if owner is not None else Q(pk__in=[]))
    rows = CalibrationProfile.objects.filter(visible).select_related("gpu")
    if gpu_ids is not None:
        slugs = GpuSku.objects.filter(pk__in=gpu_ids).values_list("slug", flat=True)
        generations = {generation_of(slug) for slug in slugs} - {""}
        rows = rows.filter(Q(gpu_id__in=gpu_ids) | Q(gpu=None, generation__in=generations))
    choices = {}
    for row in rows.order_by("gpu__name", "generation", "name"):
        mine = " (yours)" if row.owner_id else ""
        place = row.gpu.name if row.gpu_id else f"every {row.get_generation_display()} GPU"
        engine = row.get_engine_family_display()
        # an unversioned fit follows the engine's newest release; its name says which
        newest = re.search(r" (\S+ \(newest\))", row.name)
        version = f" {row.engine_version}" if row.engine_version else ""
        version = f" {newest.group(1)}" if newest and not row.engine_version else version
        precision = f" · {row.precision}" if row.precision else ""
        choices.setdefault(
            row.name,
            f"{place} · {engine}{version}{precision}{mine} · ±{row.relative_error:.0%}",
        )
    return list(choices.items())


def _check_calibration_profile(errors: Errors, name: str, owner, gpu_ids: list[int]) -> None:
    if not name:
        return
    if name not in dict(calibration_profile_choices(owner)):
        errors.add("calibration_profile", f"unknown calibration profile {name!r}")
    elif name not in dict(calibration_profile_choices(owner, gpu_ids)):
        errors.add("calibration_profile", f"profile {name!r} is for a GPU not among the GPUs")


@transaction.atomic
def scenario_create(*, owner, data: dict) -> Scenario:
    clean = clean_scenario_data(data, owner=owner)
    scenario = Scenario(owner=owner, price_sheet=clean.price_sheet, **clean.scalars)
    scenario.save()
    scenario.candidate_models.set(clean.model_ids)
    scenario.candidate_gpus.set(clean.gpu_ids)
    return scenario


@transaction.atomic
def scenario_update(*, scenario: Scenario, data: dict) -> Scenario:
    clean = clean_scenario_data(data, partial_of=scenario)
    for key, value in clean.scalars.items():
        setattr(scenario, key, value)
    scenario.price_sheet = clean.price_sheet
    scenario.save()
    scenario.candidate_models.set(clean.model_ids)
    scenario.candidate_gpus.set(clean.gpu_ids)
    return scenario


# --------------------------------------------------------------------------- runs


def _tp_choices(scenario: Scenario, model: ModelArchitecture, gpu: GpuSku) -> list[int]:
    """Allowed TP degrees, or every power of two inside one node that divides the heads."""
    if scenario.tp_options:
        return scenario.tp_options
    limit = min(gpu.gpus_per_node, gpu.scale_up_domain_gpus, 8)
    return [tp for tp in (1, 2, 4, 8) if tp <= limit and model.num_attention_heads % tp == 0]


def _ep_choices(scenario: Scenario, model: ModelArchitecture, tp: int) -> list[int]:
    if scenario.ep_options:
        return scenario.ep_options
    return [tp] if model.num_experts and tp > 1 else [1]


def expand_candidates(scenario: Scenario, models, gpus) -> list[dict]:
    """model x GPU x precision x TP x PP x EP, as plain dicts keyed by catalog slugs.

    ``serving.precision`` (a mixed checkpoint) gives components their own precision: the
    routed experts, KV cache and embeddings on every row; ``attention`` replaces the swept
    weight precision (the attention and dense weights are what ``precision`` means). A model
    published with only its experts quantized (gpt-oss: MXFP4, from its config.json) keeps
    them at that precision unless ``serving.precision`` names theirs: engines serve that
    checkpoint, so the sweep then varies the attention and dense weights (bf16: as published).
    The sizing core reads a row naming no experts' precision so
    (``sizing.candidates.expert_precision_of``); the row leaves it blank.
    """
    shared = component_precisions(scenario.serving)
    owner = scenario.owner if scenario.owner_id else None  # a plan file has no owner
    per_model = _precisions_by_model(shared.pop("models", {}), owner)
    rows = []
    for model in models:
        components = shared | per_model.get(model.pk, {})
        precisions = [components["attention"]] if "attention" in components else (
            scenario.precisions
        )  # fmt: skip
        mixed = {
            "expert_precision": components.get("experts", ""),
            "embedding_precision": components.get("embeddings", ""),
        }
        # published with its experts at their own precision: mixed too, for the pools' gate
        published = checkpoint_from_hf_config(model.config_json or {})
        for gpu in gpus:
            for precision in precisions:
                for tp in _tp_choices(scenario, model, gpu):
                    for pp in scenario.pp_options or [1]:
                        for ep in _ep_choices(scenario, model, tp):
                            key = f"{model.slug}|{gpu.slug}|{precision}|tp{tp}|pp{pp}|ep{ep}"
                            rows.append(
                                {
                                    "key": key,
                                    "model": model.slug,
                                    "gpu": gpu.slug,
                                    "precision": precision,
                                    "kv_precision": components.get("kv", ""),
                                    "tp": tp,
                                    "pp": pp,
                                    "ep": ep,
                                }
                                | {k: v for k, v in mixed.items() if v}
                            )
                if _disaggregates(scenario, mixed | published):
                    rows.append(_disagg_candidate(scenario, model, gpu, precision, components))
    return rows


def _disaggregates(scenario: Scenario, mixed: dict) -> bool:
    """Whether the plan adds a disaggregated candidate: ``serving.disaggregation`` (default
    true), and nothing the pools do not model yet (image input, LoRA adapters, a mixed
    checkpoint's own expert or embedding precision, the scenario's or the published
    checkpoint's, PP or EP options: sizing.disagg_plan leaves them out). The scenario's TP
    options bound the pools' TP."""
    serving = scenario.serving or {}
    return (
        disaggregation_on(serving)
        and not (scenario.images_per_request or 0) > 0
        and not serving.get("lora")
        and not any(mixed.values())
        # the pools run PP 1 and EP = TP: a scenario pinning other layouts gets none
        and 1 in (scenario.pp_options or [1])
        and not scenario.ep_options
    )


def _disagg_candidate(scenario, model, gpu, precision: str, components: dict) -> dict:
    """One disaggregated candidate of a model x GPU x precision: its pools' TP layout is
    searched when it is sized (sizing.disagg_plan). Its ``tp`` is the GPU's largest TP choice:
    the replica size its GPU-hour price is quoted for (pools rent whole nodes)."""
    tps = [t for t in (1, 2, 4, 8) if t <= gpu.scale_up_domain_gpus] or [1]
    pinned = {"pool_tp_options": list(scenario.tp_options)} if scenario.tp_options else {}
    return pinned | {
        "key": f"{model.slug}|{gpu.slug}|{precision}|disagg",
        "model": model.slug,
        "gpu": gpu.slug,
        "precision": precision,
        "kv_precision": components.get("kv", ""),
        "tp": min(max(tps), gpu.gpus_per_node or 1),
        "pp": 1,
        "ep": 1,
        "mode": "disagg",
    }


def _precisions_by_model(by_name: dict, owner, index=None) -> dict[int, dict]:
    """``serving.precision.models`` keyed by model id (names resolve as the candidates')."""
    if not by_name:
        return {}
    index = index or catalog_index(models_visible_to(owner))
    return {index.model_id(name): components for name, components in by_name.items()}


def _check_precision_models(errors: Errors, merged: dict, model_ids, index) -> None:
    """Each model ``serving.precision.models`` names is one of the candidate models."""
    try:
        by_name = component_precisions(merged.get("serving")).get("models", {})
    except SettingError:
        return  # reported by the serving check
    for name in by_name:
        field = f"serving.precision.models.{name}"
        try:
            model_id = index.model_id(name)
        except LookupError as exc:
            errors.add(field, str(exc))
            continue
        if model_id not in model_ids:
            errors.add(field, f"{name} is not among the candidate models")


def _api_price(scenario: Scenario, sheet: PriceSheet | None) -> ApiPrice | None:
    if scenario.api_input_usd_per_mtok is not None and scenario.api_output_usd_per_mtok is not None:
        label = f"{scenario.api_provider} {scenario.api_model}".strip() or "explicit API price"
        return ApiPrice(
            scenario.api_input_usd_per_mtok, scenario.api_output_usd_per_mtok, label=label
        )
    if scenario.api_model and sheet is not None:
        rows = ApiTokenPrice.objects.filter(sheet=sheet, model__iexact=scenario.api_model)
        if scenario.api_provider:
            rows = rows.filter(provider__iexact=scenario.api_provider)
        row = rows.first()
        if row:
            return _sheet_api_price(row)
    return None


#: Spelling differences between API price sheets and the catalog that do not change the
#: model: an org prefix ("meta-llama/"), "Meta-", and "-Instruct" / "-Turbo" suffixes.
_API_NAME_SUFFIXES = ("-turbo", "-instruct")


def api_name_key(name: str) -> str:
    """A model name reduced so a sheet's API model and a catalog name compare equal
    ("meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo" and "Llama 3.1 8B" -> "llama-3.1-8b")."""
    key = name.rsplit("/", 1)[-1].strip().lower().replace("_", "-").replace(" ", "-")
    key = key.removeprefix("meta-")
    for suffix in _API_NAME_SUFFIXES:
        key = key.removesuffix(suffix)
    return key


def _model_name_keys(model: ModelArchitecture) -> set[str]:
    names = [model.hf_id, model.slug, model.name, *(model.aliases or [])]
    return {api_name_key(n) for n in names if n}


def _api_prices_by_model(models, sheet: PriceSheet | None, traffic: Traffic) -> dict:
    """Per model slug, the sheet's API price for that model (None when the sheet has none):
    the break-even alternative when the scenario names no API. Several providers may serve
    one model; the cheapest at this traffic's input/output mix is the one to beat."""
    rows = list(ApiTokenPrice.objects.filter(sheet=sheet)) if sheet is not None else []
    out: dict[str, dict | None] = {}
    for model in models:
        keys = _model_name_keys(model)
        matches = [(_sheet_api_price(r), r) for r in rows if api_name_key(r.model) in keys]
        if not matches:
            out[model.slug] = None
            continue
        price, row = min(
            matches, key=lambda m: (api_usd_per_token(m[0], traffic), m[1].provider, m[1].model)
        )
        out[model.slug] = snap.to_json(price) | {
            "provider": row.provider,
            "model": row.model,
            "as_of": row.as_of.isoformat(),
            "sheet": f"{sheet.name} v{sheet.version}",
            "source": row.source,
            "matching_rows": len(matches),
        }
    return out


def _sheet_api_price(row: ApiTokenPrice) -> ApiPrice:
    return ApiPrice(
        row.input_usd_per_mtok,
        row.output_usd_per_mtok,
        row.cached_input_usd_per_mtok,
        f"{row.provider} {row.model}",
    )


def build_inputs_snapshot(
    scenario: Scenario, sheet: PriceSheet | None, models=None, gpus=None
) -> dict:
    """Everything a run needs, frozen as JSON (see planner.snapshot).

    ``models`` and ``gpus`` default to the scenario's; pass them for an unsaved scenario.
    """
    models = list(scenario.candidate_models.all()) if models is None else list(models)
    gpus = list(scenario.candidate_gpus.all()) if gpus is None else list(gpus)
    candidates = expand_candidates(scenario, models, gpus)
    priced = scenario_prices.snapshot_prices(scenario, sheet, gpus, candidates)
    quotes = priced["quotes"]
    traffic = Traffic(
        peak_rps=scenario.peak_rps,
        mean_rps=scenario.mean_rps,
        prompt_tokens_mean=scenario.prompt_tokens_mean,
        output_tokens_mean=scenario.output_tokens_mean,
        prompt_tokens_p95=scenario.prompt_tokens_p95,
        output_tokens_p95=scenario.output_tokens_p95,
        shared_prefix_tokens=scenario.shared_prefix_tokens,
        prefix_hit_rate=scenario.prefix_hit_rate,
        hourly_rps=tuple(scenario.hourly_rps or ()),
        images_per_request=scenario.images_per_request or 0.0,
        tokens_per_image=scenario.tokens_per_image or 0.0,
        image_tiles=scenario.image_tiles,
        tile_px=scenario.tile_px,
    )
    api = _api_price(scenario, sheet)
    return {
        "version": snap.SNAPSHOT_VERSION,
        "scenario": {"id": scenario.pk, "name": scenario.name},
        "traffic": snap.to_json(traffic),
        "slo": snap.to_json(
            Slo(
                scenario.ttft_ms, scenario.tpot_ms, scenario.slo_percentile, scenario.goodput_target
            )
        ),
        "policy": snap.to_json(
            Policy(
                scenario.target_utilization,
                scenario.spare_replicas,
                scenario.burst_factor,
                scenario.warm_pool_replicas,
                spare_nodes=scenario.spare_nodes,
            )
        ),
        "api_price": snap.to_json(api) if api else None,
        # the scenario names no API: each model's break-even is against its own sheet price
        "api_prices_by_model": {} if api else _api_prices_by_model(models, sheet, traffic),
        "engine": snap.to_json(_snapshot_engine(scenario, models)),
        "calibrations": _calibrations(scenario, gpus),
        "disagg_fits": _disagg_fits(scenario, gpus, candidates),
        "models": {m.slug: snap.to_json(model_spec(m)) for m in models},
        "gpus": {g.slug: _gpu_json(g, quotes[g.slug]) for g in gpus},
        "gpu_names": {g.slug: g.name for g in gpus},
        "tier": scenario.tier,
        "price_sheet": {"id": sheet.pk, "name": sheet.name, "version": sheet.version}
        if sheet
        else None,
        "gpus_without_price": priced["missing"],
        "price_notes": priced["notes"],
        "pricing": {
            "provider": scenario.price_provider or "cheapest",
            "reserved_discount": scenario.reserved_discount,
            "gpu_prices": scenario.gpu_prices or {},
        },
        "candidates": candidates,
        # re-size the leading candidates on simulated tail latencies (planner.tails)
        "simulate_tails": settings.SIZING_SIMULATE_TAILS,
        # cold start, autoscaling, buy vs rent (planner.lifecycle): the scenario's blocks
        "fleet_life": {name: dict(getattr(scenario, name) or {}) for name in lifecycle.BLOCKS},
    }


def _snapshot_engine(scenario: Scenario, models) -> EngineSettings:
    """The scenario's engine settings; a block that no longer checks (its draft model was
    removed from the catalog) is a field error, not a crash."""
    try:
        return engine_settings_for(
            scenario.engine, scenario.engine_settings, scenario.serving, [m.pk for m in models]
        )
    except SettingError as exc:
        raise ValidationError({exc.field: [exc.message]}) from exc


def _gpu_json(gpu: GpuSku, quotes: dict) -> dict:
    """The GPU's spec priced at its default quote, with every quote and its provenance:
    ``price_source`` (the default's) and ``prices_by_replica_gpus`` ({"8": quote or None})."""
    default = quotes["default"]
    spec = snap.to_json(gpu_spec(gpu, default["usd_per_gpu_hour"] if default else 0.0))
    return spec | {
        "price_source": default,
        "prices_by_replica_gpus": quotes["by_replica_gpus"],
        "tdp_w": gpu.tdp_w,  # owned power (planner.lifecycle)
    }


def _calibrations(scenario: Scenario, gpus) -> dict:
    """Per GPU and per GPU x precision: the calibration profile every door uses (one
    selection, ``fleets.calibration.profile_selector``: the owner's own profile, then the
    shipped ones in their fallback order, then physics defaults). Keys ``slug`` and
    ``slug|precision``; each names its profile."""
    from fleets.calibration import profile_calibration, profile_selector

    select = profile_selector(owner=scenario.owner if scenario.owner_id else None)
    pinned = _pinned_profile(scenario)
    out = {}
    for gpu in gpus:
        if pinned is not None and _covers(pinned, gpu):
            # a pinned profile is used as it is, for every precision of the GPUs it covers
            calibration = profile_calibration(pinned)
            for key in [gpu.slug, *(f"{gpu.slug}|{p}" for p in scenario.precisions or [])]:
                out[key] = snap.to_json(calibration) | {"name": pinned.name}
            continue
        calibration, label = select(gpu.slug, scenario.engine, "")
        out[gpu.slug] = snap.to_json(calibration) | {"name": label}
        for precision in scenario.precisions or []:
            calibration, label = select(gpu.slug, scenario.engine, precision)
            out[f"{gpu.slug}|{precision}"] = snap.to_json(calibration) | {"name": label}
    return out


def _disagg_fits(scenario: Scenario, gpus, candidates: list[dict]) -> dict:
    """Per GPU with a disaggregated candidate: the disaggregated constants its engine's fit
    gives (``sizing.disagg.fit_for``: the GPU x engine fit, else the engine build's on the
    GPU's vendor, else the engine's, else the prior), applied over the GPU's profile when the
    candidate is built (planner.snapshot)."""
    from fleets.calibration import disagg_fits
    from sizing.disagg import fit_for

    wanted = {c["gpu"] for c in candidates if c.get("mode") == "disagg"}
    if not wanted:
        return {}
    fits = disagg_fits()
    out = {}
    for gpu in gpus:
        if gpu.slug in wanted:
            fit = fit_for(fits, scenario.engine, gpu.name, gpu.vendor)
            out[gpu.slug] = {"engine": fit.engine, "values": fit.values, "points": fit.points}
    return out


def _covers(profile, gpu: GpuSku) -> bool:
    """A GPU profile covers its GPU; a generation profile every GPU of its generation."""
    from fleets.calibration import generation_of

    if profile.gpu_id is not None:
        return profile.gpu_id == gpu.pk
    return profile.generation == generation_of(gpu.slug)


def _pinned_profile(scenario: Scenario):
    """The CalibrationProfile row the scenario names (the owner's own first), if any."""
    from django.db.models import Q

    from fleets.models import CalibrationProfile

    if not scenario.calibration_profile:
        return None
    visible = Q(owner__isnull=True) | Q(owner_id=scenario.owner_id)
    return (
        CalibrationProfile.objects.filter(visible, name=scenario.calibration_profile)
        .order_by(F("owner_id").desc(nulls_last=True), "-created")
        .first()
    )


class WorkersUnavailable(RuntimeError):
    """The broker could not take the job; the run is saved and will be enqueued later."""

    def __init__(self, message: str, run: SizingRun | None = None):
        super().__init__(message)
        self.run = run  # the saved, queued run


class RunQuotaExceeded(ValidationError):
    """The owner already has RUNS_ACTIVE_PER_USER runs queued or running (the API's 429)."""

    retry_after_s = 30


def _check_run_quota(scenario: Scenario) -> None:
    """Backpressure: each user may have only so many runs waiting for the workers. The owner's
    row is locked first, so two concurrent starts cannot both take the last place."""
    if scenario.owner_id is None:
        return
    get_user_model().objects.select_for_update().filter(pk=scenario.owner_id).exists()
    limit = settings.RUNS_ACTIVE_PER_USER
    active = SizingRun.objects.filter(
        scenario__owner_id=scenario.owner_id,
        status__in=[SizingRun.Status.QUEUED, SizingRun.Status.RUNNING],
    ).count()
    if active >= limit:
        raise RunQuotaExceeded(
            {
                "runs": [
                    f"{active} of your runs are queued or running, the limit is {limit}; "
                    "start this one when one of them has finished"
                ]
            }
        )


@transaction.atomic
def _create_run(scenario: Scenario) -> SizingRun:
    _check_run_quota(scenario)
    sheet = scenario.price_sheet or latest_price_sheet()
    return _save_run(scenario, build_inputs_snapshot(scenario, sheet), sheet)


def _save_run(scenario: Scenario, inputs: dict, sheet: PriceSheet | None) -> SizingRun:
    """A queued run of ``inputs`` (a snapshot); the sheet it prices from is locked.

    A scenario saved before its p95 range was checked at input (or a run of one, re-run) may
    hold a p95 no lognormal reaches: refused here naming the field, where its run used to fail
    in the workers with a calculation error."""
    errors = Errors()
    _check_p95_lengths(errors, inputs.get("traffic") or {})
    errors.raise_if_any()
    count = len(inputs["candidates"])
    if count == 0:
        raise ValidationError({"candidates": ["no valid candidate (model x GPU x TP) to size"]})
    if count > MAX_CANDIDATES:
        raise ValidationError(
            {
                "candidates": [
                    f"{count} candidates exceed the limit of {MAX_CANDIDATES}; narrow the choices"
                ]
            }
        )
    batches = batch_count_for(count)
    run = SizingRun.objects.create(
        scenario=scenario,
        inputs=inputs,
        price_sheet=sheet,
        candidate_count=count,
        batch_count=batches,
    )
    if sheet is not None:
        price_sheet_lock(sheet)
    return run


def sizing_run_start(*, scenario: Scenario, background: bool = False) -> SizingRun:
    """Save a queued run with its inputs snapshot, then enqueue the Celery chain.

    If the broker is down the run stays saved as queued and ``WorkersUnavailable`` is raised;
    the beat task ``requeue_stuck_runs`` enqueues it once the broker is back. ``background``
    (the browser's runs): with in-process tasks, size in a thread and return the queued run
    at once (``planner.background``).
    """
    return _start(_create_run(scenario), background)


def _start(run: SizingRun, background: bool) -> SizingRun:
    from planner import background as in_thread

    if background and in_thread.wanted():
        in_thread.start_after_commit(run.pk)
        return run
    return _enqueue(run)


def _enqueue(run: SizingRun) -> SizingRun:
    from planner import tasks

    try:
        tasks.enqueue_run(run.pk)
    except tasks.BROKER_ERRORS as exc:
        log.warning("broker unavailable for run %s: %s", run.pk, exc)
        raise WorkersUnavailable(
            f"run {run.pk} is saved and queued; workers are unavailable right now ({exc})", run
        ) from exc
    run.refresh_from_db()
    return run


def sizing_run_rerun(*, run: SizingRun, background: bool = False) -> SizingRun:
    """Run again exactly what ``run`` used: a new run of a copy of its inputs snapshot (same
    specs, prices, calibration and candidates, whatever the scenario or catalog say now).
    Raises ``WorkersUnavailable`` like ``sizing_run_start``."""
    with transaction.atomic():
        rerun = _save_run(run.scenario, copy.deepcopy(run.inputs), run.price_sheet)
    return _start(rerun, background)


# --------------------------------------------------------------------------- share links


def share_link_create(
    *, user, scenario: Scenario, run: SizingRun | None = None, expires_at=None
) -> tuple[ShareLink, str]:
    """Create a read-only link; return it with the raw token (shown once, stored hashed)."""
    if run is not None and run.scenario_id != scenario.pk:
        raise ValidationError({"run": ["this run belongs to another scenario"]})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": ["must be in the future"]})
    token = secrets.token_urlsafe(32)  # 256 bits
    link = ShareLink.objects.create(
        scenario=scenario,
        run=run,
        created_by=user,
        token_sha256=hash_share_token(token),
        expires_at=expires_at,
    )
    return link, token


def share_link_revoke(*, link: ShareLink) -> None:
    if link.revoked_at is None:
        link.revoked_at = timezone.now()
        link.save(update_fields=["revoked_at"])


# --------------------------------------------------------------------------- teams

MAX_SHARED_WITH = 200


def _users_named(usernames) -> list:
    """Users for a list of usernames; ValidationError on ``shared_with`` naming the unknown."""
    from django.contrib.auth import get_user_model

    if not isinstance(usernames, list | tuple) or not all(isinstance(u, str) for u in usernames):
        raise ValidationError({"shared_with": ["must be a list of usernames"]})
    names = list(dict.fromkeys(u.strip() for u in usernames if u.strip()))
    if len(names) > MAX_SHARED_WITH:
        raise ValidationError(
            {"shared_with": [f"{len(names)} users; share with at most {MAX_SHARED_WITH}"]}
        )
    users = {u.username: u for u in get_user_model().objects.filter(username__in=names)}
    unknown = [name for name in names if name not in users]
    if unknown:
        raise ValidationError({"shared_with": [f"no user named {', '.join(unknown)}"]})
    return [users[name] for name in names]


@transaction.atomic
def scenario_share_set(*, scenario: Scenario, usernames) -> list:
    """Share the scenario (read-only) with exactly these colleagues; others lose access.

    The owner never appears in the list (they own it). Returns the users it is shared with.
    """
    users = [u for u in _users_named(usernames) if u.pk != scenario.owner_id]
    scenario.shared_with.set(users)
    return users


# --------------------------------------------------------------------------- scenario life


def scenario_flat(scenario: Scenario) -> dict:
    """The scenario as the flat dict ``scenario_create`` takes (models by Hugging Face id,
    GPUs by slug), e.g. to copy it."""
    flat = {field: copy.deepcopy(getattr(scenario, field)) for field in SCALAR_FIELDS}
    flat["models"] = list(scenario.candidate_models.values_list("hf_id", flat=True))
    flat["gpus"] = list(scenario.candidate_gpus.values_list("slug", flat=True))
    flat["price_sheet"] = scenario.price_sheet_id
    return flat


def scenario_clone(*, scenario: Scenario, owner) -> Scenario:
    """A copy owned by ``owner`` (not shared, not archived, no runs), named "Copy of ...".

    It goes through ``scenario_create``, so the copy is validated as new input: a model the
    new owner cannot see is refused by name."""
    data = scenario_flat(scenario)
    data["name"] = f"Copy of {scenario.name}"[: Scenario._meta.get_field("name").max_length]
    return scenario_create(owner=owner, data=data)


def scenario_archive(*, scenario: Scenario, archived: bool = True) -> Scenario:
    """Archive (hide from the lists, keep everything) or bring back a scenario."""
    scenario.archived_at = (scenario.archived_at or timezone.now()) if archived else None
    Scenario.objects.filter(pk=scenario.pk).update(archived_at=scenario.archived_at)
    return scenario


def scenario_delete(*, scenario: Scenario) -> int:
    """Delete a scenario with its runs, results and share links; return how many runs went."""
    with transaction.atomic():
        runs = scenario.runs.count()
        scenario.delete()
    return runs
