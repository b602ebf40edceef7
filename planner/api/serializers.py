"""API serializers. The scenario body mirrors the model, grouped as a reviewer thinks of it;
type checks happen here, domain rules (mean <= p95 <= 3.87 mean, names resolve, TP divides
heads...) in planner.services, whose errors come back under the same dotted field paths."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import OpenApiExample, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from fleets.models import CalibrationProfile, GpuSku, ModelArchitecture
from planner import scenario_io, services
from planner.models import CandidateResult, Engine, Scenario, ShareLink, SizingRun, Tier
from planner.prices import result_price_source
from planner.selectors import latest_run
from pricing.models import ApiTokenPrice, GpuHourPrice, PriceSheet
from sizing.coldstart import WEIGHTS_SOURCES
from sizing.length_law import MAX_P95_OVER_MEAN


class LengthSerializer(serializers.Serializer):
    mean = serializers.FloatField(help_text="tokens")
    p95 = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text=f"tokens, from the mean to {MAX_P95_OVER_MEAN:.2f}x it",
    )


class TrafficSerializer(serializers.Serializer):
    peak_rps = serializers.FloatField(help_text="requests/s at the busiest hour")
    mean_rps = serializers.FloatField(help_text="requests/s averaged over the month")
    hourly_rps = serializers.ListField(
        child=serializers.FloatField(),
        required=False,
        max_length=24,
        help_text="optional 24 values, requests/s",
    )
    prompt_tokens = LengthSerializer()
    output_tokens = LengthSerializer()
    shared_prefix_tokens = serializers.FloatField(required=False, help_text="tokens")
    prefix_hit_rate = serializers.FloatField(required=False, help_text="0..1")
    images_per_request = serializers.FloatField(
        required=False, help_text="images per request (vision-language models), 0..1000"
    )
    tokens_per_image = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="tokens per image; blank: from each model's vision config",
    )
    image_tiles = serializers.FloatField(
        required=False, help_text="tiles per image for the derived count (1)"
    )
    tile_px = serializers.FloatField(required=False, help_text="tile side, px (448)")


class SloSerializer(serializers.Serializer):
    ttft_ms = serializers.FloatField(help_text="time to first token limit, ms")
    tpot_ms = serializers.FloatField(help_text="time per output token limit, ms")
    percentile = serializers.FloatField(required=False, help_text="50..99.9 (default 95)")
    goodput_target = serializers.FloatField(required=False, help_text="share meeting both")


class CandidatesSerializer(serializers.Serializer):
    models = serializers.ListField(
        child=serializers.CharField(max_length=200),
        min_length=1,
        max_length=100,
        help_text="names as `predict` accepts them",
    )
    gpus = serializers.ListField(
        child=serializers.CharField(max_length=100),
        min_length=1,
        max_length=100,
        help_text="catalog slugs or common names",
    )
    precisions = serializers.ListField(
        child=serializers.CharField(max_length=10),
        min_length=1,
        max_length=6,
        help_text="bf16 fp16 fp8 int8 int4 fp4",
    )
    tp = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=16)
    pp = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=16)
    ep = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=16)
    engine = serializers.ChoiceField(choices=Engine.choices, required=False)
    calibration_profile = serializers.CharField(required=False, allow_blank=True, max_length=120)


class EngineBlockSerializer(serializers.Serializer):
    """Engine settings; blank: the engine's defaults. Limits are checked with the scenario."""

    gpu_memory_utilization = serializers.FloatField(
        required=False, allow_null=True, help_text="(0, 1], share of HBM the engine uses (0.90)"
    )
    max_num_seqs = serializers.IntegerField(
        required=False, allow_null=True, help_text="sequences per DP rank (1,024)"
    )
    max_num_batched_tokens = serializers.IntegerField(
        required=False, allow_null=True, help_text="chunked-prefill budget, tokens (8,192)"
    )
    max_model_len = serializers.IntegerField(
        required=False, allow_null=True, help_text="longest request, tokens (model maximum)"
    )
    scheduler_recv_interval = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="decode steps between the scheduler's polls for new requests (1; SGLang "
        "--scheduler-recv-interval)",
    )


class SpeculativeSerializer(serializers.Serializer):
    method = serializers.ChoiceField(choices=["draft", "eagle", "mtp"])
    draft_model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    head_params = serializers.FloatField(required=False, allow_null=True, help_text="params")
    tokens = serializers.IntegerField(help_text="k, tokens drafted per step (>= 1)")
    acceptance = serializers.FloatField(required=False, allow_null=True, help_text="[0, 1)")
    acceptance_by_position = serializers.ListField(
        child=serializers.FloatField(), required=False, max_length=16
    )


class LoraSerializer(serializers.Serializer):
    adapters = serializers.IntegerField()
    rank = serializers.IntegerField()
    target_modules = serializers.ListField(
        child=serializers.CharField(max_length=20), required=False, max_length=7
    )
    active_per_batch = serializers.FloatField(required=False)
    resident_slots = serializers.IntegerField(required=False)


class PrecisionSerializer(serializers.Serializer):
    """Per-component precision of a mixed checkpoint; blank: the candidate's precision."""

    experts = serializers.CharField(
        required=False, allow_blank=True, max_length=20, help_text="routed experts (fp4)"
    )
    attention = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=20,
        help_text="attention and dense weights (replaces candidates.precisions)",
    )
    kv = serializers.CharField(required=False, allow_blank=True, max_length=20)
    embeddings = serializers.CharField(
        required=False, allow_blank=True, max_length=20, help_text="embedding and LM head"
    )
    models = serializers.DictField(
        child=serializers.DictField(child=serializers.CharField(max_length=20)),
        required=False,
        help_text='per model, its own components: {"gpt-oss-120b": {"experts": "mxfp4"}}',
    )


class ServingSerializer(serializers.Serializer):
    precision = PrecisionSerializer(required=False)
    speculative = SpeculativeSerializer(required=False)
    routing = serializers.ChoiceField(
        choices=["random", "least_loaded", "prefix_affinity"], required=False
    )
    distinct_prefixes = serializers.IntegerField(
        required=False, help_text="tenants, system prompts or conversations sharing a prefix"
    )
    lora = LoraSerializer(required=False)
    disaggregation = serializers.BooleanField(
        required=False,
        help_text="add a disaggregated prefill/decode candidate per model x GPU x precision "
        "(default true)",
    )


class PricingSerializer(serializers.Serializer):
    tier = serializers.ChoiceField(choices=Tier.choices, required=False)
    price_sheet = serializers.IntegerField(
        required=False, allow_null=True, help_text="id; null = the sheet in force at run time"
    )
    gpu_prices = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        allow_empty=True,
        help_text='$/GPU-hour by GPU name, overriding the sheet, e.g. {"H100": 2.5}',
    )
    provider = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=80,
        help_text='provider to price GPUs from, or "cheapest" (default)',
    )
    reserved_discount = serializers.FloatField(
        required=False,
        allow_null=True,
        help_text="0..0.95 off the on-demand price, tier reserved only; null = reserved rows",
    )


class ApiAlternativeSerializer(serializers.Serializer):
    provider = serializers.CharField(required=False, allow_blank=True, max_length=80)
    model = serializers.CharField(required=False, allow_blank=True, max_length=200)
    input_usd_per_mtok = serializers.FloatField(required=False, allow_null=True)
    output_usd_per_mtok = serializers.FloatField(required=False, allow_null=True)


class PolicySerializer(serializers.Serializer):
    target_utilization = serializers.FloatField(required=False, help_text="0..1")
    spare_replicas = serializers.IntegerField(required=False, min_value=0, max_value=1000)
    burst_factor = serializers.FloatField(required=False, help_text=">= 1")
    warm_pool_replicas = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1000,
        help_text="used only when no burst is stated; with a burst (a ramp, or a burst factor "
        "above 1) the warm pool is sized from it",
    )
    spare_nodes = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1000,
        help_text="N+k by failure domain: whole nodes the serving replicas survive losing",
    )


class ColdStartSerializer(serializers.Serializer):
    """Every key optional; limits are checked by the service (planner.lifecycle)."""

    image_gb = serializers.FloatField(required=False, allow_null=True, help_text="GB")
    registry_gb_s = serializers.FloatField(required=False, allow_null=True, help_text="GB/s, > 0")
    image_cached = serializers.BooleanField(required=False, allow_null=True)
    weights_source = serializers.ChoiceField(
        choices=list(WEIGHTS_SOURCES),
        required=False,
        allow_null=True,
        error_messages={
            "invalid_choice": f"must be one of {', '.join(WEIGHTS_SOURCES)}, got {{input!r}}"
        },
    )
    weights_gb_s = serializers.FloatField(required=False, allow_null=True, help_text="GB/s, > 0")
    init_s = serializers.FloatField(required=False, allow_null=True, help_text="s")
    graph_capture_s = serializers.FloatField(required=False, allow_null=True, help_text="s")
    warmup_s = serializers.FloatField(required=False, allow_null=True, help_text="s")


class AutoscalingSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(required=False, allow_null=True)
    min_replicas = serializers.IntegerField(required=False, allow_null=True, help_text=">= 0")
    burst_ramp_rps_per_s = serializers.FloatField(
        required=False, allow_null=True, help_text="req/s per second"
    )
    burst_s = serializers.FloatField(required=False, allow_null=True, help_text="s, > 0")
    spot_share = serializers.FloatField(required=False, allow_null=True, help_text="0..1")
    spot_interruptions_per_hour = serializers.FloatField(required=False, allow_null=True)
    spot_discount = serializers.FloatField(required=False, allow_null=True, help_text="0..0.99")


class OwnershipSerializer(serializers.Serializer):
    capex_usd_per_node = serializers.FloatField(required=False, allow_null=True)
    depreciation_years = serializers.FloatField(required=False, allow_null=True, help_text="> 0")
    cost_of_capital = serializers.FloatField(required=False, allow_null=True, help_text="0..1")
    host_watts_per_node = serializers.FloatField(required=False, allow_null=True)
    pue = serializers.FloatField(required=False, allow_null=True, help_text=">= 1")
    usd_per_kwh = serializers.FloatField(required=False, allow_null=True)
    colo_usd_per_kw_month = serializers.FloatField(required=False, allow_null=True)
    ops_usd_per_node_month = serializers.FloatField(required=False, allow_null=True)


class LatestRunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    progress = serializers.IntegerField()
    best_usd_per_month = serializers.FloatField(allow_null=True)


EXAMPLE = {
    "name": "Chat assistant",
    "tags": ["chat"],
    "traffic": {
        "peak_rps": 20,
        "mean_rps": 8,
        "prompt_tokens": {"mean": 1000, "p95": 3000},
        "output_tokens": {"mean": 300, "p95": 800},
    },
    "slo": {"ttft_ms": 2000, "tpot_ms": 50, "percentile": 95},
    "candidates": {
        "models": ["meta-llama/Llama-3.1-70B-Instruct"],
        "gpus": ["H100", "H200", "B200", "L40S"],
        "precisions": ["bf16", "fp8"],
    },
    "pricing": {"tier": "on_demand"},
    "api_alternative": {"input_usd_per_mtok": 0.88, "output_usd_per_mtok": 0.88},
    "policy": {"target_utilization": 0.7, "spare_replicas": 1},
}


@extend_schema_serializer(
    examples=[OpenApiExample("chat assistant", value=EXAMPLE, request_only=True)]
)
class ScenarioSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=50), required=False, max_length=20
    )
    traffic = TrafficSerializer()
    slo = SloSerializer()
    candidates = CandidatesSerializer()
    engine = EngineBlockSerializer(required=False)
    serving = ServingSerializer(required=False)
    pricing = PricingSerializer(required=False)
    api_alternative = ApiAlternativeSerializer(required=False)
    policy = PolicySerializer(required=False)
    cold_start = ColdStartSerializer(required=False)
    autoscaling = AutoscalingSerializer(required=False)
    ownership = OwnershipSerializer(required=False)
    owner = serializers.CharField(source="owner.username", read_only=True)
    shared_with = serializers.ListField(
        child=serializers.CharField(max_length=150),
        required=False,
        max_length=services.MAX_SHARED_WITH,
        help_text="usernames who may read (not change or run) it; only the owner sets this",
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)
    archived_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="set: archived (POST archive/, unarchive/)"
    )
    latest_run = serializers.SerializerMethodField()

    @extend_schema_field(LatestRunSerializer(allow_null=True))
    def get_latest_run(self, scenario) -> dict | None:
        run = latest_run(scenario)
        if run is None:
            return None
        costs = [
            e["usd_per_month"]
            for e in run.summary.get("per_gpu", [])
            if e.get("recommended") and e.get("usd_per_month") is not None
        ]
        return {
            "id": run.pk,
            "status": run.status,
            "progress": run.progress,
            "best_usd_per_month": min(costs) if costs else None,
        }

    def to_representation(self, scenario: Scenario) -> dict:
        flat = {field: getattr(scenario, field) for field in services.SCALAR_FIELDS}
        flat["price_sheet"] = scenario.price_sheet_id
        flat["price_provider"] = scenario.price_provider or "cheapest"
        flat["models"] = list(scenario.candidate_models.values_list("hf_id", flat=True))
        flat["gpus"] = list(scenario.candidate_gpus.values_list("slug", flat=True))
        document = scenario_io.nest(flat)
        document.update(
            id=scenario.pk,
            owner=scenario.owner.username,
            shared_with=sorted(scenario.shared_with.values_list("username", flat=True)),
            archived_at=serializers.DateTimeField().to_representation(scenario.archived_at)
            if scenario.archived_at
            else None,
            created_at=serializers.DateTimeField().to_representation(scenario.created_at),
            updated_at=serializers.DateTimeField().to_representation(scenario.updated_at),
            latest_run=self.get_latest_run(scenario),
        )
        return document

    def _flat(self, validated: dict) -> dict:
        return scenario_io.flatten(validated)

    def create(self, validated_data):
        shared = validated_data.pop("shared_with", None)
        owner = self.context["request"].user
        return self._write(
            lambda: services.scenario_create(owner=owner, data=self._flat(validated_data)), shared
        )

    def update(self, instance, validated_data):
        shared = validated_data.pop("shared_with", None)
        return self._write(
            lambda: services.scenario_update(scenario=instance, data=self._flat(validated_data)),
            shared,
        )

    @staticmethod
    def _write(save, shared: list[str] | None) -> Scenario:
        """Save and set ``shared_with`` in one transaction: a bad username saves nothing."""
        try:
            with transaction.atomic():
                scenario = save()
                if shared is not None:
                    services.scenario_share_set(scenario=scenario, usernames=shared)
                return scenario
        except DjangoValidationError as exc:
            raise serializers.ValidationError(scenario_io.nest_errors(exc.message_dict)) from exc


class CandidateResultSerializer(serializers.ModelSerializer):
    price_source = serializers.SerializerMethodField(
        help_text="the GPU-hour price this row paid: provider, instance, as_of, source, note"
    )

    class Meta:
        model = CandidateResult
        exclude = ["run"]

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_price_source(self, result) -> dict | None:
        if result.usd_per_hour is None:
            return None
        inputs = self.context.get("inputs") or {}
        return result_price_source(inputs, result)


class RunSerializer(serializers.ModelSerializer):
    scenario = serializers.PrimaryKeyRelatedField(read_only=True)
    results = serializers.SerializerMethodField()

    class Meta:
        model = SizingRun
        fields = [
            "id",
            "scenario",
            "status",
            "progress",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "candidate_count",
            "price_sheet",
            "summary",
            "inputs",
            "results",
        ]

    @extend_schema_field(CandidateResultSerializer(many=True))
    def get_results(self, run) -> list | None:
        if not self.context.get("with_results", True):
            return None
        return CandidateResultSerializer(
            run.results.order_by("rank", "candidate_key"),
            many=True,
            context={"inputs": run.inputs or {}},
        ).data


class RunListSerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        # the list leaves out the two heavy parts: the inputs snapshot and the results
        fields = [f for f in RunSerializer.Meta.fields if f not in ("inputs", "results")]


class RunDetailSerializer(RunSerializer):
    """The run detail: status, summary and inputs; the per-candidate results are paged at
    ``results_url`` (a run may hold 20,000 of them, each with its derivation)."""

    results_url = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [f for f in RunSerializer.Meta.fields if f != "results"] + ["results_url"]

    def get_results_url(self, run) -> str:
        path = f"/api/v1/runs/{run.pk}/results/"
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


class RunStartedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.CharField()
    workers_available = serializers.BooleanField()
    message = serializers.CharField()


class GpuSkuSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuSku
        fields = "__all__"


class ModelArchitectureSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(
        source="owner.username",
        read_only=True,
        allow_null=True,
        help_text="null for the shared catalog; your username for a model you imported",
    )

    class Meta:
        model = ModelArchitecture
        exclude = ["config_json"]


class ModelImportSerializer(serializers.Serializer):
    """One config source: ``config`` (JSON object), ``file`` (config.json) or ``base``."""

    name = serializers.CharField(max_length=200, help_text="e.g. my-org/support-bot-8b")
    config = serializers.JSONField(required=False, help_text="the config.json object")
    file = serializers.FileField(required=False, help_text="config.json, at most 1 MB")
    base = serializers.CharField(
        required=False, allow_blank=True, help_text="catalog model slug to copy"
    )


class GpuHourPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuHourPrice
        exclude = ["sheet"]


class ApiTokenPriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiTokenPrice
        exclude = ["sheet"]


class PriceSheetSerializer(serializers.ModelSerializer):
    gpu_prices = GpuHourPriceSerializer(many=True, read_only=True)
    api_prices = ApiTokenPriceSerializer(many=True, read_only=True)

    class Meta:
        model = PriceSheet
        fields = [
            "id",
            "name",
            "version",
            "effective_date",
            "source",
            "as_of",
            "locked",
            "created_at",
            "gpu_prices",
            "api_prices",
        ]
        read_only_fields = ["locked", "created_at"]


class CalibrationProfileSerializer(serializers.ModelSerializer):
    gpu = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="GPU slug; null for a generation-level (fallback) profile",
    )
    owner = serializers.CharField(
        source="owner.username",
        read_only=True,
        allow_null=True,
        help_text="null for the shared, shipped profiles",
    )

    class Meta:
        model = CalibrationProfile
        exclude = ["fitted_row_ids"]


class CalibrationUploadSerializer(serializers.Serializer):
    """A measurement file and the conditions a JSON result does not state."""

    file = serializers.FileField(help_text="vLLM bench serve JSON, guidellm report JSON or CSV")
    gpu = serializers.CharField(help_text="GPU name as `predict` accepts it")
    engine_family = serializers.ChoiceField(choices=["vllm", "sglang", "trtllm", "other"])
    model = serializers.CharField(required=False, allow_blank=True)
    num_gpus = serializers.IntegerField(required=False, min_value=1, max_value=100_000)
    tp = serializers.IntegerField(required=False, min_value=1, max_value=1024)
    ep = serializers.IntegerField(required=False, min_value=1, max_value=1024)
    weight_precision = serializers.CharField(required=False, allow_blank=True)
    kv_precision = serializers.CharField(required=False, allow_blank=True)
    isl = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)
    osl = serializers.IntegerField(required=False, min_value=1, max_value=10_000_000)


class ShareLinkSerializer(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()
    scenario = serializers.IntegerField(source="scenario_id")
    run = serializers.IntegerField(source="run_id", required=False, allow_null=True)

    class Meta:
        model = ShareLink
        fields = ["id", "scenario", "run", "url", "expires_at", "created_at", "revoked_at"]
        read_only_fields = ["id", "url", "created_at", "revoked_at"]

    def get_url(self, link) -> str | None:
        token = getattr(link, "raw_token", None)
        if token is None:
            return None  # the token is shown once, at creation; only its hash is stored
        return self.context["request"].build_absolute_uri(f"/s/{token}/")
