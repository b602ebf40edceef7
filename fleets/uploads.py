"""User measurement uploads: the form conditions and the parser dispatch (admin, API, UI),
and sweeps: several result files at once (one per load point), parsed into one row set."""

from __future__ import annotations

import dataclasses
import io
import json

from django import forms

from .measurements import (
    ENGINE_FAMILIES,
    MeasurementError,
    parse_guidellm_report,
    parse_vllm_benchmark_json,
    read_measurements,
)
from .models import GpuSku

MAX_UPLOAD_BYTES = 2_000_000
MAX_SWEEP_FILES = 20
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "other": "other"}
MAX_LINE_CHARS = 131_072  # the csv module's field size limit


class CalibrationUploadForm(forms.Form):
    """A measurement file and the conditions a JSON result does not state."""

    file = forms.FileField(
        label="Measurement file",
        help_text=f"vLLM bench serve JSON, guidellm report JSON, or CSV; at most "
        f"{MAX_UPLOAD_BYTES / 1e6:g} MB.",
    )
    gpu = forms.ModelChoiceField(label="GPU", queryset=GpuSku.objects.all())
    engine_family = forms.ChoiceField(
        label="Serving engine",
        choices=[(e, ENGINE_LABELS.get(e, e)) for e in ENGINE_FAMILIES],
    )
    model = forms.CharField(
        label="Model served",
        required=False,
        help_text="JSON uploads: e.g. meta-llama/Llama-3.1-8B-Instruct (vLLM JSON: its model_id).",
    )
    num_gpus = forms.IntegerField(
        label="GPUs in the instance", min_value=1, required=False, help_text="JSON uploads."
    )
    tp = forms.IntegerField(
        label="Tensor-parallel degree (TP)", min_value=1, required=False, help_text="JSON uploads."
    )
    ep = forms.IntegerField(label="Expert-parallel degree (EP)", min_value=1, required=False)
    weight_precision = forms.CharField(
        label="Weight precision", required=False, help_text="JSON uploads, e.g. fp8 or bf16."
    )
    kv_precision = forms.CharField(
        label="KV-cache precision", required=False, help_text="blank: from the weights"
    )
    isl = forms.IntegerField(
        label="Input length (tokens)", min_value=1, required=False, help_text="blank: the mean"
    )
    osl = forms.IntegerField(
        label="Output length (tokens)", min_value=1, required=False, help_text="blank: the mean"
    )


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one input; cleans to a list, each file checked as a FileField does."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        files = [f for f in (data if isinstance(data, list | tuple) else [data]) if f]
        if not files:
            return [super().clean(None, initial)]  # raises "required"
        if len(files) > MAX_SWEEP_FILES:
            raise forms.ValidationError(
                f"{len(files)} files; upload at most {MAX_SWEEP_FILES} at once"
            )
        return [super(MultipleFileField, self).clean(f, initial) for f in files]


class SweepUploadForm(CalibrationUploadForm):
    """A sweep: several result files (e.g. one ``vllm bench serve`` JSON per concurrency)
    sharing the conditions below."""

    file = MultipleFileField(
        label="Measurement files",
        help_text=f"Up to {MAX_SWEEP_FILES} files at once, each at most "
        f"{MAX_UPLOAD_BYTES / 1e6:g} MB ({MAX_UPLOAD_BYTES:,} bytes): vLLM bench serve "
        "--save-result JSON, guidellm report JSON, or CSV in the measured.csv format.",
    )


def measurements_from_uploads(uploads, data: dict) -> list:
    """The rows of every file of a sweep; refused as a whole, naming the file at fault.

    Row ids are prefixed by the file (JSON results all use the same field ids), so the points
    of a sweep stay distinct in the fit and its cross-validation.
    """
    rows = []
    for index, upload in enumerate(uploads):
        try:
            parsed = measurements_from_upload(upload, data)
        except MeasurementError as exc:
            raise MeasurementError(f"{upload.name}: {exc}") from None
        prefix = f"{index + 1}:{upload.name}"
        rows += [dataclasses.replace(r, row_id=f"{prefix}:{r.row_id}") for r in parsed]
    return rows


def _check_text(name: str, content: bytes) -> None:
    """Uploads are UTF-8 text (a BOM is fine) without NUL and without a line longer than a
    CSV field may be; anything else is refused by name before a parser sees it."""
    if b"\x00" in content:
        hint = " (UTF-16? save it as UTF-8)" if content[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise MeasurementError(f"{name} contains NUL bytes: not a text file{hint}")
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MeasurementError(
            f"{name} is not UTF-8 text (byte {exc.start}): upload a CSV or JSON file"
        ) from None
    longest = max((len(line) for line in text.splitlines()), default=0)
    if longest > MAX_LINE_CHARS:
        raise MeasurementError(
            f"{name} has a line of {longest:,} characters; the limit is {MAX_LINE_CHARS:,}"
        )


def measurements_from_upload(upload, data: dict) -> list:
    """Measurements from an uploaded file: CSV by name, else JSON (vLLM or guidellm).

    Raises
    ------
    MeasurementError
        Naming the line/field at fault, or a missing JSON condition.
    """
    if upload.size and upload.size > MAX_UPLOAD_BYTES:
        raise MeasurementError(
            f"{upload.name} is {upload.size:,} bytes; the limit is {MAX_UPLOAD_BYTES:,}"
        )
    content = upload.read()
    _check_text(upload.name, content)
    if upload.name.lower().endswith(".csv"):
        return read_measurements(io.BytesIO(content))  # strict: one bad row refuses all
    try:
        payload = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MeasurementError(f"{upload.name}: neither CSV nor JSON ({exc})") from None
    gpu = data["gpu"]
    for field in ("num_gpus", "tp", "weight_precision"):
        if not data.get(field):
            raise MeasurementError("missing condition for a JSON upload", field=field)
    common = {
        "gpu": gpu.name,
        "num_gpus": data["num_gpus"],
        "tp": data["tp"],
        "ep": data.get("ep"),
        "engine": data["engine_family"],
        "weight_precision": data["weight_precision"],
        "kv_precision": data.get("kv_precision") or "",
        "isl": data.get("isl"),
        "osl": data.get("osl"),
        "source": f"user upload {upload.name}",
    }
    if isinstance(payload, dict) and "benchmarks" in payload:
        if not data.get("model"):
            raise MeasurementError("missing condition for a guidellm report", field="model")
        return parse_guidellm_report(payload, model=data["model"], **common)
    return parse_vllm_benchmark_json(payload, model=data.get("model") or None, **common)
