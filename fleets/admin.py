from django.contrib import admin

from .models import GpuSku, ModelArchitecture


@admin.register(GpuSku)
class GpuSkuAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "vendor",
        "memory_gb",
        "hbm_bandwidth_tb_s",
        "bf16_tflops",
        "fp8_tflops",
        "fp4_tflops",
        "scale_up_link",
        "as_of",
    )
    list_filter = ("vendor", "scale_up_link")
    search_fields = ("name", "slug", "aliases")


@admin.register(ModelArchitecture)
class ModelArchitectureAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "hf_id",
        "model_type",
        "num_layers",
        "num_kv_heads",
        "kv_lora_rank",
        "num_experts",
        "total_params",
        "active_params",
        "as_of",
    )
    list_filter = ("model_type",)
    search_fields = ("name", "hf_id", "slug", "aliases")
    readonly_fields = ("total_params", "active_params", "embedding_params", "params_per_expert")
