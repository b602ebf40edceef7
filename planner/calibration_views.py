"""The calibration page: the profiles in use, and a sweep upload (several vLLM ``bench serve``
/ guidellm JSONs or CSVs at once) previewed point by point — measured against predicted with
the profile in use now and with the profile the upload would fit — before anything is saved.

Parsing lives in ``fleets.uploads``; fitting is ``fleets.calibration.fit_upload`` (called,
never re-implemented). The preview runs the real fit inside a transaction it rolls back, so
what is shown is exactly what "Save" then stores.
"""

from __future__ import annotations

import dataclasses
import math
import secrets

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import Q
from django.shortcuts import redirect, render

from fleets.measurements import Measurement, MeasurementError
from fleets.models import CalibrationProfile, GpuSku
from fleets.uploads import MAX_SWEEP_FILES, MAX_UPLOAD_BYTES, SweepUploadForm

SESSION_KEY = "calibration_sweep"
METRIC_LABELS = {
    "output_tok_s_per_gpu": "output tokens/s per GPU",
    "ttft_ms": "TTFT (ms)",
    "tpot_ms": "TPOT (ms)",
}
SOURCE_CHARS = 300  # CalibrationProfile.source


class _DryRun(Exception):
    """Raised inside the preview's transaction so the fitted profiles are not kept."""


def _to_session(rows: list[Measurement]) -> list[dict]:
    return [dataclasses.asdict(r) | {"flags": sorted(r.flags)} for r in rows]


def _from_session(rows: list[dict]) -> list[Measurement]:
    return [Measurement(**(r | {"flags": frozenset(r["flags"])})) for r in rows]


def _source(names: list[str]) -> str:
    return f"user upload {', '.join(names)}"[:SOURCE_CHARS]


def _pct(predicted: float, measured: float) -> float | None:
    if predicted is None or not math.isfinite(predicted) or not measured:
        return None
    return 100.0 * (predicted - measured) / measured


def fit_preview(rows, gpu: GpuSku, engine: str, source: str, owner) -> dict:
    """Per point: measured, predicted now, predicted with the fit; and the profiles the fit
    would save. Raises what ``fit_upload`` raises (CalibrationRefused, ValueError)."""
    from fleets.calibration import calibration_for, catalog_points, fit_upload
    from sizing.calibrate import predict_points

    points, left_out = catalog_points(rows)
    points = [p for p in points if p.gpu_key == gpu.slug and p.engine == engine]
    before = [calibration_for(p.gpu_key, p.engine, p.precision, owner) for p in points]
    try:
        with transaction.atomic():
            saved = fit_upload(rows, gpu, engine, source=source, owner=owner)
            after = [calibration_for(p.gpu_key, p.engine, p.precision, owner) for p in points]
            raise _DryRun
    except _DryRun:
        pass
    now = predict_points(points, [c for c, _ in before]) if points else []
    fitted = predict_points(points, [c for c, _ in after]) if points else []
    files = {r.row_id: r.source.removeprefix("user upload ") for r in rows}
    table = []
    for i, point in enumerate(points):
        load = "offline" if math.isnan(point.concurrency) else f"{int(point.concurrency)}"
        table.append(
            {
                "file": files.get(point.row_id, ""),
                "model": point.model.name,
                "layout": f"{point.num_gpus}× TP{point.tp} {point.weight_precision}",
                "lengths": f"{point.isl:g} / {point.osl:g}",
                "concurrency": load,
                "metric": METRIC_LABELS.get(point.metric, point.metric),
                "measured": point.value,
                "now": float(now[i]),
                "now_pct": _pct(float(now[i]), point.value),
                "now_profile": before[i][1],
                "fitted": float(fitted[i]),
                "fitted_pct": _pct(float(fitted[i]), point.value),
            }
        )
    return {
        "points": table,
        "left_out": sorted({reason for _, reason in left_out})[:10],
        "profiles": [
            {"name": p.name, "n_points": p.n_points, "relative_error": p.relative_error}
            for p in saved
        ],
    }


def _profiles(user):
    return (
        CalibrationProfile.objects.select_related("gpu")
        .filter(Q(owner__isnull=True) | Q(owner=user))
        .order_by("owner_id", "generation", "name")
    )


@login_required
def calibration(request):
    """GET: profiles and the upload form. POST: parse and preview (``action=preview``), or
    save the previewed fit (``action=save`` with its token), or discard it."""
    action = request.POST.get("action", "preview")
    if request.method == "POST" and action in ("save", "discard"):
        return _save_or_discard(request, action)
    form = SweepUploadForm(request.POST or None, request.FILES or None)
    preview = None
    if request.method == "POST" and form.is_valid():
        preview = _preview(request, form)
    context = {
        "form": form,
        "preview": preview,
        "profiles": _profiles(request.user),
        "max_files": MAX_SWEEP_FILES,
        "max_mb": MAX_UPLOAD_BYTES / 1e6,
    }
    status = 400 if request.method == "POST" and form.errors else 200
    return render(request, "planner/calibration.html", context, status=status)


def _preview(request, form) -> dict | None:
    from fleets.uploads import measurements_from_uploads
    from sizing.calibrate import CalibrationRefused

    data = form.cleaned_data
    uploads = data["file"]
    names = [u.name for u in uploads]
    try:
        rows = measurements_from_uploads(uploads, data)
        preview = fit_preview(
            rows, data["gpu"], data["engine_family"], _source(names), request.user
        )
    except (MeasurementError, CalibrationRefused, ValueError) as exc:
        form.add_error("file", f"refused, nothing saved: {exc}")
        return None
    token = secrets.token_urlsafe(12)
    request.session[SESSION_KEY] = {
        "token": token,
        "rows": _to_session(rows),
        "gpu": data["gpu"].pk,
        "engine_family": data["engine_family"],
        "names": names,
    }
    return preview | {"token": token, "names": names, "gpu": data["gpu"]}


def _save_or_discard(request, action: str):
    from fleets.calibration import fit_upload
    from sizing.calibrate import CalibrationRefused

    pending = request.session.get(SESSION_KEY) or {}
    if not pending or pending.get("token") != request.POST.get("token"):
        messages.error(request, "That preview expired or was replaced; upload the files again.")
        return redirect("planner:calibration")
    del request.session[SESSION_KEY]
    if action == "discard":
        messages.info(request, "Discarded: nothing was saved.")
        return redirect("planner:calibration")
    gpu = GpuSku.objects.get(pk=pending["gpu"])
    try:
        saved = fit_upload(
            _from_session(pending["rows"]),
            gpu,
            pending["engine_family"],
            source=_source(pending["names"]),
            owner=request.user,
        )
    except (CalibrationRefused, ValueError) as exc:
        messages.error(request, f"Not saved: {exc}")
        return redirect("planner:calibration")
    names = ", ".join(p.name for p in saved)
    messages.success(request, f"Fitted {len(saved)} profile(s) for your fleet: {names}")
    return redirect("planner:calibration")
