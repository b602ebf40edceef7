"""What can be deployed: GPU SKUs and model architectures (the catalog)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from .validation import JsonObject, RangeValidator, StringList, positive


class SourcedRow(models.Model):
    """Every catalog row keeps where its numbers came from and when."""

    source = models.TextField(help_text="Where the numbers come from (URL, repo@commit, doc).")
    as_of = models.DateField(help_text="Date the source was read.")

    class Meta:
        abstract = True


class GpuSku(SourcedRow):
    class Link(models.TextChoices):
        NVLINK = "nvlink", "NVLink"
        INFINITY_FABRIC = "infinity_fabric", "AMD Infinity Fabric"
        PCIE = "pcie", "PCIe only"

    slug = models.SlugField(unique=True, help_text="Stable id, e.g. h100_sxm.")
    name = models.CharField(max_length=100)
    vendor = models.CharField(max_length=40)
    form_factor = models.CharField(max_length=60, blank=True)
    aliases = models.JSONField(
        default=list, blank=True, validators=[StringList()], help_text="Other names users type."
    )
    memory_gb = models.FloatField(validators=[RangeValidator("memory_gb")])
    memory_type = models.CharField(max_length=40, blank=True)
    hbm_bandwidth_tb_s = models.FloatField(
        "memory bandwidth (TB/s)", validators=[RangeValidator("hbm_bandwidth_tb_s")]
    )
    bf16_tflops = models.FloatField(
        "dense BF16 TFLOP/s", validators=[RangeValidator("bf16_tflops")]
    )
    fp8_tflops = models.FloatField(
        "dense FP8 TFLOP/s", null=True, blank=True, validators=[RangeValidator("fp8_tflops")]
    )
    fp4_tflops = models.FloatField(
        "dense FP4 TFLOP/s", null=True, blank=True, validators=[RangeValidator("fp4_tflops")]
    )
    int8_tops = models.FloatField(
        "dense INT8 TOPS", null=True, blank=True, validators=[RangeValidator("int8_tops")]
    )
    scale_up_link = models.CharField(max_length=20, choices=Link.choices)
    scale_up_interconnect = models.CharField(max_length=200, blank=True)
    scale_up_bw_gb_s = models.FloatField(
        "scale-up GB/s per GPU (bidirectional)", validators=[RangeValidator("scale_up_bw_gb_s")]
    )
    gpus_per_node = models.PositiveIntegerField(validators=[RangeValidator("gpus_per_node")])
    scale_up_domain_gpus = models.PositiveIntegerField(
        validators=[RangeValidator("scale_up_domain_gpus")],
        help_text="GPUs reachable on the scale-up link (NVL72: 72; PCIe: the node).",
    )
    nic_gb_s = models.FloatField(
        "scale-out NIC GB/s per GPU (one way)",
        null=True,
        blank=True,
        validators=[RangeValidator("nic_gb_s")],
        help_text="RDMA bandwidth per GPU off the scale-up domain (400 Gb/s = 50 GB/s).",
    )
    nic_source = models.TextField(blank=True, help_text="Where the NIC figure comes from.")
    tdp_w = models.FloatField(null=True, blank=True, validators=[RangeValidator("tdp_w")])
    mig_max_instances = models.PositiveIntegerField(null=True, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["vendor", "name"]
        verbose_name = "GPU SKU"

    def __str__(self) -> str:
        return self.name

    def dense_tflops(self) -> dict[str, float]:
        peaks = {
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "fp4": self.fp4_tflops,
            "int8": self.int8_tops,
        }
        return {name: value for name, value in peaks.items() if value}


class ModelArchitecture(SourcedRow):
    """A model's config.json fields the sizing chain needs, and its parameter counts."""

    slug = models.CharField(
        max_length=120,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9._-]*$", "lowercase letters, digits, . _ -")],
    )
    hf_id = models.CharField("Hugging Face id", max_length=200, unique=True)
    name = models.CharField(max_length=200)
    aliases = models.JSONField(default=list, blank=True, validators=[StringList()])
    model_type = models.CharField(max_length=60)
    num_layers = models.PositiveIntegerField(validators=[positive])
    hidden_size = models.PositiveIntegerField(validators=[positive])
    num_attention_heads = models.PositiveIntegerField(validators=[positive])
    num_kv_heads = models.PositiveIntegerField(validators=[positive])
    head_dim = models.PositiveIntegerField(validators=[positive])
    intermediate_size = models.PositiveIntegerField(
        validators=[positive], help_text="FFN width of the dense layers."
    )
    vocab_size = models.PositiveIntegerField(validators=[positive])
    tie_word_embeddings = models.BooleanField(default=False)
    attention_bias = models.BooleanField(default=False)
    qk_norm = models.BooleanField(default=False)
    attn_output_gate = models.BooleanField(default=False)
    q_lora_rank = models.PositiveIntegerField(default=0)
    kv_lora_rank = models.PositiveIntegerField(default=0, help_text="MLA latent width; 0 = no MLA.")
    qk_rope_head_dim = models.PositiveIntegerField(default=0)
    qk_nope_head_dim = models.PositiveIntegerField(default=0)
    v_head_dim = models.PositiveIntegerField(default=0)
    index_n_heads = models.PositiveIntegerField(default=0)
    index_head_dim = models.PositiveIntegerField(default=0)
    sliding_window = models.PositiveIntegerField(default=0, help_text="Tokens; 0 = none.")
    sliding_window_layers = models.PositiveIntegerField(default=0)
    linear_attention_layers = models.PositiveIntegerField(default=0)
    linear_num_key_heads = models.PositiveIntegerField(default=0)
    linear_num_value_heads = models.PositiveIntegerField(default=0)
    linear_key_head_dim = models.PositiveIntegerField(default=0)
    linear_value_head_dim = models.PositiveIntegerField(default=0)
    linear_conv_kernel_dim = models.PositiveIntegerField(default=0)
    global_kv_heads = models.PositiveIntegerField(default=0)
    global_head_dim = models.PositiveIntegerField(default=0)
    attention_k_eq_v = models.BooleanField(default=False)
    num_experts = models.PositiveIntegerField(default=0)
    experts_per_token = models.PositiveIntegerField(default=0)
    shared_experts = models.PositiveIntegerField(default=0)
    moe_intermediate_size = models.PositiveIntegerField(default=0)
    shared_expert_intermediate_size = models.PositiveIntegerField(default=0)
    num_moe_layers = models.PositiveIntegerField(default=0)
    dense_mlp_in_moe_layers = models.BooleanField(default=False)
    max_context = models.PositiveIntegerField(default=0)
    total_params = models.FloatField(help_text="Computed from the config.")
    active_params = models.FloatField(help_text="Computed: non-expert + top-k + shared.")
    embedding_params = models.FloatField(default=0)
    params_per_expert = models.FloatField(default=0)
    published_total_params = models.FloatField(null=True, blank=True)
    published_active_params = models.FloatField(null=True, blank=True)
    published_source = models.TextField(blank=True)
    config_json = models.JSONField(
        default=dict, blank=True, validators=[JsonObject()], help_text="The config.json as read."
    )
    notes = models.TextField(blank=True)
    owner = models.ForeignKey(
        "auth.User",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="imported_models",
        help_text="Blank: the shared catalog. Set: imported by this user, seen only by them.",
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "model architecture"

    def __str__(self) -> str:
        return self.name

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_window_layers - self.linear_attention_layers

    @property
    def attention_kind(self) -> str:
        if self.kv_lora_rank:
            return "MLA"
        kind = "MHA" if self.num_kv_heads == self.num_attention_heads else "GQA"
        if self.linear_attention_layers:
            return f"hybrid {kind} + linear attention"
        if self.sliding_window_layers:
            return f"hybrid {kind} + sliding window {self.sliding_window}"
        return kind


class CalibrationProfile(models.Model):
    """Fitted efficiency constants of the performance model for one GPU x engine (x precision).

    A profile is a handful of physical constants (``sizing.calibrate``), never a table
    of measured values. ``gpu`` is empty for generation-level profiles (fallback for GPUs with
    no data of their own). ``cv_error`` holds the out-of-sample error per metric
    (``{"ttft_ms": {"median_ape_pct": .., "mean_ape_pct": .., "n": ..}}``) and
    ``relative_error`` the fraction the chain carries as a +- band.
    """

    class Generation(models.TextChoices):
        AMPERE = "ampere", "NVIDIA Ampere"
        ADA = "ada", "NVIDIA Ada Lovelace"
        HOPPER = "hopper", "NVIDIA Hopper"
        BLACKWELL = "blackwell", "NVIDIA Blackwell"
        CDNA3 = "cdna3", "AMD CDNA 3"
        CDNA4 = "cdna4", "AMD CDNA 4"

    class Engine(models.TextChoices):
        VLLM = "vllm", "vLLM"
        SGLANG = "sglang", "SGLang"
        TRTLLM = "trtllm", "TensorRT-LLM"
        OTHER = "other", "other engine"
        ANY = "any", "any engine"

    SHIPPED = "shipped fit"

    name = models.CharField(max_length=200)
    gpu = models.ForeignKey(
        GpuSku, null=True, blank=True, on_delete=models.CASCADE, related_name="calibrations"
    )
    generation = models.CharField(max_length=20, choices=Generation.choices)
    engine_family = models.CharField(max_length=10, choices=Engine.choices, default=Engine.ANY)
    precision = models.CharField(max_length=10, blank=True, help_text="Blank: any precision.")
    engine_version = models.CharField(
        max_length=40, blank=True, help_text="Engine release, e.g. 0.21; blank: the newest."
    )
    constants = models.JSONField(
        validators=[JsonObject(numbers=True)],
        help_text="Fitted constants by Calibration field name.",
    )
    free_constants = models.JSONField(
        default=list, validators=[StringList()], help_text="Constants the fit moved."
    )
    relative_error = models.FloatField(help_text="Cross-validated median APE (fraction).")
    ttft_relative_error = models.FloatField(default=0.5)
    cv_error = models.JSONField(default=dict, blank=True, validators=[JsonObject()])
    in_sample_error = models.JSONField(default=dict, blank=True, validators=[JsonObject()])
    fitted_row_ids = models.JSONField(default=list, blank=True)
    fitted_sources = models.JSONField(
        default=list, blank=True, validators=[StringList(max_items=10_000, max_length=1000)]
    )
    quality = models.JSONField(
        default=dict,
        blank=True,
        validators=[JsonObject()],
        help_text="Points, constants that ended at a bound, verdict.",
    )
    n_points = models.PositiveIntegerField()
    created = models.DateTimeField(auto_now_add=True)
    source = models.CharField(max_length=300, help_text='"shipped fit" or "user upload <file>".')
    owner = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["generation", "name", "-created"]
        verbose_name = "calibration profile"

    def __str__(self) -> str:
        return f"{self.name} ({self.source})"
