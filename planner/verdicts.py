"""Plausibility warnings and the "nothing fits" reason for a finished run (sizing.plausibility).

``run_verdict(run)`` is what the run page and the exports show above the results; the pipeline
can call ``sizing.plausibility`` directly on its rows when it builds the summary.
"""

from __future__ import annotations

from sizing.plausibility import nothing_fits, plausibility_warnings

ROW_FIELDS = (
    "fits",
    "meets_slo",
    "reason",
    "binding_constraint",
    "gpus_per_replica",
    "model_name",
    "gpu_name",
    "precision",
    "tp",
    "pp",
    "ttft_ms",
    "tpot_ms",
)


def _best(summary: dict) -> dict:
    best = summary.get("best")
    entries = [e for e in summary.get("per_gpu") or [] if e.get("recommended")]
    for entry in entries:
        if best and entry.get("recommended") == best:
            return entry
    return min(entries, key=lambda e: e.get("usd_per_month") or float("inf"), default={})


def run_verdict(run) -> dict:
    """{"warnings": [text], "nothing": text or None} for a succeeded run (empty otherwise)."""
    if run is None or run.status != "succeeded":
        return {"warnings": [], "nothing": None}
    summary, inputs = run.summary or {}, run.inputs or {}
    traffic = inputs.get("traffic") or {}
    nothing = None
    if not summary.get("meeting_slo"):
        nothing = nothing_fits(run.results.values(*ROW_FIELDS), inputs.get("slo") or {})
    best = _best(summary)
    tokens = (traffic.get("prompt_tokens_mean") or 0) + (traffic.get("output_tokens_mean") or 0)
    warnings = plausibility_warnings(
        peak_rps=traffic.get("peak_rps"),
        mean_rps=traffic.get("mean_rps"),
        tokens_per_request=tokens or None,
        usd_per_month=best.get("usd_per_month"),
        gpus=best.get("gpus"),
        usd_per_mtok=best.get("usd_per_mtok"),
        api_usd_per_mtok=(best.get("breakeven") or {}).get("api_usd_per_mtok"),
    )
    return {"warnings": warnings, "nothing": nothing}
