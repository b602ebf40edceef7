"""User measurement uploads: the form conditions and the parser dispatch (admin, API, UI)."""

from __future__ import annotations

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
MAX_LINE_CHARS = 131_072  # the csv module's field size limit


class CalibrationUploadForm(forms.Form):
    """A measurement file and the conditions a JSON result does not state."""

    file = forms.FileField(help_text="vLLM bench serve JSON, guidellm report JSON, or CSV.")
    gpu = forms.ModelChoiceField(queryset=GpuSku.objects.all())
    engine_family = forms.ChoiceField(choices=[(e, e) for e in ENGINE_FAMILIES])
    model = forms.CharField(required=False, help_text="JSON uploads: the model served.")
    num_gpus = forms.IntegerField(min_value=1, required=False, help_text="JSON uploads.")
    tp = forms.IntegerField(min_value=1, required=False, help_text="JSON uploads.")
    ep = forms.IntegerField(min_value=1, required=False)
    weight_precision = forms.CharField(required=False, help_text="JSON uploads, e.g. fp8.")
    kv_precision = forms.CharField(required=False)
    isl = forms.IntegerField(min_value=1, required=False)
    osl = forms.IntegerField(min_value=1, required=False)


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
