"""The scenario form: parses what a browser sends into the service's flat dict.

The form only parses (numbers, lists, choices); every business rule lives in
``services.clean_scenario_data``, whose ``ValidationError`` keys are the flat field names, so
``apply_service_errors`` can put each message beside its input.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from fleets.models import GpuSku, ModelArchitecture
from planner.accessible import AccessibleErrorsMixin
from planner.models import PRECISIONS, Engine, Scenario, Tier
from planner.scenario_io import flatten
from planner.selectors import catalog_index, models_visible_to
from planner.services import calibration_profile_choices
from pricing.models import GpuHourPrice, PriceSheet
from sizing.length_law import MAX_P95_OVER_MEAN

#: lengths are one lognormal law (sizing.length_law): its p95 spans the mean to 3.87x it
P95_HELP = f"blank: every request the mean; else from the mean to {MAX_P95_OVER_MEAN:.2f}x it"

# Unit shown beside each input (empty string: dimensionless, shown as nothing).
UNITS = {
    "peak_rps": "requests/s",
    "mean_rps": "requests/s",
    "hourly_rps": "requests/s × 24",
    "prompt_tokens_mean": "tokens",
    "prompt_tokens_p95": "tokens",
    "output_tokens_mean": "tokens",
    "output_tokens_p95": "tokens",
    "shared_prefix_tokens": "tokens",
    "prefix_hit_rate": "fraction 0–1",
    "ttft_ms": "ms",
    "tpot_ms": "ms",
    "slo_percentile": "percentile",
    "goodput_target": "fraction 0–1",
    "tp_options": "GPUs",
    "pp_options": "stages",
    "ep_options": "GPUs",
    "reserved_discount": "fraction 0–0.95",
    "gpu_prices": "$/GPU-hour",
    "api_input_usd_per_mtok": "$/M input tokens",
    "api_output_usd_per_mtok": "$/M output tokens",
    "target_utilization": "fraction 0–1",
    "spare_replicas": "replicas",
    "burst_factor": "× peak",
    "warm_pool_replicas": "replicas",
    "spare_nodes": "nodes",
    "tags": "comma-separated",
    "images_per_request": "images",
    "tokens_per_image": "tokens",
    "image_tiles": "tiles",
    "tile_px": "px",
    "gpu_memory_utilization": "fraction (0–1]",
    "max_num_seqs": "sequences",
    "max_num_batched_tokens": "tokens",
    "max_model_len": "tokens",
    "scheduler_recv_interval": "decode steps",
    "spec_head_params": "params",
    "spec_tokens": "tokens (k)",
    "spec_acceptance": "fraction [0–1)",
    "distinct_prefixes": "prefixes",
    "lora_adapters": "adapters",
    "lora_active_per_batch": "adapters",
    "lora_resident_slots": "adapters",
}

#: Form inputs that fill the ``engine`` and ``serving`` blocks: field -> (flat block, path).
#: The service checks them (``sizing.engine_settings``, ``sizing.serving``), as for the API.
SERVING_INPUTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpu_memory_utilization": ("engine_settings", ("gpu_memory_utilization",)),
    "max_num_seqs": ("engine_settings", ("max_num_seqs",)),
    "max_num_batched_tokens": ("engine_settings", ("max_num_batched_tokens",)),
    "max_model_len": ("engine_settings", ("max_model_len",)),
    "scheduler_recv_interval": ("engine_settings", ("scheduler_recv_interval",)),
    "spec_method": ("serving", ("speculative", "method")),
    "spec_draft_model": ("serving", ("speculative", "draft_model")),
    "spec_head_params": ("serving", ("speculative", "head_params")),
    "spec_tokens": ("serving", ("speculative", "tokens")),
    "spec_acceptance": ("serving", ("speculative", "acceptance")),
    "routing": ("serving", ("routing",)),
    "distinct_prefixes": ("serving", ("distinct_prefixes",)),
    "lora_adapters": ("serving", ("lora", "adapters")),
    "lora_rank": ("serving", ("lora", "rank")),
    "lora_target_modules": ("serving", ("lora", "target_modules")),
    "lora_active_per_batch": ("serving", ("lora", "active_per_batch")),
    "lora_resident_slots": ("serving", ("lora", "resident_slots")),
    "precision_experts": ("serving", ("precision", "experts")),
    "precision_attention": ("serving", ("precision", "attention")),
    "precision_kv": ("serving", ("precision", "kv")),
    "precision_embeddings": ("serving", ("precision", "embeddings")),
}
#: a service error on a whole block (or an item of a list) goes beside this input
_BLOCK_INPUT = {
    "engine_settings": "gpu_memory_utilization",
    "serving": "routing",
    "serving.speculative": "spec_method",
    "serving.lora": "lora_adapters",
    "serving.precision": "precision_experts",
    "serving.speculative.acceptance_by_position": "spec_acceptance",
}

#: The fleet-life blocks, one "key = value" per line (planner.lifecycle lists the keys).
BLOCK_FIELDS = ("cold_start", "autoscaling", "ownership")

SECTIONS = [
    ("Scenario", ["name", "description", "tags"]),
    (
        "Traffic",
        [
            "peak_rps",
            "mean_rps",
            "prompt_tokens_mean",
            "prompt_tokens_p95",
            "output_tokens_mean",
            "output_tokens_p95",
            "shared_prefix_tokens",
            "prefix_hit_rate",
            "hourly_rps",
            "images_per_request",
            "tokens_per_image",
            "image_tiles",
            "tile_px",
        ],
    ),
    ("Latency SLOs", ["ttft_ms", "tpot_ms", "slo_percentile", "goodput_target"]),
    (
        "Candidates",
        [
            "models",
            "gpus",
            "precisions",
            "tp_options",
            "pp_options",
            "ep_options",
            "engine",
            "calibration_profile",
        ],
    ),
    (
        "Engine settings",
        [
            "gpu_memory_utilization",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "scheduler_recv_interval",
        ],
    ),
    (
        "Serving techniques",
        [
            "spec_method",
            "spec_draft_model",
            "spec_head_params",
            "spec_tokens",
            "spec_acceptance",
            "routing",
            "distinct_prefixes",
            "lora_adapters",
            "lora_rank",
            "lora_target_modules",
            "lora_active_per_batch",
            "lora_resident_slots",
            "precision_experts",
            "precision_attention",
            "precision_kv",
            "precision_embeddings",
        ],
    ),
    ("Pricing", ["tier", "price_sheet", "price_provider", "reserved_discount", "gpu_prices"]),
    (
        "API alternative",
        ["api_provider", "api_model", "api_input_usd_per_mtok", "api_output_usd_per_mtok"],
    ),
    (
        "Policy",
        [
            "target_utilization",
            "spare_replicas",
            "spare_nodes",
            "burst_factor",
            "warm_pool_replicas",
        ],
    ),
    ("Over time and over its life", list(BLOCK_FIELDS)),
]

DEFAULTED_FIELDS = [
    "shared_prefix_tokens",
    "prefix_hit_rate",
    "images_per_request",
    "image_tiles",
    "tile_px",
    "slo_percentile",
    "goodput_target",
    "target_utilization",
    "spare_replicas",
    "burst_factor",
    "warm_pool_replicas",
    "spare_nodes",
]
LIST_FIELDS = {"tags", "hourly_rps", "tp_options", "pp_options", "ep_options"}


def _block_help(name: str) -> str:
    from planner.lifecycle import SPEC

    return "One key = value per line; blank: the cited defaults. Keys: " + ", ".join(SPEC[name])


def parse_block(text: str) -> dict:
    """'weights_source = nvme' lines -> {"weights_source": "nvme"}; numbers and true/false
    are converted, the service checks names and limits."""
    block = {}
    for part in _split(text or ""):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValidationError(f"{part!r}: write key = value, e.g. weights_source = nvme")
        lowered = value.lower()
        if lowered in ("true", "false", "yes", "no"):
            block[key] = lowered in ("true", "yes")
            continue
        try:
            number = float(value)
        except ValueError:
            block[key] = value
            continue
        block[key] = int(number) if number.is_integer() and "." not in value else number
    return block


def block_text(block: dict) -> str:
    return "\n".join(
        f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in (block or {}).items()
    )


CHEAPEST_LABEL = "cheapest (any provider)"


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.replace(";", ",").replace("\n", ",").split(",")]


class ScenarioForm(AccessibleErrorsMixin, forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    tags = forms.CharField(required=False, help_text="e.g. chat, production")

    peak_rps = forms.FloatField(label="Peak rate")
    mean_rps = forms.FloatField(label="Mean rate")
    prompt_tokens_mean = forms.FloatField(label="Prompt length, mean")
    prompt_tokens_p95 = forms.FloatField(
        label="Prompt length, p95", required=False, help_text=P95_HELP
    )
    output_tokens_mean = forms.FloatField(label="Output length, mean")
    output_tokens_p95 = forms.FloatField(
        label="Output length, p95", required=False, help_text=P95_HELP
    )
    shared_prefix_tokens = forms.FloatField(label="Shared prefix", initial=0, required=False)
    prefix_hit_rate = forms.FloatField(label="Prefix cache hit rate", initial=0, required=False)
    hourly_rps = forms.CharField(
        label="24-hour profile",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="24 comma-separated hourly rates, hour 0 first; blank for none.",
    )

    images_per_request = forms.FloatField(
        label="Images per request",
        initial=0,
        required=False,
        help_text="vision-language models: image tokens join the prompt",
    )
    tokens_per_image = forms.FloatField(
        label="Tokens per image",
        required=False,
        help_text="blank: from each model's vision config (tiles, patch size, merge)",
    )
    image_tiles = forms.FloatField(label="Tiles per image", initial=1, required=False)
    tile_px = forms.FloatField(label="Tile side", initial=448, required=False)

    ttft_ms = forms.FloatField(label="Time to first token (TTFT) limit")
    tpot_ms = forms.FloatField(label="Time per output token (TPOT) limit")
    slo_percentile = forms.FloatField(label="SLO percentile", initial=95, required=False)
    goodput_target = forms.FloatField(label="Goodput target", initial=0.99, required=False)

    models = forms.MultipleChoiceField(label="Models", widget=forms.CheckboxSelectMultiple)
    gpus = forms.MultipleChoiceField(label="GPU SKUs", widget=forms.CheckboxSelectMultiple)
    precisions = forms.MultipleChoiceField(
        label="Weight precisions",
        choices=[(p, p) for p in PRECISIONS],
        widget=forms.CheckboxSelectMultiple,
    )
    tp_options = forms.CharField(
        label="Tensor-parallel degrees",
        required=False,
        help_text="e.g. 1, 2, 4, 8; blank: every valid degree within a node.",
    )
    pp_options = forms.CharField(
        label="Pipeline-parallel degrees", required=False, help_text="blank: 1"
    )
    ep_options = forms.CharField(
        label="Expert-parallel degrees", required=False, help_text="blank: EP = TP for MoE"
    )
    engine = forms.ChoiceField(label="Serving engine", choices=Engine.choices, initial="vllm")
    calibration_profile = forms.ChoiceField(
        label="Calibration profile",
        required=False,
        help_text="pins one GPU's profile; the other GPUs use the best match for the engine",
    )

    gpu_memory_utilization = forms.FloatField(
        label="GPU memory utilization", required=False, help_text="blank: 0.90"
    )
    max_num_seqs = forms.IntegerField(
        label="Max sequences per batch", required=False, help_text="blank: 1,024"
    )
    max_num_batched_tokens = forms.IntegerField(
        label="Prefill chunk budget",
        required=False,
        help_text="max_num_batched_tokens; blank: 8,192",
    )
    max_model_len = forms.IntegerField(
        label="Longest request", required=False, help_text="blank: the model's maximum"
    )
    scheduler_recv_interval = forms.IntegerField(
        label="Decode steps between request polls",
        required=False,
        help_text="SGLang --scheduler-recv-interval; blank: 1 (every step)",
    )

    spec_method = forms.ChoiceField(
        label="Speculative decoding",
        required=False,
        choices=[
            ("", "off"),
            ("draft", "draft model"),
            ("eagle", "EAGLE head"),
            ("mtp", "MTP head"),
        ],  # fmt: skip
    )
    spec_draft_model = forms.CharField(
        label="Draft model", required=False, max_length=200, help_text="method draft: a model"
    )
    spec_head_params = forms.FloatField(
        label="Head size", required=False, help_text="EAGLE / MTP: the head's params"
    )
    spec_tokens = forms.IntegerField(label="Draft tokens per step", required=False)
    spec_acceptance = forms.FloatField(label="Acceptance rate", required=False)
    routing = forms.ChoiceField(
        label="Routing",
        required=False,
        choices=[
            ("", "none (the hit rate above)"),
            ("random", "random"),
            ("least_loaded", "least loaded"),
            ("prefix_affinity", "prefix affinity"),
        ],  # fmt: skip
    )
    distinct_prefixes = forms.IntegerField(
        label="Distinct prefixes",
        required=False,
        help_text="tenants, system prompts or conversations sharing a prefix",
    )
    lora_adapters = forms.IntegerField(label="LoRA adapters", required=False)
    lora_rank = forms.IntegerField(label="LoRA rank", required=False)
    lora_target_modules = forms.CharField(
        label="LoRA target modules",
        required=False,
        help_text="comma-separated, e.g. q_proj, v_proj; blank: q, k, v, o",
    )
    lora_active_per_batch = forms.FloatField(label="Adapters active per batch", required=False)
    lora_resident_slots = forms.IntegerField(label="Resident adapter slots", required=False)
    precision_experts = forms.CharField(
        label="Expert precision", required=False, max_length=20, help_text="e.g. fp4, int4"
    )
    precision_attention = forms.CharField(
        label="Attention / dense precision",
        required=False,
        max_length=20,
        help_text="replaces the weight precisions above",
    )
    precision_kv = forms.CharField(label="KV cache precision", required=False, max_length=20)
    precision_embeddings = forms.CharField(
        label="Embedding precision", required=False, max_length=20
    )

    tier = forms.ChoiceField(label="Pricing tier", choices=Tier.choices, initial="on_demand")
    price_sheet = forms.ModelChoiceField(
        label="Price sheet",
        queryset=PriceSheet.objects.none(),
        required=False,
        empty_label="the sheet in force when the run starts",
    )

    price_provider = forms.ChoiceField(label="GPU provider", required=False)
    reserved_discount = forms.FloatField(
        label="Reserved / committed discount",
        required=False,
        help_text="Tier reserved: on-demand price × (1 − discount), e.g. 0.3; "
        "blank: the sheet's reserved rows.",
    )
    gpu_prices = forms.CharField(
        label="Your GPU prices",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One per line, overriding the sheet: H100 = 2.50; blank: the sheet's prices.",
    )

    api_provider = forms.CharField(label="API provider", required=False, max_length=80)
    api_model = forms.CharField(label="API model", required=False, max_length=200)
    api_input_usd_per_mtok = forms.FloatField(label="API input price", required=False)
    api_output_usd_per_mtok = forms.FloatField(label="API output price", required=False)

    target_utilization = forms.FloatField(label="Target utilization", initial=0.7, required=False)
    spare_replicas = forms.IntegerField(label="Spare replicas (N+k)", initial=1, required=False)
    burst_factor = forms.FloatField(label="Burst factor", initial=1.0, required=False)
    warm_pool_replicas = forms.IntegerField(
        label="Warm-pool replicas",
        initial=0,
        required=False,
        help_text="Used only when no burst is stated; with a burst (a ramp, or a burst factor "
        "above 1) the warm pool is sized from it.",
    )
    spare_nodes = forms.IntegerField(
        label="Spare nodes (N+k by failure domain)",
        initial=0,
        required=False,
        help_text="The SLO holds with this many whole nodes down.",
    )

    cold_start = forms.CharField(
        label="Cold start",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_block_help("cold_start"),
    )
    autoscaling = forms.CharField(
        label="Autoscaling",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_block_help("autoscaling"),
    )
    ownership = forms.CharField(
        label="Buy vs rent",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_block_help("ownership"),
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["models"].choices = model_choices(user)
        self.fields["gpus"].choices = gpu_choices()
        self.fields["calibration_profile"].choices = [
            ("", "automatic: the best profile for each GPU and the engine"),
            *calibration_profile_choices(user),
        ]
        for name in ("models", "gpus"):
            self.fields[name].searchable = True  # a filter box over the checkboxes (JS)
        self.fields["price_sheet"].queryset = PriceSheet.objects.order_by(
            "-effective_date", "-version"
        )
        self.fields["price_provider"].choices = [("", CHEAPEST_LABEL)] + [
            (p, p) for p in gpu_providers()
        ]
        for name, field in self.fields.items():
            field.unit = UNITS.get(name, "")
            described = [f"id_{name}_unit"] if field.unit else []
            if field.help_text:
                described.append(f"id_{name}_help")
            if described:
                field.widget.attrs["aria-describedby"] = " ".join(described)

    # ------------------------------------------------------------------ list parsing
    def clean_tags(self) -> list[str]:
        return [t for t in _split(self.cleaned_data.get("tags") or "") if t]

    def clean_hourly_rps(self) -> list[float]:
        text = (self.cleaned_data.get("hourly_rps") or "").strip()
        if not text:
            return []
        values = []
        for part in _split(text):
            if not part:
                continue
            try:
                values.append(float(part))
            except ValueError:
                raise ValidationError(f"{part!r} is not a number") from None
        return values

    def clean_gpu_prices(self) -> dict[str, float]:
        """'H100 = 2.50' lines (or comma-separated) -> {"H100": 2.5}; names resolve later."""
        prices = {}
        for part in _split(self.cleaned_data.get("gpu_prices") or ""):
            if not part:
                continue
            name, sep, value = part.replace(":", "=").partition("=")
            try:
                prices[name.strip()] = float(value.strip().lstrip("$"))
            except ValueError:
                raise ValidationError(
                    f"{part!r}: write GPU = $/GPU-hour, e.g. H100 = 2.50"
                ) from None
            if not sep or not name.strip():
                raise ValidationError(f"{part!r}: write GPU = $/GPU-hour, e.g. H100 = 2.50")
        return prices

    def _int_list(self, name: str) -> list[int]:
        values = []
        for part in _split(self.cleaned_data.get(name) or ""):
            if not part:
                continue
            try:
                values.append(int(part))
            except ValueError:
                raise ValidationError(f"{part!r} is not a whole number") from None
        return values

    def clean_cold_start(self) -> dict:
        return parse_block(self.cleaned_data.get("cold_start"))

    def clean_autoscaling(self) -> dict:
        return parse_block(self.cleaned_data.get("autoscaling"))

    def clean_ownership(self) -> dict:
        return parse_block(self.cleaned_data.get("ownership"))

    def clean_tp_options(self) -> list[int]:
        return self._int_list("tp_options")

    def clean_pp_options(self) -> list[int]:
        return self._int_list("pp_options")

    def clean_ep_options(self) -> list[int]:
        return self._int_list("ep_options")

    # ------------------------------------------------------------------ service glue
    def service_data(self, keep: dict | None = None) -> dict:
        """The flat dict ``scenario_create`` / ``scenario_update`` take. ``keep``: the edited
        scenario's ``serving`` block, whose API-only parts (per-position acceptance, per-model
        precisions) the form has no input for and keeps."""
        data = dict(self.cleaned_data)
        sheet = data.pop("price_sheet", None)
        data["price_sheet"] = sheet.pk if sheet else None
        for key in ("calibration_profile", "api_provider", "api_model", "description"):
            data[key] = data.get(key) or ""
        for key in DEFAULTED_FIELDS:
            if data.get(key) is None:
                data.pop(key, None)  # blank: the model default (new) or the current value (edit)
        blocks: dict[str, dict] = {"engine_settings": {}, "serving": {}}
        for name, (block, path) in SERVING_INPUTS.items():
            value = data.pop(name, None)
            if name == "lora_target_modules":
                value = [m for m in _split(value or "") if m] or None
            if value in (None, ""):
                continue
            node = blocks[block]
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
        _keep_api_only(blocks["serving"], keep or {})
        return data | blocks

    def apply_service_errors(self, error: ValidationError) -> None:
        """Put each service message beside its input (unknown keys go to the form top)."""
        by_field = error.message_dict if hasattr(error, "error_dict") else {None: error.messages}
        for field, messages in by_field.items():
            block, dot, key = (field or "").partition(".")
            if dot and block in BLOCK_FIELDS:  # "ownership.pue" -> beside the block's box
                self.add_error(block, [f"{key}: {message}" for message in messages])
            elif serving_input(field):  # "serving.speculative.tokens" -> spec_tokens
                self.add_error(serving_input(field), messages)
            elif field in self.fields:
                self.add_error(field, messages)
            elif field in (None, "non_field_errors", "__all__"):
                self.add_error(None, messages)
            else:
                self.add_error(None, [f"{field}: {message}" for message in messages])

    def sections(self):
        """(title, [bound fields]) in the order the template shows them."""
        return [(title, [self[name] for name in names]) for title, names in SECTIONS]


def _keep_api_only(serving: dict, before: dict) -> None:
    """Parts of a ``serving`` block only the API sets, carried over an edit in the form."""
    by_position = (before.get("speculative") or {}).get("acceptance_by_position")
    spec = serving.get("speculative")
    if by_position and spec is not None and "acceptance" not in spec:
        spec["acceptance_by_position"] = by_position
    models = (before.get("precision") or {}).get("models")
    if models:
        serving.setdefault("precision", {})["models"] = models


def serving_input(field: str | None) -> str:
    """The form input of an engine/serving error key ('' if it is not one of them)."""
    if not field:
        return ""
    block, _, rest = field.partition(".")
    path = tuple(rest.split(".")) if rest else ()
    for name, (target, target_path) in SERVING_INPUTS.items():
        if target == block and target_path == path:
            return name
    bare = field.split("[")[0]
    return _BLOCK_INPUT.get(bare, "")


def serving_initial(engine_settings: dict, serving: dict) -> dict:
    """A scenario's ``engine`` and ``serving`` blocks -> the form's inputs."""
    blocks = {"engine_settings": engine_settings or {}, "serving": serving or {}}
    initial = {}
    for name, (block, path) in SERVING_INPUTS.items():
        node = blocks[block]
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if node in (None, ""):
            continue
        initial[name] = ", ".join(node) if isinstance(node, list) else node
    return initial


def model_choices(user) -> list[tuple[str, str]]:
    """(slug, "name · size · attention") of the catalog's models and the user's imports."""
    rows = models_visible_to(user).order_by("name")
    return [
        (
            m.slug,
            f"{m.name} · {m.total_params / 1e9:.3g}B · {m.attention_kind}"
            + (" · yours" if m.owner_id else ""),
        )
        for m in rows.only("slug", "name", "total_params", "owner_id", *ATTENTION_FIELDS)
    ]


ATTENTION_FIELDS = (
    "kv_lora_rank",
    "num_kv_heads",
    "num_attention_heads",
    "linear_attention_layers",
    "sliding_window_layers",
    "sliding_window",
)


def gpu_choices() -> list[tuple[str, str]]:
    rows = GpuSku.objects.order_by("name").values_list("slug", "name", "memory_gb")
    return [(slug, f"{name} · {memory_gb:g} GB") for slug, name, memory_gb in rows]


def initial_from_flat(flat: dict) -> dict:
    """Flat service values (a scenario or a preset) -> the form's initial data."""
    initial = {}
    for key, value in flat.items():
        if key in LIST_FIELDS:
            initial[key] = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        else:
            initial[key] = value
    if isinstance(flat.get("gpu_prices"), dict):
        initial["gpu_prices"] = gpu_prices_text(flat["gpu_prices"])
    for name in BLOCK_FIELDS:
        if isinstance(flat.get(name), dict):
            initial[name] = block_text(flat[name])
    if isinstance(flat.get("engine_settings"), dict) or isinstance(flat.get("serving"), dict):
        initial |= serving_initial(flat.get("engine_settings") or {}, flat.get("serving") or {})
    index = catalog_index()
    for key, finder, model in (
        ("models", index.model_id, ModelArchitecture),
        ("gpus", index.gpu_id, GpuSku),
    ):
        if key in flat:
            ids = []
            for name in flat[key]:
                try:
                    ids.append(finder(str(name)))
                except LookupError:
                    continue
            slugs = dict(model.objects.filter(pk__in=ids).values_list("pk", "slug"))
            initial[key] = [slugs[i] for i in ids if i in slugs]
    return initial


def initial_from_scenario(scenario: Scenario) -> dict:
    from planner.services import SCALAR_FIELDS

    flat = {field: getattr(scenario, field) for field in SCALAR_FIELDS}
    initial = initial_from_flat(flat)
    initial["models"] = list(scenario.candidate_models.values_list("slug", flat=True))
    initial["gpus"] = list(scenario.candidate_gpus.values_list("slug", flat=True))
    initial["price_sheet"] = scenario.price_sheet_id
    return initial


def gpu_prices_text(prices: dict) -> str:
    """{slug: $/GPU-h} -> 'H100 SXM = 2.5' lines for the form (names resolve back)."""
    names = dict(GpuSku.objects.filter(slug__in=prices).values_list("slug", "name"))
    return "\n".join(f"{names.get(slug, slug)} = {usd:g}" for slug, usd in prices.items())


def gpu_providers() -> list[str]:
    return sorted(set(GpuHourPrice.objects.values_list("provider", flat=True)), key=str.casefold)


# --------------------------------------------------------------------------- presets
# Presets beyond examples/*.json: batch summarization and the DESIGN.md worked examples.
_NIGHTLY = [40, 40, 40, 40, 40, 30, 10, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 10, 20, 30, 40, 40]
EXTRA_PRESETS: dict[str, dict] = {
    "batch-summarization": {
        "name": "Batch summarization (nightly)",
        "description": "6k-token documents summarized in 500 tokens; loose latency, a nightly "
        "batch window given as a 24-hour profile.",
        "tags": ["batch", "example"],
        "traffic": {
            "peak_rps": 40,
            "mean_rps": sum(_NIGHTLY) / 24,
            "hourly_rps": _NIGHTLY,
            "prompt_tokens": {"mean": 6000, "p95": 12000},
            "output_tokens": {"mean": 500, "p95": 900},
        },
        "slo": {"ttft_ms": 30000, "tpot_ms": 150, "percentile": 95},
        "candidates": {
            "models": ["llama-3.1-8b", "Qwen3-32B", "Llama-3.3-70B"],
            "gpus": ["H100", "H200", "L40S", "L4"],
            "precisions": ["bf16", "fp8", "int4"],
        },
        "api_alternative": {"input_usd_per_mtok": 0.2, "output_usd_per_mtok": 0.6},
        "policy": {"target_utilization": 0.85, "spare_replicas": 0, "burst_factor": 1.0},
    },
    "design-70b-one-h100": {
        "name": "Worked example: Llama 3.1 70B bf16 on one H100",
        "description": "DESIGN.md: 70B weights in bf16 are about 141 GB, more than one H100 "
        "holds; TP 1 must fail with the numbers, TP 2+ fits.",
        "tags": ["design", "example"],
        "traffic": {
            "peak_rps": 2,
            "mean_rps": 1,
            "prompt_tokens": {"mean": 1000},
            "output_tokens": {"mean": 200},
        },
        "slo": {"ttft_ms": 2000, "tpot_ms": 100, "percentile": 95},
        "candidates": {
            "models": ["llama-3.1-70b"],
            "gpus": ["H100"],
            "precisions": ["bf16"],
            "tp": [1, 2, 4, 8],
        },
        "policy": {"target_utilization": 0.7, "spare_replicas": 0, "burst_factor": 1.0},
    },
    "design-littles-law": {
        "name": "Worked example: Little's law at 50 requests/s",
        "description": "DESIGN.md: 50 requests/s with about 20 s residence (400 output tokens "
        "at ~50 ms each) keeps about 1,000 requests in flight.",
        "tags": ["design", "example"],
        "traffic": {
            "peak_rps": 50,
            "mean_rps": 50,
            "prompt_tokens": {"mean": 500},
            "output_tokens": {"mean": 400},
        },
        "slo": {"ttft_ms": 2000, "tpot_ms": 50, "percentile": 95},
        "candidates": {
            "models": ["llama-3.1-8b"],
            "gpus": ["H100", "H200"],
            "precisions": ["bf16"],
        },
        "policy": {"target_utilization": 0.7, "spare_replicas": 1, "burst_factor": 1.0},
    },
    "design-mla-vs-gqa": {
        "name": "Worked example: DeepSeek-V3 MLA cache vs dense 70B",
        "description": "DESIGN.md: the MLA latent cache is roughly 4-5x smaller per token than "
        "a dense GQA 70B's; compare kv_bytes_per_token in the chain.",
        "tags": ["design", "moe", "example"],
        "traffic": {
            "peak_rps": 10,
            "mean_rps": 5,
            "prompt_tokens": {"mean": 4000},
            "output_tokens": {"mean": 400},
        },
        "slo": {"ttft_ms": 3000, "tpot_ms": 80, "percentile": 95},
        "candidates": {
            "models": ["deepseek-ai/DeepSeek-V3", "llama-3.1-70b"],
            "gpus": ["H200", "B200"],
            "precisions": ["fp8"],
            "tp": [8],
        },
        "api_alternative": {"input_usd_per_mtok": 0.27, "output_usd_per_mtok": 1.1},
    },
}
PRESET_ORDER = [
    "chat-llama70b",
    "rag-8k",
    "batch-summarization",
    "deepseek-v3-moe",
    "design-70b-one-h100",
    "design-littles-law",
    "design-mla-vs-gqa",
]


@lru_cache(maxsize=1)
def presets() -> dict[str, dict]:
    """slug -> nested scenario document: examples/*.json, then the extra presets."""
    found: dict[str, dict] = {}
    folder = Path(settings.BASE_DIR) / "examples"
    for path in sorted(folder.glob("*.json")):
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    found.update(EXTRA_PRESETS)
    ordered = {slug: found[slug] for slug in PRESET_ORDER if slug in found}
    ordered.update({slug: doc for slug, doc in found.items() if slug not in ordered})
    return ordered


def preset_initial(slug: str) -> dict | None:
    document = presets().get(slug)
    if document is None:
        return None
    return initial_from_flat(flatten(document))
