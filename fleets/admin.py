from django.contrib import admin, messages
from django.shortcuts import redirect
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path

from .models import CalibrationProfile, GpuSku, ModelArchitecture
from .services import CatalogRowInUse, check_deletable
from .uploads import CalibrationUploadForm, measurements_from_upload


class InUseProtected:
    """The admin's delete page lists scenarios that use a row as protected: no deletion."""

    def get_deleted_objects(self, objs, request):
        deleted, counts, perms, protected = super().get_deleted_objects(objs, request)
        for row in objs:
            try:
                check_deletable(row)
            except CatalogRowInUse as exc:
                protected = [*protected, exc.messages[0]]
        return deleted, counts, perms, protected


@admin.register(GpuSku)
class GpuSkuAdmin(InUseProtected, admin.ModelAdmin):
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
class ModelArchitectureAdmin(InUseProtected, admin.ModelAdmin):
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


# ---------------------------------------------------------------- calibration profiles
# Inline so the upload page needs no template file outside this app's admin module.
UPLOAD_TEMPLATE = """{% extends "admin/base_site.html" %}
{% block content %}
<p>Upload a vLLM <code>bench serve --save-result</code> JSON, a guidellm report JSON, or a CSV
in the measured.csv format. A profile is fitted for the chosen GPU and engine; nothing is saved
if any row is refused or the fit has fewer points than constants.</p>
<form method="post" enctype="multipart/form-data">{% csrf_token %}
<table>{{ form.as_table }}</table>
<input type="submit" value="Fit profile">
</form>
{% endblock %}"""


@admin.register(CalibrationProfile)
class CalibrationProfileAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "gpu",
        "generation",
        "engine_family",
        "precision",
        "n_points",
        "relative_error",
        "ttft_relative_error",
        "source",
        "owner",
        "created",
    )
    list_filter = ("generation", "engine_family", "source")
    search_fields = ("name", "source")
    readonly_fields = ("created",)

    def get_urls(self):
        upload = path(
            "upload/",
            self.admin_site.admin_view(self.upload_view),
            name="fleets_calibrationprofile_upload",
        )
        return [upload, *super().get_urls()]

    def upload_view(self, request):
        """Fit a profile for the chosen GPU and engine from an uploaded measurement file."""
        from .calibration import fit_upload

        form = CalibrationUploadForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            upload = data["file"]
            try:
                rows = measurements_from_upload(upload, data)
                saved = fit_upload(
                    rows,
                    data["gpu"],
                    data["engine_family"],
                    source=f"user upload {upload.name}",
                    owner=request.user if request.user.is_authenticated else None,
                )
            except ValueError as exc:  # MeasurementError and CalibrationRefused
                messages.error(request, f"{upload.name} refused: {exc}")
            else:
                names = ", ".join(p.name for p in saved)
                messages.success(request, f"fitted {len(saved)} profile(s): {names}")
                return redirect("admin:fleets_calibrationprofile_changelist")
        context = {
            **self.admin_site.each_context(request),
            "title": "Calibrate from a measurement upload",
            "form": form,
            "opts": self.model._meta,
        }
        template = engines["django"].from_string(UPLOAD_TEMPLATE)
        return TemplateResponse(request, template, context)
