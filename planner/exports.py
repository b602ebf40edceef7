"""CSV and XLSX exports of a run's results: stable snake_case columns whose names carry units."""

from __future__ import annotations

import csv
import io

from openpyxl import Workbook
from openpyxl.utils import get_column_letter

from planner.models import CandidateResult, SizingRun

COLUMNS: list[tuple[str, str]] = [  # header, attribute
    ("rank", "rank"),
    ("recommended", "recommended"),
    ("model", "model_name"),
    ("gpu", "gpu_name"),
    ("gpu_slug", "gpu_slug"),
    ("weight_precision", "precision"),
    ("kv_precision", "kv_precision"),
    ("tp", "tp"),
    ("pp", "pp"),
    ("ep", "ep"),
    ("gpus_per_replica", "gpus_per_replica"),
    ("fits", "fits"),
    ("reason", "reason"),
    ("batch_sequences", "batch"),
    ("ttft_ms", "ttft_ms"),
    ("tpot_ms", "tpot_ms"),
    ("latency_statistic", "latency_statistic"),
    ("latency_source", "latency_source"),
    ("ttft_ms_p50", "ttft_ms_p50"),
    ("ttft_ms_p95", "ttft_ms_p95"),
    ("ttft_ms_p99", "ttft_ms_p99"),
    ("tpot_ms_p50", "tpot_ms_p50"),
    ("tpot_ms_p95", "tpot_ms_p95"),
    ("tpot_ms_p99", "tpot_ms_p99"),
    ("output_tok_s_per_replica", "throughput_tok_s"),
    ("replicas", "replicas"),
    ("gpus_total", "gpus"),
    ("usd_per_hour", "usd_per_hour"),
    ("usd_per_month", "usd_per_month"),
    ("usd_per_mtok_output", "usd_per_mtok"),
    ("output_tokens_per_usd", "tokens_per_usd"),
    ("headroom_fraction", "headroom"),
    ("binding_constraint", "binding_constraint"),
    ("meets_slo", "meets_slo"),
    ("evaluated", "evaluated"),
    ("profile", "profile"),
    ("band_replicas_low", "band.replicas.0"),
    ("band_replicas_high", "band.replicas.1"),
    ("band_usd_per_month_low", "band.usd_per_month.0"),
    ("band_usd_per_month_high", "band.usd_per_month.1"),
]
HEADERS = [header for header, _ in COLUMNS]


def result_rows(run: SizingRun):
    for result in run.results.order_by("rank", "candidate_key"):
        yield [_cell(_value(result, attr)) for _, attr in COLUMNS]


def _value(result: CandidateResult, attr: str):
    """A column's value; ``band.replicas.0`` reads the band the chain computed (derivation)."""
    if not attr.startswith("band."):
        return getattr(result, attr)
    _, field, index = attr.split(".")
    values = ((result.derivation or {}).get("band") or {}).get(field)
    return values[int(index)] if values else None


def _cell(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def run_csv(run: SizingRun) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADERS)
    writer.writerows(result_rows(run))
    return buffer.getvalue()


def run_xlsx(run: SizingRun) -> bytes:
    book = Workbook()
    sheet = book.active
    sheet.title = "results"
    sheet.append(HEADERS)
    for row in result_rows(run):
        sheet.append(row)
    for index, header in enumerate(HEADERS, start=1):
        sheet.column_dimensions[get_column_letter(index)].width = max(10, len(header) + 2)
    sheet.freeze_panes = "A2"
    about = book.create_sheet("run")
    inputs = run.inputs
    sheet_info = inputs.get("price_sheet") or {}
    for key, value in [
        ("scenario", inputs.get("scenario", {}).get("name", "")),
        ("run_id", run.pk),
        ("status", run.status),
        ("finished_at", run.finished_at.isoformat() if run.finished_at else ""),
        ("price_sheet", f"{sheet_info.get('name', '')} v{sheet_info.get('version', '')}"),
        ("tier", inputs.get("tier", "")),
        ("candidates", run.candidate_count),
    ]:
        about.append([key, value])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


__all__ = ["COLUMNS", "HEADERS", "run_csv", "run_xlsx", "CandidateResult"]
