"""CSV and XLSX exports of a finished run, for finance.

- Stable snake_case columns whose names carry units (CSV and the XLSX ``results`` sheet share
  them); p50/p95/p99 latencies, the price each row paid and where that price comes from.
- Money rounded to cents, rates and latencies to 4 significant digits: no float noise.
- XLSX: an ``inputs`` sheet (traffic, SLOs, policy, prices with sources), a ``summary`` sheet
  (recommendation per GPU and per model, break-even, hybrid, band), ``results``; currency and
  number formats, real booleans.
- Every user- or catalog-supplied text cell is written as a string with the OWASP guard against
  formula injection (a leading ``= + - @`` tab or CR gets a ``'`` in front).
- Only a finished, successful run exports (``unfinished_reason`` says why not).
- Memory is bounded by a chunk of rows, not by the run: result rows come from a server-side
  cursor (``.iterator``); CSV streams as it is written, XLSX is built in openpyxl's write-only
  mode into a temporary file that is then streamed (``csv_response``, ``xlsx_response``).
"""

from __future__ import annotations

import csv
import io
import math
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from django.db.models.fields.json import KeyTransform
from django.http import FileResponse, StreamingHttpResponse
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.utils import get_column_letter

from planner.models import CandidateResult, SizingRun
from planner.packing import node_fields
from planner.prices import price_rows, result_price_source, row_price_source
from planner.templatetags.headroom import finite_number
from planner.verdicts import run_verdict
from pricing.quotes import label as quote_label

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
USD = '"$"#,##0.00'
USD_RATE = '"$"#,##0.0000'
INT = "#,##0"
RATE = "#,##0.####"
FRACTION = "0.0%"
XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# rows fetched per round trip from the server-side cursor: a row's derivation JSON is tens
# of KB once parsed, so 100 rows hold a few MB (500 held about 17 MB)
RESULT_CHUNK_ROWS = 100
# CSV text handed to the server at a time: large enough to keep writes few, small enough
# that a download of any size holds only this much (64 KB held more than 100 result rows
# once the pool columns widened each row)
CSV_CHUNK_CHARS = 16 * 1024


def safe_text(value) -> str:
    """OWASP CSV-injection guard: text a spreadsheet would run as a formula gets a ``'``."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def cents(value) -> float | None:
    number = finite_number(value)
    return None if number is None else round(number, 2)


def sig(value, digits: int = 4) -> float | None:
    """``digits`` significant digits (12345.678 -> 12350.0, 0.0123456 -> 0.01235)."""
    number = finite_number(value)
    if number is None or number == 0:
        return number
    return round(number, digits - 1 - int(math.floor(math.log10(abs(number)))))


def unfinished_reason(run: SizingRun) -> str | None:
    """Why the run cannot be exported as if done (None: it can)."""
    if run.status == SizingRun.Status.SUCCEEDED:
        return None
    if run.status == SizingRun.Status.FAILED:
        return f"run {run.pk} failed, there are no results to export: {run.error}"[:600]
    return f"run {run.pk} is {run.status} ({run.progress}% done): export it once it has finished"


# --------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Column:
    header: str
    get: Callable[[CandidateResult, dict], object]
    kind: str = "text"  # text, int, money, price, rate, fraction, bool


def _attr(name: str):
    return lambda r, _inputs: getattr(r, name)


def _pipeline(name: str):
    """A value the pipeline may carry as a column or inside the derivation (read either)."""

    def get(result, _inputs):
        value = getattr(result, name, None)
        if value in (None, ""):
            value = (result.derivation or {}).get(name)
        if value in (None, "") and name == "profile":
            value = ((result.derivation or {}).get("band") or {}).get("profile")
        return value

    return get


def _band(field: str, index: int):
    """One end of the error band the chain computed on the final sizing (derivation)."""

    def get(result, _inputs):
        values = ((result.derivation or {}).get("band") or {}).get(field)
        return values[index] if values else None

    return get


def _quote(result, inputs) -> dict | None:
    if result.usd_per_hour is None:
        return None
    return result_price_source(inputs, result)


def _packed(result, inputs) -> dict:
    """Nodes of a row from planner.packing when the pipeline has not stored them yet."""
    if result.gpu_slug not in (inputs.get("gpus") or {}):
        return {}
    values = {
        "fits": result.fits,
        "gpu_slug": result.gpu_slug,
        "gpus_per_replica": result.gpus_per_replica,
        "replicas": result.replicas,
        "derivation": result.derivation or {},
    }
    return node_fields(inputs, values)


def _nodes(result, inputs):
    value = _pipeline("nodes")(result, inputs)
    return value if value is not None else _packed(result, inputs).get("nodes")


def _gpus_per_node(result, inputs):
    from planner import snapshot as snap

    value = _pipeline("gpus_per_node")(result, inputs)
    if value is None and result.gpu_slug in (inputs.get("gpus") or {}):
        value = snap.gpus_per_node(inputs, result.gpu_slug, result.tp * result.pp)
    return value


#: The fleet-over-time fields of a recommendation (planner.lifecycle, in the run summary), as
#: (column, getter over the summary entry, kind); CSV/XLSX results rows of a recommendation
#: and the XLSX summary sheet carry them.
def _life(*path: str):
    def get(entry: dict):
        value = entry
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return get


FLEET_LIFE_COLUMNS = [
    ("cold_start_s", _life("cold_start_s", "total"), "rate"),
    *[
        (f"cold_start_{link}", _life("cold_start_s", "links", link), "rate")
        for link in ("image_pull_s", "weight_load_s", "init_s", "graph_capture_s", "warmup_s")
    ],
    ("weights_source", _life("cold_start_s", "weights_source"), "text"),
    ("warm_pool_replicas", _life("warm_pool_replicas"), "int"),
    ("autoscaling_signal", _life("autoscaling", "signal"), "text"),
    ("scale_up_in_flight_per_replica", _life("autoscaling", "in_flight_target"), "rate"),
    ("scale_down_in_flight_per_replica", _life("autoscaling", "scale_down_in_flight"), "rate"),
    ("scale_up_cooldown_s", _life("autoscaling", "scale_up_cooldown_s"), "rate"),
    ("scale_down_cooldown_s", _life("autoscaling", "scale_down_cooldown_s"), "rate"),
    ("min_replicas", _life("autoscaling", "min_replicas"), "int"),
    ("max_replicas", _life("autoscaling", "max_replicas"), "int"),
    ("burst_slo_share", _life("autoscaling", "burst", "slo_share"), "fraction"),
    (
        "burst_simulated_slo_share",
        _life("autoscaling", "burst", "simulated", "slo_share"),
        "fraction",
    ),
    ("autoscaled_usd_per_month", _life("autoscaled_usd_per_month"), "money"),
    ("autoscaled_saving_usd_per_month", _life("autoscaled_saving_usd_per_month"), "money"),
    ("owned_usd_per_gpu_hour", _life("tco", "owned_usd_per_gpu_hour"), "price"),
    ("breakeven_utilization", _life("tco", "breakeven_utilization"), "fraction"),
    ("owned_usd_per_month", _life("tco", "owned_usd_per_month"), "money"),
    ("rented_usd_per_month", _life("tco", "rented_usd_per_month"), "money"),
    ("months_to_breakeven", _life("tco", "months_to_breakeven"), "rate"),
]
FLEET_LIFE_KEY = "_fleet_life_by_candidate"  # added to the inputs while rows are written


def _fleet_life_column(get):
    def column(result, inputs):
        entry = (inputs.get(FLEET_LIFE_KEY) or {}).get(result.candidate_key)
        return get(entry) if entry else None

    return column


COLUMN_SPECS: list[Column] = [
    Column("rank", _attr("rank"), "int"),
    Column("recommended", _attr("recommended"), "bool"),
    Column("model", _attr("model_name")),
    Column("gpu", _attr("gpu_name")),
    Column("gpu_slug", _attr("gpu_slug")),
    Column("weight_precision", _attr("precision")),
    Column("kv_precision", _attr("kv_precision")),
    Column("expert_precision", _attr("expert_precision")),
    Column("tp", _attr("tp"), "int"),
    Column("pp", _attr("pp"), "int"),
    Column("ep", _attr("ep"), "int"),
    Column("gpus_per_replica", _attr("gpus_per_replica"), "int"),
    # disaggregated rows (mode disagg): each pool's workers and layout, and the KV transfer
    Column("mode", _attr("mode")),
    *[
        Column(f"{pool}_{name}", _attr(f"{pool}_{name}"), "int")
        for pool in ("prefill", "decode")
        for name in ("workers", "tp", "pp", "ep", "dp", "gpus")
    ],
    Column("kv_transfer_ms", _attr("kv_transfer_ms"), "rate"),
    Column("fits", _attr("fits"), "bool"),
    Column("reason", _attr("reason")),
    Column("batch_sequences", _attr("batch"), "int"),
    Column("ttft_ms", _attr("ttft_ms"), "rate"),
    Column("tpot_ms", _attr("tpot_ms"), "rate"),
    *[
        Column(f"{metric}_ms_p{p}", _attr(f"{metric}_ms_p{p}"), "rate")
        for metric in ("ttft", "tpot")
        for p in (50, 95, 99)
    ],
    Column("latency_statistic", _attr("latency_statistic")),
    Column("latency_source", _pipeline("latency_source")),
    Column("profile", _pipeline("profile")),
    Column("evaluated", _attr("evaluated"), "bool"),
    *[
        Column(f"band_{field}_{side}", _band(field, index), kind)
        for field, kind in (("replicas", "int"), ("usd_per_month", "money"))
        for side, index in (("low", 0), ("high", 1))
    ],
    Column("output_tok_s_per_replica", _attr("throughput_tok_s"), "rate"),
    Column("replicas", _attr("replicas"), "int"),
    Column("gpus_total", _attr("gpus"), "int"),
    Column("nodes", _nodes, "int"),
    Column("gpus_per_node", _gpus_per_node, "int"),
    Column(
        "usd_per_gpu_hour",
        lambda r, i: (_quote(r, i) or {}).get("usd_per_gpu_hour"),
        "price",
    ),
    Column("usd_per_hour", _attr("usd_per_hour"), "money"),
    Column("usd_per_month", _attr("usd_per_month"), "money"),
    Column("usd_per_mtok_output", _attr("usd_per_mtok"), "price"),
    Column("output_tokens_per_usd", _attr("tokens_per_usd"), "rate"),
    Column("headroom_fraction", _attr("headroom"), "fraction"),
    Column("binding_constraint", _attr("binding_constraint")),
    Column("meets_slo", _attr("meets_slo"), "bool"),
    Column("price_source", lambda r, i: quote_label(_quote(r, i)) if _quote(r, i) else ""),
    Column("price_as_of", lambda r, i: (_quote(r, i) or {}).get("as_of", "")),
    # a recommendation's fleet over time and buy vs rent; blank on the other rows
    *[Column(name, _fleet_life_column(get), kind) for name, get, kind in FLEET_LIFE_COLUMNS],
]
COLUMNS = [(c.header, c.kind) for c in COLUMN_SPECS]
HEADERS = [c.header for c in COLUMN_SPECS]
FORMATS = {"int": INT, "money": USD, "price": USD_RATE, "rate": RATE, "fraction": FRACTION}


def clean_value(value, kind: str):
    """The value a cell holds: rounded numbers, real booleans, guarded text, None for blank."""
    if kind == "bool":
        return None if value is None else bool(value)
    if kind == "text":
        return str(value) if value not in (None, "") else None
    if kind == "int":
        number = finite_number(value)
        return None if number is None else int(round(number))
    if kind == "money":
        return cents(value)
    if kind == "fraction":
        return sig(value, 3)
    return sig(value, 4)


def result_rows(run: SizingRun, chunk_rows: int = RESULT_CHUNK_ROWS) -> Iterator[list]:
    """Rows of clean cell values, best rank first (text unguarded: the writers guard it).

    Read through ``.iterator``: a server-side cursor on PostgreSQL, so a run of any size
    holds ``chunk_rows`` results in memory at a time, never the whole queryset."""
    by_key = {
        e["recommended"]: e
        for e in (run.summary or {}).get("per_gpu") or []
        if e.get("recommended") and e.get("cold_start_s")
    }
    inputs = (run.inputs or {}) | {FLEET_LIFE_KEY: by_key}
    # only the derivation keys the columns read: a whole derivation is tens of KB parsed (a
    # disaggregated row's twice that), and the chunk's memory must not grow with it
    keys = {f"_d_{k}": KeyTransform(k, "derivation") for k in DERIVATION_KEYS}
    results = (
        run.results.order_by("rank", "candidate_key")
        .defer("derivation")
        .annotate(**keys)
        .iterator(chunk_size=chunk_rows)
    )
    for result in results:
        result.derivation = {k: getattr(result, f"_d_{k}") for k in DERIVATION_KEYS}
        yield [clean_value(c.get(result, inputs), c.kind) for c in COLUMN_SPECS]


#: What the columns read from a row's derivation (``_pipeline``, ``_band``, ``_packed``).
DERIVATION_KEYS = (
    "band",
    "nodes",
    "gpus_per_node",
    "latency_source",
    "profile",
    "serving_replicas",
    "pools",
)


def _csv_cell(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return safe_text(value)
    return "" if value is None else value


def csv_chunks(run: SizingRun, chunk_chars: int = CSV_CHUNK_CHARS) -> Iterator[str]:
    """The CSV as pieces of about ``chunk_chars`` characters, header first, rows as read."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADERS)
    for row in result_rows(run):
        writer.writerow([_csv_cell(v) for v in row])
        if buffer.tell() >= chunk_chars:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def run_csv(run: SizingRun) -> str:
    """The whole CSV as one string (small runs and tests; responses stream ``csv_chunks``)."""
    return "".join(csv_chunks(run))


def _attachment(run: SizingRun, extension: str) -> str:
    return f'attachment; filename="headroom-run-{run.pk}.{extension}"'


def csv_response(run: SizingRun) -> StreamingHttpResponse:
    """The CSV download, streamed: rows are read and written while the client receives."""
    response = StreamingHttpResponse(csv_chunks(run), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = _attachment(run, "csv")
    return response


# --------------------------------------------------------------------------- XLSX


def _cell(sheet, value, fmt: str | None = None) -> WriteOnlyCell | None:
    """A cell: text as a guarded string (never a formula), numbers with their format."""
    if value is None:
        return None  # write-only mode leaves the cell out: blank, as before
    cell = WriteOnlyCell(sheet)
    if isinstance(value, str):
        cell.value = safe_text(value)
        cell.data_type = "s"
        return cell
    cell.value = value
    if fmt and isinstance(value, int | float) and not isinstance(value, bool):
        cell.number_format = fmt
    return cell


def _append(sheet, values: list, formats: list[str | None] | None = None) -> None:
    """Append a row of values, formats by position (missing: none)."""
    formats = formats or []
    sheet.append(
        [
            _cell(sheet, value, formats[index] if index < len(formats) else None)
            for index, value in enumerate(values)
        ]
    )


Row = tuple[list, list[str | None] | None]


def _widths(rows: list[Row], minimum: int = 10, maximum: int = 60) -> list[int]:
    """Column widths from the longest text each column will show (guards included)."""
    longest: dict[int, int] = {}
    for values, _ in rows:
        for index, value in enumerate(values):
            if value is not None:
                shown = safe_text(value) if isinstance(value, str) else str(value)
                longest[index] = max(longest.get(index, 0), len(shown))
    columns = max(longest, default=-1) + 1
    return [min(max(minimum, longest.get(i, 0) + 2), maximum) for i in range(columns)]


def _set_widths(sheet, widths: list[int]) -> None:
    """Write-only sheets take column widths before their first row, never after."""
    for index, width in enumerate(widths, start=1):
        sheet.column_dimensions[get_column_letter(index)].width = width


def _write_small_sheet(sheet, rows: list[Row], freeze: str | None = None) -> None:
    """A sheet of a few dozen rows (inputs, summary): rows first, so widths fit the text."""
    _set_widths(sheet, _widths(rows))
    if freeze:
        sheet.freeze_panes = freeze
    for values, formats in rows:
        _append(sheet, values, formats)


def _results_sheet(book: Workbook, run: SizingRun) -> None:
    """One row at a time from the cursor into the sheet's own temporary file."""
    sheet = book.create_sheet("results")
    _set_widths(sheet, [max(10, len(header) + 2) for header in HEADERS])
    sheet.freeze_panes = "A2"
    _append(sheet, HEADERS)
    formats = [FORMATS.get(kind) for _, kind in COLUMNS]
    for row in result_rows(run):
        _append(sheet, row, formats)


def _inputs_sheet(book: Workbook, run: SizingRun) -> None:
    inputs = run.inputs or {}
    sheet_info = inputs.get("price_sheet") or {}
    traffic, slo, policy = (inputs.get(k) or {} for k in ("traffic", "slo", "policy"))
    pricing = inputs.get("pricing") or {}
    api = inputs.get("api_price") or {}
    rows: list[tuple[str, object, str | None]] = [
        ("scenario", (inputs.get("scenario") or {}).get("name", ""), None),
        ("run_id", run.pk, INT),
        ("status", run.status, None),
        ("finished_at", run.finished_at.isoformat() if run.finished_at else "", None),
        ("candidates", run.candidate_count, INT),
        ("peak_rps (requests/s)", traffic.get("peak_rps"), RATE),
        ("mean_rps (requests/s)", traffic.get("mean_rps"), RATE),
        ("prompt_tokens_mean (tokens)", traffic.get("prompt_tokens_mean"), RATE),
        ("prompt_tokens_p95 (tokens)", traffic.get("prompt_tokens_p95"), RATE),
        ("output_tokens_mean (tokens)", traffic.get("output_tokens_mean"), RATE),
        ("output_tokens_p95 (tokens)", traffic.get("output_tokens_p95"), RATE),
        ("hourly_rps (requests/s x 24)", _hourly(traffic), None),
        ("ttft_ms (SLO)", slo.get("ttft_ms"), RATE),
        ("tpot_ms (SLO)", slo.get("tpot_ms"), RATE),
        ("slo_percentile", slo.get("percentile"), RATE),
        ("goodput_target (fraction)", slo.get("goodput_target"), FRACTION),
        ("target_utilization (fraction)", policy.get("target_utilization"), FRACTION),
        ("spare_replicas (N+k replicas)", policy.get("spare_replicas"), INT),
        ("spare_nodes (N+k nodes)", policy.get("spare_nodes", 0), INT),
        ("burst_factor (x peak)", policy.get("burst_factor"), RATE),
        ("warm_pool_replicas", policy.get("warm_pool_replicas"), INT),
        ("tier", inputs.get("tier", ""), None),
        ("price_sheet", f"{sheet_info.get('name', '')} v{sheet_info.get('version', '')}", None),
        ("price_provider", pricing.get("provider", "cheapest"), None),
        ("reserved_discount (fraction)", pricing.get("reserved_discount"), FRACTION),
        ("api_alternative", api.get("label", ""), None),
        ("api_input_usd_per_mtok", api.get("input_usd_per_mtok"), USD_RATE),
        ("api_output_usd_per_mtok", api.get("output_usd_per_mtok"), USD_RATE),
        *(
            (f"{block}.{key} (given)", value, None)
            for block, given in (inputs.get("fleet_life") or {}).items()
            for key, value in (given or {}).items()
        ),
    ]
    lines: list[Row] = [([name, _number_or_text(value)], [None, fmt]) for name, value, fmt in rows]
    for model, price in (inputs.get("api_prices_by_model") or {}).items():
        keys = ("label", "input_usd_per_mtok", "output_usd_per_mtok")
        values = [price.get(k) for k in keys] if price else ["none on the sheet"]
        lines.append(([f"api_price {model}", *values], [None, None, USD_RATE, USD_RATE]))
    lines += [(["price_note", note], None) for note in inputs.get("price_notes") or []]
    lines.append(([], None))
    price_headers = [
        "gpu",
        "replica_gpus",
        "usd_per_gpu_hour",
        "provider",
        "instance",
        "gpus_per_instance",
        "region",
        "tier",
        "as_of",
        "sheet",
        "note",
        "source",
    ]
    lines += [(["prices"], None), (price_headers, None)]
    for price in price_rows(inputs):
        quote = price["quote"] or {}
        lines.append(
            (
                [
                    price["gpu"],
                    price["replica_gpus"],
                    sig(quote.get("usd_per_gpu_hour"), 6),
                    *(quote.get(k) for k in ("provider", "instance", "gpus_per_instance")),
                    *(quote.get(k, "") for k in ("region", "tier", "as_of", "sheet")),
                    quote.get("note", "") if quote else "no price",
                    quote.get("source", ""),
                ],
                [None, INT, USD_RATE, None, None, INT],
            )
        )
    _write_small_sheet(book.create_sheet("inputs"), lines)


def _hourly(traffic: dict) -> str:
    return ", ".join(f"{v:g}" for v in traffic.get("hourly_rps") or [])


def _number_or_text(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return sig(value, 6) if isinstance(value, float) else value
    return str(value)


SUMMARY_HEADERS = [
    "scope",
    "name",
    "recommended",
    "model",
    "gpu",
    "precision",
    "tp",
    "replicas",
    "replicas_low",
    "replicas_high",
    "gpus",
    "nodes",
    "usd_per_month",
    "usd_per_month_low",
    "usd_per_month_high",
    "usd_per_mtok_output",
    "ttft_ms",
    "tpot_ms",
    "api_usd_per_month",
    "breakeven_tokens_per_month",
    "hybrid_selfhost_replicas",
    "hybrid_api_token_share",
    "hybrid_usd_per_month",
    *(name for name, _, _ in FLEET_LIFE_COLUMNS),
    "price_source",
    "why_none",
    "api_alternative",
    "api_verdict",
    "hybrid_plan",
]
SUMMARY_FORMATS = [None] * 6 + [INT] * 6 + [USD] * 3 + [USD_RATE, RATE, RATE, USD, INT, INT]
SUMMARY_FORMATS += [FRACTION, USD] + [FORMATS.get(kind) for _, _, kind in FLEET_LIFE_COLUMNS]
BEST_FOR_MODEL = " (best for the model)"


def _pair(value, index: int):
    if isinstance(value, list | tuple) and len(value) == 2:
        return value[index]
    return None


def summary_row(scope: str, name: str, entry: dict, inputs: dict) -> list:
    """One summary line from a per-GPU or per-model entry (fields read defensively)."""
    breakeven = entry.get("breakeven") or {}
    hybrid = breakeven.get("hybrid") or entry.get("hybrid") or {}
    band = entry.get("band") or {}
    recommended = bool(entry.get("recommended"))
    source = entry.get("price_source")
    if source is None and recommended and entry.get("gpu"):
        replica = (entry.get("gpus") or 0) // max(entry.get("replicas") or 1, 1)
        source = row_price_source(inputs, entry["gpu"], replica or 1)
    return [
        scope,
        name,
        recommended,
        entry.get("model") if recommended else None,
        entry.get("gpu_name") or entry.get("gpu"),
        entry.get("precision") if recommended else None,
        clean_value(entry.get("tp"), "int"),
        clean_value(entry.get("replicas"), "int"),
        clean_value(_pair(band.get("replicas"), 0), "int"),
        clean_value(_pair(band.get("replicas"), 1), "int"),
        clean_value(entry.get("gpus"), "int"),
        clean_value(entry.get("nodes"), "int"),
        cents(entry.get("usd_per_month")),
        cents(_pair(band.get("usd_per_month"), 0)),
        cents(_pair(band.get("usd_per_month"), 1)),
        sig(entry.get("usd_per_mtok")),
        sig(entry.get("ttft_ms")),
        sig(entry.get("tpot_ms")),
        cents(breakeven.get("api_usd_per_month")),
        sig(breakeven.get("crossing_tokens_per_month")),
        clean_value(hybrid.get("selfhost_replicas"), "int"),
        sig(hybrid.get("api_token_share"), 3),
        cents(hybrid.get("usd_per_month")),
        *(clean_value(get(entry), kind) for _, get, kind in FLEET_LIFE_COLUMNS),
        quote_label(source) if source else "",
        entry.get("why_none") or "",
        (entry.get("api_alternative") or {}).get("text") or "",
        entry.get("api_verdict") or "",
        (entry.get("hybrid") or {}).get("text") or "",
    ]


def _per_model(summary: dict) -> list[tuple[str, dict]]:
    """``summary.per_model`` as (model, entry) pairs, whether a list or a dict of entries."""
    per_model = summary.get("per_model") or []
    if isinstance(per_model, dict):
        return [(str(k), v) for k, v in per_model.items() if isinstance(v, dict)]
    return [
        (str(e.get("model_name") or e.get("model") or ""), e)
        for e in per_model
        if isinstance(e, dict)
    ]


def _model_lines(model: str, entry: dict) -> list[tuple[str, str, dict]]:
    """(scope, name, cell) per cell of a model's grid row, its cheapest cell named so."""
    cells = entry.get("per_gpu")
    if not isinstance(cells, list):  # an entry that is itself one recommendation
        return [("per model", model, entry)]
    best = (entry.get("best") or {}).get("recommended")
    lines = []
    for cell in (c for c in cells if isinstance(c, dict)):
        name = f"{model} on {cell.get('gpu_name') or cell.get('gpu')}"
        if best and cell.get("recommended") == best:
            name += BEST_FOR_MODEL
        lines.append(("per model", name, cell))
    return lines


def _summary_sheet(book: Workbook, run: SizingRun) -> None:
    summary, inputs = run.summary or {}, run.inputs or {}
    lines: list[Row] = [(SUMMARY_HEADERS, None)]
    best = summary.get("best")
    for entry in summary.get("per_gpu") or []:
        scope = "best overall" if best and entry.get("recommended") == best else "per GPU"
        entry = entry | _recommended_fields(run, entry)
        row = summary_row(scope, entry.get("gpu_name", ""), entry, inputs)
        lines.append((row, SUMMARY_FORMATS))
    for model, entry in _per_model(summary):
        for scope, name, cell in _model_lines(model, entry):
            lines.append((summary_row(scope, name, cell, inputs), SUMMARY_FORMATS))
    verdict = run_verdict(run)
    if verdict["nothing"]:
        lines.append((["nothing fits", verdict["nothing"]], None))
    lines += [(["warning", warning], None) for warning in verdict["warnings"]]
    _write_small_sheet(book.create_sheet("summary", 0), lines, freeze="A2")


def _recommended_fields(run: SizingRun, entry: dict) -> dict:
    """Fill band and node numbers from the recommended result when the summary lacks them."""
    key = entry.get("recommended")
    if not isinstance(key, str) or (entry.get("band") and entry.get("nodes")):
        return {}
    result = run.results.filter(candidate_key=key).first()
    if result is None:
        return {}
    derivation = result.derivation or {}
    out = {}
    if not entry.get("band") and derivation.get("band"):
        out["band"] = derivation["band"]
    if not entry.get("nodes"):
        out["nodes"] = _nodes(result, run.inputs or {})
    return out


def xlsx_file(run: SizingRun):
    """The workbook in an anonymous temporary file, positioned at its start (the caller
    closes it, which deletes it). Write-only mode streams each sheet's rows to disk as they
    are appended, so building it holds a row at a time, not the run."""
    book = Workbook(write_only=True)
    _results_sheet(book, run)
    _summary_sheet(book, run)
    _inputs_sheet(book, run)
    file = tempfile.TemporaryFile(suffix=".xlsx")  # noqa: SIM115 (outlives us: the caller closes)
    try:
        book.save(file)
    except BaseException:
        file.close()
        raise
    file.seek(0)
    return file


def run_xlsx(run: SizingRun) -> bytes:
    """The whole workbook as bytes (small runs and tests; responses stream ``xlsx_file``)."""
    with xlsx_file(run) as file:
        return file.read()


def xlsx_response(run: SizingRun) -> FileResponse:
    """The XLSX download, streamed from the temporary file, which closing the response
    deletes."""
    response = FileResponse(xlsx_file(run), content_type=XLSX_TYPE)
    response["Content-Disposition"] = _attachment(run, "xlsx")
    return response


__all__ = [
    "COLUMNS",
    "HEADERS",
    "XLSX_TYPE",
    "csv_chunks",
    "csv_response",
    "run_csv",
    "run_xlsx",
    "safe_text",
    "unfinished_reason",
    "xlsx_file",
    "xlsx_response",
]
