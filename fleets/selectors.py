"""Catalog reads: rows -> the core's plain dataclasses, and the names users type -> rows.

Names are matched case-insensitively, with or without an org prefix ("meta-llama/") and an
"-Instruct" suffix, against each row's id, slug, name and aliases. This lives in fleets (not
planner) so that calibration, which sits below planner, can build core specs without an
upward import.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from django.db.models import F

from fleets.models import GpuSku, ModelArchitecture
from fleets.names import normalize_name
from sizing.precision import checkpoint_from_hf_config
from sizing.specs import GpuSpec, ModelSpec
from sizing.vision import vision_from_hf_config


def _keys(*names) -> set[str]:
    keys = set()
    for name in names:
        if name:
            keys.add(str(name).strip().lower())
            keys.add(normalize_name(name))
    return keys


@dataclass(frozen=True)
class CatalogIndex:
    """Name -> primary key maps for GPUs and models, built once per catalog state."""

    gpus: dict[str, int]
    models: dict[str, int]

    def _find(self, table: dict[str, int], name: str, kind: str) -> int:
        for key in (str(name).strip().lower(), normalize_name(name)):
            if key in table:
                return table[key]
        close = difflib.get_close_matches(normalize_name(name), list(table), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise LookupError(f"unknown {kind} {name!r}{hint}")

    def gpu_id(self, name: str) -> int:
        return self._find(self.gpus, name, "GPU")

    def model_id(self, name: str) -> int:
        return self._find(self.models, name, "model")


def models_visible_to(user):
    """The shared catalog's models and the ones ``user`` imported (nobody else's)."""
    from django.db.models import Q

    shared = Q(owner__isnull=True)
    if user is None or not user.is_authenticated:
        return ModelArchitecture.objects.filter(shared)
    return ModelArchitecture.objects.filter(shared | Q(owner=user))


def catalog_index(model_rows=None) -> CatalogIndex:
    """Name maps over the GPUs and ``model_rows`` (a queryset; default every model)."""
    gpus: dict[str, int] = {}
    for pk, slug, name, aliases in GpuSku.objects.values_list("pk", "slug", "name", "aliases"):
        for key in _keys(slug, name, slug.replace("_", " "), *aliases):
            gpus.setdefault(key, pk)
    models: dict[str, int] = {}
    model_rows = ModelArchitecture.objects.all() if model_rows is None else model_rows
    # the catalog's rows first: a name both know resolves to the catalog's model
    model_rows = model_rows.order_by(F("owner_id").asc(nulls_first=True), "name")
    rows = model_rows.values_list("pk", "hf_id", "slug", "name", "aliases")
    for pk, hf_id, slug, name, aliases in rows:
        for key in _keys(hf_id, slug, name, *aliases):
            models.setdefault(key, pk)
    return CatalogIndex(gpus=gpus, models=models)


def resolve_gpu(name: str) -> GpuSku:
    return GpuSku.objects.get(pk=catalog_index().gpu_id(name))


def resolve_model(name: str) -> ModelArchitecture:
    return ModelArchitecture.objects.get(pk=catalog_index().model_id(name))


def linear_state_elements(row: ModelArchitecture) -> int:
    """Per layer per sequence: Gated DeltaNet's recurrent state (heads x d_k x d_v) plus the
    short-convolution state ((kernel - 1) past inputs of q, k and v)."""
    if not row.linear_attention_layers:
        return 0
    key_dim = row.linear_num_key_heads * row.linear_key_head_dim
    value_dim = row.linear_num_value_heads * row.linear_value_head_dim
    recurrent = row.linear_num_value_heads * row.linear_key_head_dim * row.linear_value_head_dim
    conv = (2 * key_dim + value_dim) * max(row.linear_conv_kernel_dim - 1, 0)
    return recurrent + conv


def model_spec(row: ModelArchitecture) -> ModelSpec:
    return ModelSpec(
        name=row.name,
        num_layers=row.num_layers,
        hidden_size=row.hidden_size,
        num_attention_heads=row.num_attention_heads,
        num_kv_heads=row.num_kv_heads,
        head_dim=row.head_dim,
        vocab_size=row.vocab_size,
        total_params=row.total_params,
        active_params=row.active_params,
        embedding_params=row.embedding_params,
        kv_lora_rank=row.kv_lora_rank,
        qk_rope_head_dim=row.qk_rope_head_dim,
        full_attention_layers=row.full_attention_layers,
        sliding_window_layers=row.sliding_window_layers,
        sliding_window=row.sliding_window,
        linear_attention_layers=row.linear_attention_layers,
        linear_state_elements=linear_state_elements(row),
        num_experts=row.num_experts,
        experts_per_token=row.experts_per_token,
        shared_experts=row.shared_experts,
        params_per_expert=row.params_per_expert,
        num_moe_layers=row.num_moe_layers,
        max_context=row.max_context or 131072,
        tie_word_embeddings=row.tie_word_embeddings,
        **vision_from_hf_config(row.config_json or {}),
        **checkpoint_from_hf_config(row.config_json or {}),
    )


def gpu_spec(row: GpuSku, usd_per_gpu_hour: float = 0.0) -> GpuSpec:
    return GpuSpec(
        name=row.name,
        memory_gb=row.memory_gb,
        hbm_bandwidth_tb_s=row.hbm_bandwidth_tb_s,
        dense_tflops=row.dense_tflops(),
        scale_up_link=row.scale_up_link,
        scale_up_bw_gb_s=row.scale_up_bw_gb_s,
        gpus_per_node=row.gpus_per_node,
        scale_up_domain_gpus=row.scale_up_domain_gpus,
        usd_per_gpu_hour=usd_per_gpu_hour,
        **({"scale_out_gb_s": row.nic_gb_s} if row.nic_gb_s else {}),
        vendor=row.vendor,
    )
