"""The scenario's ``serving`` block -> checked ``EngineSettings`` fields (no Django).

``serving.speculative``: ``method`` (draft, eagle, mtp), ``draft_model`` (a catalog model, the
shell resolves it) or ``head_params`` (the EAGLE/MTP head's size), ``tokens`` (k >= 1) and
``acceptance`` (a in [0, 1)) or ``acceptance_by_position`` (k values in [0, 1)).
``serving.routing``: random, least_loaded or prefix_affinity, with
``serving.distinct_prefixes`` (tenants, system prompts, conversations).
``serving.lora``: ``adapters``, ``rank``, ``target_modules``, ``active_per_batch``,
``resident_slots``.
``serving.disaggregation``: true (the default) adds one disaggregated prefill/decode candidate
per model x GPU x precision beside the aggregated ones (sizing.disagg_plan); false leaves them
out (``disaggregation_on``).
``serving.precision``: per-component precision of a mixed checkpoint, ``experts`` (the routed
experts), ``attention`` (attention and dense weights: the candidates' weight precision),
``kv`` (the cache) and ``embeddings`` (input embedding and LM head); a component not given
follows the candidate's precision; ``models`` gives a model its own components
(``component_precisions``).

Bad values raise ``SettingError`` naming the dotted field (``serving.speculative.tokens``).
"""

from __future__ import annotations

from collections.abc import Mapping

from sizing.engine_settings import SettingError, _number, _whole
from sizing.specs import LORA_MODULES, ModelSpec, canonical_precision

SPEC_METHODS = ("draft", "eagle", "mtp")
ROUTING_POLICIES = ("random", "least_loaded", "prefix_affinity")
SERVING_FIELDS = (
    "speculative",
    "routing",
    "distinct_prefixes",
    "lora",
    "precision",
    "disaggregation",
)
#: ``serving.precision`` components (gpt-oss: MXFP4 experts, bf16 attention and embeddings)
PRECISION_COMPONENTS = ("experts", "attention", "kv", "embeddings")
SPEC_FIELDS = (
    "method",
    "draft_model",
    "head_params",
    "tokens",
    "acceptance",
    "acceptance_by_position",
)
LORA_FIELDS = ("adapters", "rank", "target_modules", "active_per_batch", "resident_slots")
MAX_SPEC_TOKENS = 16


def _block(value, field: str, known: tuple[str, ...]) -> Mapping:
    if not isinstance(value, Mapping):
        raise SettingError(field, "must be an object")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise SettingError(field, f"unknown fields: {', '.join(unknown)}")
    return {k: v for k, v in value.items() if v not in (None, "")}


def _acceptance(field: str, value) -> float:
    a = _number(field, value)
    if not 0.0 <= a < 1.0:
        raise SettingError(field, f"must be in [0, 1), got {a:g}")
    return a


def draft_model_name(block: Mapping | None) -> str:
    """The catalog name ``serving.speculative.draft_model`` asks for ('' if none)."""
    if not isinstance(block, Mapping) or not isinstance(block.get("speculative"), Mapping):
        return ""
    return str(block["speculative"].get("draft_model") or "").strip()


def speculative_overrides(
    spec: Mapping, draft: ModelSpec | None, targets: tuple[ModelSpec, ...] = ()
) -> dict:
    field = "serving.speculative"
    spec = _block(spec, field, SPEC_FIELDS)
    method = str(spec.get("method") or "").strip().lower()
    if method not in SPEC_METHODS:
        raise SettingError(f"{field}.method", f"must be one of {', '.join(SPEC_METHODS)}")
    if "tokens" not in spec:
        raise SettingError(f"{field}.tokens", "give k, the tokens drafted per step (>= 1)")
    k = _whole(f"{field}.tokens", spec["tokens"], 1, MAX_SPEC_TOKENS)
    out: dict = {"spec_method": method, "spec_tokens": k}
    if "acceptance_by_position" in spec:
        values = spec["acceptance_by_position"]
        if not isinstance(values, list | tuple) or len(values) != k:
            raise SettingError(f"{field}.acceptance_by_position", f"give {k} values (one per k)")
        by_pos = tuple(
            _acceptance(f"{field}.acceptance_by_position[{j}]", v) for j, v in enumerate(values)
        )
        out["spec_acceptance_by_position"] = by_pos
    elif "acceptance" in spec:
        out["spec_acceptance"] = _acceptance(f"{field}.acceptance", spec["acceptance"])
    else:
        raise SettingError(f"{field}.acceptance", "give the acceptance rate a in [0, 1)")
    if method == "draft":
        if draft is None:
            raise SettingError(f"{field}.draft_model", "method draft needs a catalog draft_model")
        for target in targets:
            if draft.total_params >= target.total_params:
                raise SettingError(
                    f"{field}.draft_model",
                    f"{draft.name} ({draft.total_params / 1e9:.1f}B params) is not smaller "
                    f"than the target {target.name} ({target.total_params / 1e9:.1f}B)",
                )
        out |= {
            "spec_draft_name": draft.name,
            "spec_draft_params": float(draft.total_params),
            "spec_draft_active_params": float(draft.active_params),
            "spec_draft_layers": int(draft.num_layers),
            "spec_draft_kv_elements_per_token": float(_kv_elements_per_token(draft)),
        }
        return out
    if "head_params" not in spec:
        raise SettingError(f"{field}.head_params", f"method {method} needs the head's size")
    head = _number(f"{field}.head_params", spec["head_params"])
    if head <= 0:
        raise SettingError(f"{field}.head_params", f"must be > 0 params, got {head:g}")
    for target in targets:
        if head >= target.total_params:
            raise SettingError(f"{field}.head_params", f"larger than the target {target.name}")
    head_fields = {"spec_draft_params": head, "spec_draft_active_params": head}
    return out | head_fields | {"spec_draft_name": f"{method} head"}


def _kv_elements_per_token(m: ModelSpec) -> float:
    """Cache elements one token adds over all of a model's attention layers (bf16 draft)."""
    per_layer = m.kv_lora_rank + m.qk_rope_head_dim if m.is_mla else 2 * m.num_kv_heads * m.head_dim
    return float(per_layer * (m.n_full_layers + m.sliding_window_layers))


def lora_overrides(lora: Mapping) -> dict:
    field = "serving.lora"
    lora = _block(lora, field, LORA_FIELDS)
    adapters = _whole(f"{field}.adapters", lora.get("adapters", 0), 1, 100_000)
    rank = _whole(f"{field}.rank", lora.get("rank", 0), 1, 4096)
    modules = lora.get("target_modules") or ["q_proj", "k_proj", "v_proj", "o_proj"]
    if not isinstance(modules, list | tuple) or not modules:
        raise SettingError(f"{field}.target_modules", "give a list of module names")
    bad = [m for m in modules if m not in LORA_MODULES]
    if bad:
        raise SettingError(
            f"{field}.target_modules", f"unknown {bad}; known: {', '.join(LORA_MODULES)}"
        )
    active = _number(f"{field}.active_per_batch", lora.get("active_per_batch", 1))
    if not 1 <= active <= adapters:
        raise SettingError(f"{field}.active_per_batch", f"must be from 1 to adapters ({adapters})")
    slots = _whole(f"{field}.resident_slots", lora.get("resident_slots", adapters), 1, adapters)
    return {
        "lora_adapters": adapters,
        "lora_rank": rank,
        "lora_target_modules": tuple(dict.fromkeys(modules)),
        "lora_active": active,
        "lora_resident_slots": slots,
    }


def _components(value, field: str, known: tuple[str, ...]) -> dict:
    given = _block(value, field, known)
    out: dict = {}
    for component, text in given.items():
        if component == "models":
            continue
        try:
            out[component] = canonical_precision(str(text))
        except ValueError as exc:
            raise SettingError(f"{field}.{component}", str(exc)) from None
    return out


def component_precisions(block: Mapping | None) -> dict:
    """Checked ``serving.precision``: {component: canonical precision} for the components
    given (empty: none), and under ``models`` {model name: {component: precision}} for the
    models whose checkpoint differs (they override the block's own values for that model).
    Raises ``SettingError`` naming ``serving.precision.<component>`` (or
    ``serving.precision.models.<name>.<component>``)."""
    if not isinstance(block, Mapping) or block.get("precision") in (None, ""):
        return {}
    field = "serving.precision"
    out = _components(block["precision"], field, (*PRECISION_COMPONENTS, "models"))
    per_model = block["precision"].get("models")
    if per_model not in (None, "", {}):
        if not isinstance(per_model, Mapping):
            raise SettingError(f"{field}.models", 'must be an object like {"gpt-oss-120b": '
                               '{"experts": "mxfp4"}}')  # fmt: skip
        out["models"] = {
            str(name): _components(value, f"{field}.models.{name}", PRECISION_COMPONENTS)
            for name, value in per_model.items()
        }
    return out


def serving_overrides(
    block: Mapping | None, draft: ModelSpec | None = None, targets: tuple[ModelSpec, ...] = ()
) -> dict:
    """Checked ``EngineSettings`` keyword values from a ``serving`` block (empty: none)."""
    if not block:
        return {}
    block = _block(block, "serving", SERVING_FIELDS)
    out: dict = {}
    if "speculative" in block:
        out |= speculative_overrides(block["speculative"], draft, targets)
    if "routing" in block:
        routing = str(block["routing"]).strip().lower()
        if routing not in ROUTING_POLICIES:
            raise SettingError(
                "serving.routing", f"must be one of {', '.join(ROUTING_POLICIES)}, got {routing!r}"
            )
        out["routing"] = routing
        out["distinct_prefixes"] = _whole(
            "serving.distinct_prefixes", block.get("distinct_prefixes", 1), 1, 10_000_000
        )
    elif "distinct_prefixes" in block:
        raise SettingError("serving.routing", "give the routing policy with distinct_prefixes")
    if "lora" in block:
        out |= lora_overrides(block["lora"])
    component_precisions(block)  # checked here; the candidates carry them (not the engine)
    disaggregation_on(block)  # likewise: it adds candidates, the engine does not change
    return out


def disaggregation_on(block: Mapping | None) -> bool:
    """``serving.disaggregation``: whether the plan adds disaggregated candidates (default
    true; a JSON boolean, or "true"/"false" from a form)."""
    value = (block or {}).get("disaggregation", True) if isinstance(block, Mapping) else True
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise SettingError("serving.disaggregation", f"must be true or false, got {value!r}")
    return value
