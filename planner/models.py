"""Scenarios (what a reviewer asks), sizing runs (one execution) and their per-candidate results."""

from __future__ import annotations

import hashlib
import uuid

import psycopg
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connection, models

from fleets.models import GpuSku, ModelArchitecture
from pricing.models import PriceSheet

PRECISIONS = ["bf16", "fp16", "fp8", "int8", "int4", "fp4"]


class Engine(models.TextChoices):
    VLLM = "vllm", "vLLM"
    SGLANG = "sglang", "SGLang"
    TRTLLM = "trtllm", "TensorRT-LLM"


class Tier(models.TextChoices):
    ON_DEMAND = "on_demand", "on-demand"
    RESERVED = "reserved", "reserved / committed"
    SPOT = "spot", "spot"


def _positive(value):
    from django.core.exceptions import ValidationError

    if value is not None and value <= 0:
        raise ValidationError(f"must be greater than 0, got {value}")


class Scenario(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="scenarios"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)
    shared_with = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        blank=True,
        related_name="scenarios_shared_with_me",
        help_text="Users who may read (not edit) this scenario and its runs.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="Set: hidden from the scenario lists (kept, readable)."
    )

    # traffic
    peak_rps = models.FloatField("peak requests/s", validators=[_positive, MaxValueValidator(1e7)])
    mean_rps = models.FloatField("mean requests/s", validators=[_positive, MaxValueValidator(1e7)])
    hourly_rps = models.JSONField("24-hour profile (requests/s per hour)", default=list, blank=True)
    prompt_tokens_mean = models.FloatField(validators=[_positive, MaxValueValidator(10_000_000)])
    prompt_tokens_p95 = models.FloatField(
        null=True, blank=True, validators=[_positive, MaxValueValidator(10_000_000)]
    )
    output_tokens_mean = models.FloatField(validators=[_positive, MaxValueValidator(1_000_000)])
    output_tokens_p95 = models.FloatField(
        null=True, blank=True, validators=[_positive, MaxValueValidator(1_000_000)]
    )
    shared_prefix_tokens = models.FloatField(default=0, validators=[MinValueValidator(0)])
    prefix_hit_rate = models.FloatField(
        default=0, validators=[MinValueValidator(0), MaxValueValidator(1)]
    )
    # vision-language prompts (sizing.vision): images per request, tokens per image (blank:
    # from each model's vision config, image_tiles tiles of tile_px px)
    images_per_request = models.FloatField(
        default=0, validators=[MinValueValidator(0), MaxValueValidator(1000)]
    )
    tokens_per_image = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )
    image_tiles = models.FloatField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    tile_px = models.FloatField(
        default=448, validators=[MinValueValidator(1), MaxValueValidator(100_000)]
    )

    # SLOs
    ttft_ms = models.FloatField("TTFT limit (ms)", validators=[_positive])
    tpot_ms = models.FloatField("TPOT limit (ms)", validators=[_positive])
    slo_percentile = models.FloatField(
        default=95, validators=[MinValueValidator(50), MaxValueValidator(99.9)]
    )
    goodput_target = models.FloatField(default=0.99, validators=[_positive, MaxValueValidator(1)])

    # candidates
    candidate_models = models.ManyToManyField(ModelArchitecture, related_name="scenarios")
    candidate_gpus = models.ManyToManyField(GpuSku, related_name="scenarios")
    precisions = models.JSONField(default=list)
    tp_options = models.JSONField(
        "allowed TP degrees (empty: every valid one)", default=list, blank=True
    )
    pp_options = models.JSONField(default=list, blank=True)
    ep_options = models.JSONField(default=list, blank=True)
    engine = models.CharField(max_length=20, choices=Engine.choices, default=Engine.VLLM)
    calibration_profile = models.CharField(
        max_length=120, blank=True, help_text="Blank: the best profile for each GPU."
    )
    # engine settings and serving techniques (sizing.engine_settings, sizing.serving)
    engine_settings = models.JSONField(
        default=dict,
        blank=True,
        help_text="gpu_memory_utilization, max_num_seqs, max_num_batched_tokens, "
        "max_model_len; empty: the engine's defaults (0.90 / 1,024 / 8,192 / model maximum).",
    )
    serving = models.JSONField(
        default=dict,
        blank=True,
        help_text="speculative, routing + distinct_prefixes, lora; empty: none.",
    )

    # pricing
    price_sheet = models.ForeignKey(
        PriceSheet,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        help_text="Blank: the sheet in force when the run starts.",
    )
    tier = models.CharField(max_length=20, choices=Tier.choices, default=Tier.ON_DEMAND)
    gpu_prices = models.JSONField(
        "custom $/GPU-hour by GPU slug",
        default=dict,
        blank=True,
        help_text='Overrides the sheet for this scenario, e.g. {"h100_sxm": 2.5}.',
    )
    price_provider = models.CharField(
        max_length=80, blank=True, help_text="Provider to price GPUs from; blank: the cheapest."
    )
    reserved_discount = models.FloatField(
        "reserved / committed discount",
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(0.95)],
        help_text="Fraction off the on-demand price for tier reserved; blank: the sheet's "
        "reserved rows.",
    )
    api_provider = models.CharField(max_length=80, blank=True)
    api_model = models.CharField(max_length=200, blank=True)
    api_input_usd_per_mtok = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)]
    )
    api_output_usd_per_mtok = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0)]
    )

    # policy
    target_utilization = models.FloatField(
        default=0.7, validators=[_positive, MaxValueValidator(1)]
    )
    spare_replicas = models.PositiveIntegerField("N+k spare replicas", default=1)
    burst_factor = models.FloatField(
        default=1.0, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    warm_pool_replicas = models.PositiveIntegerField(default=0)
    spare_nodes = models.PositiveIntegerField(
        "N+k spare nodes",
        default=0,
        validators=[MaxValueValidator(1000)],
        help_text="Whole nodes the serving replicas must survive losing (failure domains).",
    )

    # the fleet over time and over its life (planner.lifecycle validates the blocks; every
    # key optional, defaults cited in sizing.coldstart, sizing.autoscale, sizing.ownership)
    cold_start = models.JSONField(
        default=dict, blank=True, help_text="Cold-start links: image, weights source, init."
    )
    autoscaling = models.JSONField(
        default=dict, blank=True, help_text="Autoscaling: min replicas, burst, spot share."
    )
    ownership = models.JSONField(
        default=dict, blank=True, help_text="Buy vs rent: capex, depreciation, power, colo."
    )

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["owner", "-updated_at"])]

    def __str__(self) -> str:
        return self.name


class SizingRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="runs")
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.QUEUED, db_index=True
    )
    progress = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    enqueue_count = models.PositiveIntegerField(default=0)
    inputs = models.JSONField(default=dict, help_text="Everything the run used, to recompute it.")
    price_sheet = models.ForeignKey(
        PriceSheet, null=True, on_delete=models.PROTECT, related_name="runs"
    )
    candidate_count = models.PositiveIntegerField(default=0)
    batch_count = models.PositiveIntegerField(default=0)
    batches_done = models.JSONField(default=list, help_text="Indices of batches saved.")
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.scenario} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in {self.Status.SUCCEEDED, self.Status.FAILED}


class CandidateResult(models.Model):
    class Binding(models.TextChoices):
        MEMORY = "memory"
        TPOT = "tpot"
        TTFT = "ttft"
        THROUGHPUT = "throughput"

    run = models.ForeignKey(SizingRun, on_delete=models.CASCADE, related_name="results")
    candidate_key = models.CharField(max_length=200)
    model_name = models.CharField(max_length=200)
    gpu_slug = models.CharField(max_length=60)
    gpu_name = models.CharField(max_length=100)
    precision = models.CharField(max_length=10)
    kv_precision = models.CharField(max_length=10)
    #: the routed experts' precision where it is not ``precision`` (a checkpoint quantized in
    #: its experts only, e.g. gpt-oss's mxfp4, or ``serving.precision.experts``)
    expert_precision = models.CharField(max_length=10, blank=True, default="")
    tp = models.PositiveIntegerField()
    pp = models.PositiveIntegerField(default=1)
    ep = models.PositiveIntegerField(default=1)
    gpus_per_replica = models.PositiveIntegerField()
    fits = models.BooleanField()
    reason = models.TextField(blank=True)
    batch = models.PositiveIntegerField(default=0)
    ttft_ms = models.FloatField(null=True)
    tpot_ms = models.FloatField(null=True)
    ttft_ms_p50 = models.FloatField(null=True)
    ttft_ms_p95 = models.FloatField(null=True)
    ttft_ms_p99 = models.FloatField(null=True)
    tpot_ms_p50 = models.FloatField(null=True)
    tpot_ms_p95 = models.FloatField(null=True)
    tpot_ms_p99 = models.FloatField(null=True)
    throughput_tok_s = models.FloatField(null=True, help_text="Output tokens/s per replica.")
    # bigint: a large fleet of small replicas can pass 2^31 (services bounds the inputs)
    replicas = models.PositiveBigIntegerField(default=0)
    gpus = models.PositiveBigIntegerField(default=0)
    usd_per_hour = models.FloatField(null=True)
    usd_per_month = models.FloatField(null=True)
    usd_per_mtok = models.FloatField(null=True)
    tokens_per_usd = models.FloatField(null=True)
    headroom = models.FloatField(null=True, help_text="1 - mean utilization of the fleet.")
    binding_constraint = models.CharField(max_length=12, choices=Binding.choices, blank=True)
    meets_slo = models.BooleanField(default=False)
    latency_source = models.CharField(
        max_length=10,
        default="analytic",
        help_text="simulated (discrete-event simulation) or analytic (closed-form model).",
    )
    latency_statistic = models.CharField(
        max_length=8, default="mean", help_text="What ttft_ms / tpot_ms are: p95, p99, ... or mean."
    )
    profile = models.CharField(max_length=200, blank=True, help_text="Calibration profile used.")
    nodes = models.PositiveBigIntegerField(
        null=True, help_text="Whole nodes the replicas pack into (N+k by node included)."
    )
    gpus_per_node = models.PositiveIntegerField(null=True)
    evaluated = models.BooleanField(
        default=True,
        help_text="False: pruned, its optimistic bound could not beat a simulated option.",
    )
    recommended = models.BooleanField(default=False)
    rank = models.PositiveIntegerField(null=True)
    # disaggregated prefill/decode (sizing.disagg_plan): each pool's workers and layout; the
    # row's tp/pp/ep are then the decode worker's, ``replicas`` counts both pools' workers
    mode = models.CharField(
        max_length=6,
        default="agg",
        help_text="agg (one engine runs prefill and decode) or disagg (separate pools).",
    )
    prefill_workers = models.PositiveIntegerField(null=True)
    prefill_tp = models.PositiveIntegerField(null=True)
    prefill_pp = models.PositiveIntegerField(null=True)
    prefill_ep = models.PositiveIntegerField(null=True)
    prefill_dp = models.PositiveIntegerField(null=True)
    decode_workers = models.PositiveIntegerField(null=True)
    decode_tp = models.PositiveIntegerField(null=True)
    decode_pp = models.PositiveIntegerField(null=True)
    decode_ep = models.PositiveIntegerField(null=True)
    decode_dp = models.PositiveIntegerField(null=True)
    prefill_gpus = models.PositiveBigIntegerField(null=True)
    decode_gpus = models.PositiveBigIntegerField(null=True)
    kv_transfer_ms = models.FloatField(
        null=True, help_text="KV transfer one request's first token waits for (disagg rows)."
    )
    derivation = models.JSONField(default=dict)

    class Meta:
        ordering = ["rank", "usd_per_month"]
        constraints = [
            models.UniqueConstraint(fields=["run", "candidate_key"], name="unique_run_candidate")
        ]

    def __str__(self) -> str:
        return self.candidate_key


def hash_share_token(token: str) -> str:
    """What a share link stores of its token: its SHA-256 (hex)."""
    return hashlib.sha256(token.encode()).hexdigest()


class ShareLink(models.Model):
    """A read-only link; only a hash of its token is stored (``hash_share_token``)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    scenario = models.ForeignKey(Scenario, on_delete=models.CASCADE, related_name="share_links")
    run = models.ForeignKey(SizingRun, null=True, blank=True, on_delete=models.CASCADE)
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"share link {self.id} for {self.scenario}"


class SimulationCache(models.Model):
    """A finished tail search, keyed by the SHA-256 of everything it depends on
    (``planner.tails.cache_key``): the same inputs never simulate twice."""

    key = models.CharField(max_length=64, unique=True)
    result = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key[:12]


#: A run of at least this many candidates is sized in two batches or more, so two workers
#: share its analytic sizing (the typical bench scenario's 180: 4 workers 1.61 -> 1.35 s cold,
#: 1 worker 1.75 -> 1.81 s).
SPLIT_FROM = 128


def batch_count_for(count: int) -> int:
    """Batches of a run of ``count`` candidates: ``ceil(count / SIZING_BATCH_SIZE)``, and at
    least two from ``SPLIT_FROM`` candidates."""
    batches = -(-count // settings.SIZING_BATCH_SIZE)
    return max(batches, 2) if count >= SPLIT_FROM else batches


def batch_indices(count: int, batches: int, batch_index: int) -> range:
    """The candidates of batch ``batch_index`` of ``batches``, in equal shares (within one).
    Read from the run's own ``batch_count``, so a worker configured otherwise than the
    process that saved the run sizes the same batches."""
    return range(batch_index * count // batches, (batch_index + 1) * count // batches)


def update_rows(model, objs: list, fields: tuple[str, ...]) -> None:
    """``UPDATE ... SET <fields> WHERE pk = %s`` once per object, sent as one executemany
    (psycopg pipelines it). Django's ``bulk_update`` builds a CASE per field per row and
    resolves an expression for each: 2 s of a 6 s run for 144 rows, this is ~0.1 s."""
    columns = [model._meta.get_field(f) for f in fields]
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(col.column)} = %s" for col in columns)
    sql = (
        f"UPDATE {quote(model._meta.db_table)} SET {sets} WHERE {quote(model._meta.pk.column)} = %s"
    )
    params = [
        [col.get_db_prep_save(getattr(obj, col.attname), connection) for col in columns] + [obj.pk]
        for obj in objs
    ]
    _executemany(sql, params)


def _executemany(sql: str, params: list) -> None:
    """One executemany on Django's connection, in its transaction. On PostgreSQL through a
    server-binding psycopg cursor (the parameters travel apart from the statement: Django's
    client-side binding quotes every JSON value into the SQL text, the slow part of writing
    derivations), its errors translated as Django's; elsewhere Django's own cursor."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.executemany(sql, params)
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.executemany(sql, params)


def upsert_rows(model, objs: list, unique_fields: list[str], update_fields: list[str]) -> None:
    """``INSERT ... ON CONFLICT (<unique_fields>) DO UPDATE SET <update_fields>`` for ``objs``
    (new rows: the primary key is the table's), one executemany.

    On PostgreSQL the parameters travel apart from the statement (``_executemany``):
    ``bulk_create`` took 0.47 s for a typical run's 180 rows (5.8 MB of derivations) where
    this takes ~0.13 s. Other databases (SQLite) use ``bulk_create(update_conflicts=True)``."""
    if connection.vendor != "postgresql":
        model.objects.bulk_create(
            objs, update_conflicts=True, unique_fields=unique_fields, update_fields=update_fields
        )
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    conflict = ", ".join(quote(model._meta.get_field(f).column) for f in unique_fields)
    updates = [quote(model._meta.get_field(f).column) for f in update_fields]
    columns = ", ".join(quote(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in updates)
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({conflict}) DO UPDATE SET {sets}"
    )
    params = [
        [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields] for obj in objs
    ]
    _executemany(sql, params)
