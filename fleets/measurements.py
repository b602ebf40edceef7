"""Measured inference results: read, normalise, filter and validate rows for calibration.

Pure Python (no Django, no numpy) so management commands, admin uploads, scripts and tests
share one reading of the data. The performance model lives elsewhere (sizing/); this
module only turns published or uploaded measurements into comparable :class:`Measurement` rows.

Row format
----------
One metric per row, in the columns of ``fleets/catalog/measured.csv`` (see ``COLUMNS``). The
shipped copies add ``row_id`` and ``exclude_reason`` (the fate of each row in a plain fit, or the
reason it could not be read); both are informational and ignored on input.

Metric mapping
--------------
The model predicts six normalised metrics (``PREDICTED_METRICS``). Every raw metric name is
mapped to one normalised metric; a raw name not in this table is refused.

=====================  =======================  ==========  =================================
raw ``metric``         normalised ``metric``    statistic   conversion / flags
=====================  =======================  ==========  =================================
output_tok_s_per_gpu   output_tok_s_per_gpu     as reported per GPU as published
total_output_tok_s     output_tok_s_per_gpu     as reported value / num_gpus;
                                                            ``converted_from_total``
tok_s_per_user         tok_s_per_user           as reported ``derived_from_tpot`` for InferenceX
ttft_ms_median         ttft_ms                  median
ttft_ms_mean           ttft_ms                  mean        ``mean_not_median``
ttft_ms_p99            ttft_ms_p99              p99
tpot_ms_median         tpot_ms                  median
tpot_ms_mean           tpot_ms                  mean        ``mean_not_median``
itl_ms_median          tpot_ms                  median      ``itl_as_tpot``
itl_ms_mean            tpot_ms                  mean        ``itl_as_tpot``, ``mean_not_median``
tpot_ms_reported       tpot_ms                  unstated    ``statistic_unstated``
tpot_ms_p99            tpot_ms_p99              p99
itl_ms_p99             tpot_ms_p99              p99         ``itl_as_tpot``
total_tok_s_per_gpu    total_tok_s_per_gpu      as reported not predicted (input+output tokens)
total_input_tok_s      input_tok_s_per_gpu      as reported value / num_gpus; not predicted
e2e_ms_median          e2e_ms                   median      not predicted
e2e_ms_mean            e2e_ms                   mean        not predicted
=====================  =======================  ==========  =================================

Units (``METRIC_UNITS``): throughputs are tokens per second, latencies milliseconds.
``output_tok_s_per_gpu`` divides the serving instance's output tokens/s by its ``num_gpus``
(for disaggregated InferenceX rows the source divided by *decode* GPUs only, flagged
``per_decode_gpu``). ``tpot_ms`` is the time per output token after the first (vLLM's TPOT;
ITL is accepted as a stand-in). ``tok_s_per_user`` is output tokens/s seen by one request.
``raw_value`` always keeps the number as published.

Conditions
----------
``concurrency`` is the closed-loop client count (or static batch size); ``request_rate`` the
open-loop arrival rate in requests/s; neither for offline max-throughput runs (all requests
queued at once), which carry the ``offline`` flag. Precisions are normalised to bf16, fp16, fp8,
int8, int4 or fp4 ('' when unknown); a blank KV precision follows the weights (fp8 for fp8/fp4
weights, else the weight precision) and is flagged ``kv_precision_assumed``.
"""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple, overload

from fleets.names import normalize_name

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
MEASURED_CSV = CATALOG_DIR / "measured.csv"
MEASURED_CONCURRENCY_CSV = CATALOG_DIR / "measured-concurrency.csv"
SHIPPED_FILES = (MEASURED_CSV, MEASURED_CONCURRENCY_CSV)
#: InferenceX's launch configurations of the disaggregated runs (one row per search-space
#: entry: pools, concurrencies and the recipe whose name carries the decode batch)
DISAGG_RECIPES_CSV = CATALOG_DIR / "disagg-recipes.csv"
#: The SGLang prefill workers' token budgets, read from the recipe files those launch
#: configurations name (NVIDIA srt-slurm and its forks; repository and commit per row)
SGLANG_PREFILL_RECIPES_CSV = CATALOG_DIR / "sglang-prefill-recipes.csv"
#: SGLang's ``--max-prefill-tokens`` when a recipe leaves it unset (``ServerArgs`` default)
SGLANG_DEFAULT_MAX_PREFILL_TOKENS = 16384
AGG_RECIPES_CSV = CATALOG_DIR / "agg-recipes.csv"

COLUMNS = (
    "source",
    "source_date_or_version",
    "model",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "engine",
    "weight_precision",
    "kv_precision",
    "isl",
    "osl",
    "concurrency_or_rate",
    "metric",
    "value",
    "notes",
)
EXTRA_COLUMNS = ("row_id", "exclude_reason")
# An upload may leave out descriptive columns, never the conditions or the number itself.
REQUIRED_COLUMNS = ("model", "gpu", "isl", "osl", "concurrency_or_rate", "metric", "value")

PREDICTED_METRICS = (
    "output_tok_s_per_gpu",
    "ttft_ms",
    "tpot_ms",
    "ttft_ms_p99",
    "tpot_ms_p99",
    "tok_s_per_user",
)
METRIC_UNITS = {
    "output_tok_s_per_gpu": "output tokens/s per GPU of the serving instance",
    "ttft_ms": "ms from request sent to first token",
    "tpot_ms": "ms per output token after the first",
    "ttft_ms_p99": "ms, 99th percentile TTFT",
    "tpot_ms_p99": "ms, 99th percentile TPOT",
    "tok_s_per_user": "output tokens/s seen by one request",
    "total_tok_s_per_gpu": "input+output tokens/s per GPU",
    "input_tok_s_per_gpu": "input (prefill) tokens/s per GPU",
    "e2e_ms": "ms, request end-to-end latency",
}
PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "fp4")
ENGINE_FAMILIES = ("vllm", "sglang", "trtllm", "other")

# Names in the shipped files that the catalog deliberately does not hold (yet).
UNCATALOGUED_GPUS = {
    "Gaudi 3": "Intel accelerator; the catalog holds NVIDIA and AMD GPUs only",
}
UNCATALOGUED_MODELS = {
    "GPT-J-6B": "2021 GPT-J; no config in the catalog",
    "GLM-4.7": "only GLM-5 is in the catalog",
    "DeepSeek-V4-Pro": "new architecture; no config in the catalog",
}


class MeasurementError(ValueError):
    """A measurement input that cannot be used, naming where and why.

    Parameters
    ----------
    reason : str
        What is wrong, in words.
    line : int or None
        1-based line of the CSV row (None for JSON uploads).
    field : str or None
        Column or JSON field at fault.
    problems : tuple of MeasurementError
        Every problem found when several rows failed (the first one fills line/field).
    """

    def __init__(
        self,
        reason: str,
        *,
        line: int | None = None,
        field: str | None = None,
        problems: tuple[MeasurementError, ...] = (),
    ):
        self.reason, self.line, self.field = reason, line, field
        self.problems = problems or (self,)
        super().__init__(reason if problems else _locate(reason, line, field))


def _locate(reason: str, line: int | None, field: str | None) -> str:
    where = []
    if line is not None:
        where.append(f"line {line}")
    if field:
        where.append(f"field {field!r}")
    return f"{', '.join(where)}: {reason}" if where else reason


@dataclass(frozen=True)
class _MetricSpec:
    metric: str
    statistic: str
    flags: frozenset[str] = frozenset()
    divide_by_gpus: bool = False
    preference: int = 0  # lower wins when one point has several rows for one metric


def _spec(metric, statistic, *flags, divide=False, preference=0) -> _MetricSpec:
    return _MetricSpec(metric, statistic, frozenset(flags), divide, preference)


RAW_METRICS: dict[str, _MetricSpec] = {
    "output_tok_s_per_gpu": _spec("output_tok_s_per_gpu", "as_reported"),
    "total_output_tok_s": _spec(
        "output_tok_s_per_gpu", "as_reported", "converted_from_total", divide=True, preference=1
    ),
    "tok_s_per_user": _spec("tok_s_per_user", "as_reported"),
    "ttft_ms_median": _spec("ttft_ms", "median"),
    "ttft_ms_mean": _spec("ttft_ms", "mean", "mean_not_median", preference=1),
    "ttft_ms_p99": _spec("ttft_ms_p99", "p99"),
    "tpot_ms_median": _spec("tpot_ms", "median"),
    "tpot_ms_mean": _spec("tpot_ms", "mean", "mean_not_median", preference=1),
    "itl_ms_median": _spec("tpot_ms", "median", "itl_as_tpot", preference=2),
    "itl_ms_mean": _spec("tpot_ms", "mean", "itl_as_tpot", "mean_not_median", preference=3),
    "tpot_ms_reported": _spec("tpot_ms", "unstated", "statistic_unstated", preference=4),
    "tpot_ms_p99": _spec("tpot_ms_p99", "p99"),
    "itl_ms_p99": _spec("tpot_ms_p99", "p99", "itl_as_tpot", preference=1),
    "total_tok_s_per_gpu": _spec("total_tok_s_per_gpu", "as_reported"),
    "total_input_tok_s": _spec("input_tok_s_per_gpu", "as_reported", divide=True),
    "e2e_ms_median": _spec("e2e_ms", "median"),
    "e2e_ms_mean": _spec("e2e_ms", "mean", "mean_not_median", preference=1),
}


@dataclass(frozen=True)
class Measurement:
    """One measured number under stated conditions, normalised for comparison.

    Attributes
    ----------
    source, source_version : str
        Where the number was published, as written.
    model, gpu : str
        Names as written (resolve with :func:`catalog_names`).
    num_gpus, tp, pp, ep : int or None
        GPUs of the serving instance and its parallel layout (None when the source is silent;
        for disaggregated rows tp/ep describe the decode worker).
    engine : str
        Serving software as written; ``engine_family`` is one of ``ENGINE_FAMILIES``.
    weight_precision, kv_precision : str
        One of ``PRECISIONS`` or '' when unknown.
    isl, osl : int
        Input and output tokens per request (nominal).
    concurrency : int or None
        Closed-loop clients in flight (or static batch size).
    request_rate : float or None
        Open-loop arrivals in requests/s.
    metric : str
        Normalised metric (see module docstring); ``value`` is in its unit.
    raw_metric : str
        Metric name as written; ``raw_value`` the number as published.
    statistic : str
        median, mean, p99, as_reported or unstated.
    line : int
        1-based line in the file read (0 for JSON uploads).
    row_id : str
        Stable id (the file's ``row_id`` column when present).
    flags : frozenset of str
        Caveats: offline, disaggregated, speculative, mean_not_median, itl_as_tpot, ...
    notes : str
        The source's notes, as written.
    """

    source: str
    source_version: str
    model: str
    gpu: str
    num_gpus: int | None
    tp: int | None
    pp: int | None
    ep: int | None
    engine: str
    engine_family: str
    weight_precision: str
    kv_precision: str
    isl: int
    osl: int
    concurrency: int | None
    request_rate: float | None
    metric: str
    value: float
    raw_metric: str
    raw_value: float
    statistic: str
    line: int
    row_id: str
    flags: frozenset[str] = frozenset()
    notes: str = ""
    #: decode steps between the engine's polls for new requests in the run's launch recipe
    #: (``agg-recipes.csv``; 1: every step, every engine's default)
    scheduler_recv_interval: int = 1
    #: the recipe's share of HBM for weights and cache (SGLang ``--mem-fraction-static``;
    #: 0: the engine's default) and its cap on running sequences (``--max-running-requests``;
    #: 0: the engine's default)
    gpu_memory_utilization: float = 0.0
    max_num_seqs: int = 0

    @property
    def offline(self) -> bool:
        return "offline" in self.flags

    @property
    def disaggregated(self) -> bool:
        return "disaggregated" in self.flags

    @property
    def speculative(self) -> bool:
        return "speculative" in self.flags

    @property
    def predicted(self) -> bool:
        """Whether the performance model predicts this metric."""
        return self.metric in PREDICTED_METRICS

    @property
    def condition_key(self) -> tuple:
        """Hashable key of the physical conditions (not the source) for grouping rows."""
        return (
            normalize_name(self.model),
            normalize_name(self.gpu),
            self.num_gpus,
            self.tp,
            self.pp,
            self.ep,
            self.engine_family,
            self.weight_precision,
            self.kv_precision,
            self.isl,
            self.osl,
            self.concurrency,
            self.request_rate,
            self.offline,
            self.disaggregated,
            self.speculative,
        )

    @property
    def source_group(self) -> str:
        """The publication this row belongs to (for hold-one-source-out folds)."""
        return source_group(self.source)

    @property
    def model_family(self) -> str:
        return model_family(self.model)

    @property
    def run_date(self) -> str:
        """ISO date found in ``source_version`` ('' when none), for keeping the newer run."""
        match = _DATE_RE.search(self.source_version)
        return match.group(0) if match else ""


class SkippedRow(NamedTuple):
    """A row the non-strict reader could not use, and why."""

    line: int
    row_id: str
    field: str
    reason: str


class Excluded(NamedTuple):
    """A readable row left out of a plain fit, and why."""

    row: Measurement
    reason: str


# ---------------------------------------------------------------- names and normalisation

_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


def engine_family(engine: str) -> str:
    """vllm, sglang, trtllm or other, from a free-text engine description.

    vLLM is tested first because one vLLM row names a TensorRT-LLM kernel ("trtllm-gen");
    NIM, MLPerf harness and Dynamo+TRT rows all run TensorRT-LLM.
    """
    text = engine.lower()
    if "vllm" in text:
        return "vllm"
    if "sglang" in text:
        return "sglang"
    if re.search(r"tensorrt|trt-?llm|\bnim\b", text):
        return "trtllm"
    return "other"


_PRECISION_TOKENS = (
    ("fp4", "fp4"),
    ("fp8", "fp8"),
    ("int4", "int4"),
    ("w4a16", "int4"),
    ("int8", "int8"),
    ("w8a8", "int8"),
    ("bf16", "bf16"),
    ("bfloat16", "bf16"),
    ("fp16", "fp16"),
    ("float16", "fp16"),
)


def normalize_precision(text: str) -> str | None:
    """One of ``PRECISIONS`` from e.g. "FP4 (NVFP4, ...)"; '' if blank; None if unrecognised.

    Only the leading word is read: the parenthesised checkpoint name may mention another
    precision. "FP16/BF16" maps to bf16 (same bytes per value).
    """
    lead = re.split(r"[\s(,]", text.strip(), maxsplit=1)[0].lower()
    if lead in ("", "auto", "default"):
        return ""
    for token, precision in _PRECISION_TOKENS:
        if token in lead:
            return precision
    return None


def default_kv_precision(weight_precision: str) -> str:
    """KV-cache precision assumed when the source is silent ('' when the weights are unknown).

    fp8/fp4 checkpoints ship an fp8 KV cache in the engines measured here; integer
    weight-only quantisation (int4/int8) keeps a 16-bit cache, as do bf16/fp16 weights.
    """
    if weight_precision in ("fp8", "fp4"):
        return "fp8"
    if weight_precision == "fp16":
        return "fp16"
    return "bf16" if weight_precision else ""


_FAMILIES = (
    (r"^llama-?2", "llama-2"),
    (r"^llama-?3", "llama-3"),
    (r"^llama-?4", "llama-4"),
    (r"^deepseek", "deepseek"),
    (r"^qwen3\.5", "qwen3.5"),
    (r"^qwen3", "qwen3"),
    (r"^qwen2", "qwen2"),
    (r"^mixtral", "mixtral"),
    (r"^mistral", "mistral"),
    (r"^gpt-oss", "gpt-oss"),
    (r"^gpt-j", "gpt-j"),
    (r"^glm", "glm"),
    (r"^kimi", "kimi"),
    (r"^minimax", "minimax"),
    (r"^gemma", "gemma"),
    (r"^phi", "phi"),
)


def model_family(model: str) -> str:
    """Architecture family for hold-one-family-out folds (llama-3, deepseek, qwen3, ...)."""
    key = normalize_name(model)
    for pattern, family in _FAMILIES:
        if re.match(pattern, key):
            return family
    return re.split(r"-\d", key, maxsplit=1)[0] or key


_SOURCE_GROUPS = (
    (re.compile(r"cypress/fixtures/api/benchmarks\.json"), "InferenceX API capture"),
    (re.compile(r"token_position_decode_slo"), "InferenceX experimental H200 sweep"),
    (re.compile(r"glm47_gaudi3"), "InferenceX Gaudi 3 preview"),
    (re.compile(r"inference_results_v4\.1"), "MLPerf Inference v4.1 (NVIDIA)"),
)
_BLOG_RE = re.compile(r"content/blog/([\w.-]+?)\.mdx")


def source_group(source: str) -> str:
    """Collapse per-file source strings into publications (one fold each)."""
    for pattern, group in _SOURCE_GROUPS:
        if pattern.search(source):
            return group
    blog = _BLOG_RE.search(source)
    if blog:
        return f"InferenceX blog {blog.group(1)}"
    return source


# ---------------------------------------------------------------- catalog names


@dataclass(frozen=True)
class CatalogNames:
    """Name -> slug maps read from the catalog CSVs (the keys users may type)."""

    gpus: Mapping[str, str]
    models: Mapping[str, str]

    def gpu_slug(self, name: str) -> str | None:
        return _lookup(self.gpus, name)

    def model_slug(self, name: str) -> str | None:
        return _lookup(self.models, name)


def _lookup(table: Mapping[str, str], name: str) -> str | None:
    for key in (str(name).strip().lower(), normalize_name(name)):
        if key in table:
            return table[key]
    return None


def _add_keys(table: dict[str, str], slug: str, names: Iterable[str]) -> None:
    for name in names:
        if name:
            table.setdefault(str(name).strip().lower(), slug)
            table.setdefault(normalize_name(name), slug)


def catalog_names(catalog_dir: Path = CATALOG_DIR) -> CatalogNames:
    """Read gpus.csv and models.csv into name maps, as ``planner.selectors`` matches names.

    GPUs match on slug, name, slug with spaces and aliases; models on hf_id, slug, name and
    aliases (``|``-separated in the CSVs).
    """
    gpus: dict[str, str] = {}
    with open(catalog_dir / "gpus.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            slug = row["slug"]
            aliases = row["aliases"].split("|")
            _add_keys(gpus, slug, [slug, row["name"], slug.replace("_", " "), *aliases])
    models: dict[str, str] = {}
    with open(catalog_dir / "models.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            aliases = row["aliases"].split("|")
            _add_keys(models, row["slug"], [row["hf_id"], row["slug"], row["name"], *aliases])
    return CatalogNames(gpus=gpus, models=models)


# ---------------------------------------------------------------- one row


class _RowProblem(Exception):
    def __init__(self, field: str, reason: str):
        super().__init__(reason)
        self.field, self.reason = field, reason


_CONCURRENCY_RE = re.compile(r"(?:concurrency|batch size)\s*[=:]?\s*(\d+)", re.I)
_RATE_RE = re.compile(r"(?:target_qps|qps|request[_ ]rate|rate)\s*[=:]?\s*(\d+(?:\.\d+)?)", re.I)
_OFFLINE_RE = re.compile(
    r"\boffline\b|qps\s*inf|rate\s*[=:]?\s*inf|all requests (?:queued|at once)", re.I
)


def parse_load(text: str) -> tuple[int | None, float | None, frozenset[str]]:
    """Concurrency, request rate and flags from a ``concurrency_or_rate`` cell.

    Accepts "concurrency=8", "concurrency 8", "static batch size 64", "QPS 2", "target_qps 39.6",
    "offline max throughput ...", "Offline" and "QPS INF" (all requests at once: offline).

    Raises
    ------
    _RowProblem
        When none of those forms is found.
    """
    concurrency = _CONCURRENCY_RE.search(text)
    rate = _RATE_RE.search(text)
    flags = {"static_batch"} if re.search(r"batch size", text, re.I) else set()
    if concurrency or rate:
        if rate:
            flags.add("open_loop_rate")
        return (
            int(concurrency.group(1)) if concurrency else None,
            float(rate.group(1)) if rate else None,
            frozenset(flags),
        )
    if _OFFLINE_RE.search(text):
        return None, None, frozenset({"offline"})
    reason = "missing" if not text.strip() else f"not a concurrency, rate or offline: {text!r}"
    raise _RowProblem("concurrency_or_rate", reason)


def _cell(raw: Mapping[str, Any], column: str) -> str:
    value = raw.get(column)
    return "" if value is None else str(value).strip()


def _positive_int(raw: Mapping[str, Any], column: str, *, required: bool) -> int | None:
    text = _cell(raw, column)
    if not text:
        if required:
            raise _RowProblem(column, "missing")
        return None
    try:
        number = float(text)
    except ValueError:
        raise _RowProblem(column, f"not a number: {text!r}") from None
    if number <= 0 or not number.is_integer():
        raise _RowProblem(column, f"not a positive whole number: {text!r}")
    return int(number)


def _positive_float(raw: Mapping[str, Any], column: str) -> float:
    text = _cell(raw, column)
    if not text:
        raise _RowProblem(column, "missing")
    try:
        number = float(text)
    except ValueError:
        raise _RowProblem(column, f"not a number: {text!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise _RowProblem(column, f"not a positive finite number: {text!r}")
    return number


def _metric_spec(raw: Mapping[str, Any]) -> _MetricSpec:
    name = _cell(raw, "metric")
    if name not in RAW_METRICS:
        known = ", ".join(sorted(RAW_METRICS))
        raise _RowProblem("metric", f"unknown metric {name!r} (known: {known})")
    return RAW_METRICS[name]


def _precision(raw: Mapping[str, Any], column: str) -> str:
    text = _cell(raw, column)
    precision = normalize_precision(text)
    if precision is None:
        raise _RowProblem(column, f"unknown precision {text!r} (known: {', '.join(PRECISIONS)})")
    return precision


def _required_text(raw: Mapping[str, Any], column: str) -> str:
    text = _cell(raw, column)
    if not text:
        raise _RowProblem(column, "missing")
    return text


# Phrases that deny speculation must go before the search for speculation words.
_NOT_SPECULATIVE_RE = re.compile(
    r"non[- ]mtp|no[- ]mtp|no speculative decoding|without speculative", re.I
)
_SPECULATIVE_RE = re.compile(r"\bmtp\b|eagle|speculative|draft[- ]target|nextn", re.I)
_NOT_DISAGG_RE = re.compile(r"non[- ]disaggregated", re.I)
_DISAGG_RE = re.compile(r"disaggregat", re.I)
# Attention data-parallel (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp,
# the perf-overview's "DEPn"): each GPU runs attention for its own sequences, experts over all.
_ATTENTION_DP_RE = re.compile(r"DP-attention|attention[-_]dp|attention data-parallel|\bDEP\d", re.I)
#: Requests of drawn lengths whose ``isl``/``osl`` are the run's means: a ShareGPT dataset,
#: or outputs left to stop at end-of-sequence (GPUStack's performance-lab notes say which)
_VARIABLE_LENGTHS_RE = re.compile(r"dataset ShareGPT|without --ignore-eos", re.I)
_BURST_REQUESTS_RE = re.compile(r"\b(\d+) (?:successful )?requests\b|--num-prompts (\d+)")
_WARMUP_ADDED = "2026-01-21"  # InferenceX PR #480 added --num-warmups (measured-concurrency-notes)


def _text_flags(engine: str, notes: str, raw_metric: str, source_version: str) -> set[str]:
    """Caveat flags the notes ask us to carry, read from engine and notes text."""
    text = f"{engine} {notes}"
    flags = set()
    if _DISAGG_RE.search(_NOT_DISAGG_RE.sub("", text)):
        flags.add("disaggregated")
    if not re.search(r"\bwithout speculative", notes, re.I) and _SPECULATIVE_RE.search(
        _NOT_SPECULATIVE_RE.sub("", text)
    ):
        flags.add("speculative")
    if raw_metric.startswith("itl_") and "per chunk" in notes:
        flags.add("itl_per_chunk")
    if "no --ignore-eos" in notes.lower():
        flags.add("osl_not_fixed")
    if _VARIABLE_LENGTHS_RE.search(notes):
        flags.add("variable_lengths")
    if "typo" in notes.lower():
        flags.add("suspected_typo")
    if notes.lower().startswith("misconfigured run"):
        flags.add("misconfigured")
    if "outlier-prone" in notes:
        flags.add("memory_starved")
    if re.search(r"statistic not stated|statistic/precision unknown", notes, re.I):
        flags.add("statistic_unstated")
    if re.search(r"prefix[- ]caching on|enable-prefix-caching", engine, re.I):
        flags.add("prefix_caching")
    if _ATTENTION_DP_RE.search(notes):
        flags.add("attention_dp")
    flags |= _inferencex_flags(notes, raw_metric, source_version)
    return flags


def _inferencex_flags(notes: str, raw_metric: str, source_version: str) -> set[str]:
    flags = set()
    if notes.startswith("method A"):
        flags.add("lengths_drawn_0.8_to_1")  # --random-range-ratio 0.8: mean about 0.9 x nominal
        date = _DATE_RE.search(source_version)
        if "closed-loop" in notes[:60] and date and date.group(0) < _WARMUP_ADDED:
            flags.add("no_warmup")
    if notes.startswith("method B"):
        flags.add("experimental")
    if raw_metric == "tok_s_per_user" and notes.startswith(("method A", "method C")):
        flags.add("derived_from_tpot")  # InferenceX interactivity = 1000 / TPOT
    return flags


def _few_or_drawn_requests(notes: str, flags: set[str]) -> bool:
    """Whether a run's requests were drawn-length or at most ``BURST_MAX_REQUESTS``."""
    count = _BURST_REQUESTS_RE.search(notes)
    few = count is not None and int(max(count.groups(""))) <= BURST_MAX_REQUESTS
    return few or "variable_lengths" in flags


def measurement_from_row(raw: Mapping[str, Any], *, line: int, row_id: str = "") -> Measurement:
    """Validate and normalise one row in the measured.csv format.

    Parameters
    ----------
    raw : mapping
        Column -> cell text (missing optional columns are treated as blank).
    line : int
        1-based line number, used in errors and kept on the row.
    row_id : str
        Stable id; defaults to the row's ``row_id`` cell, else ``line:<n>``.

    Raises
    ------
    MeasurementError
        Naming the line and the field at fault.
    """
    try:
        return _build(raw, line, row_id or _cell(raw, "row_id") or f"line:{line}")
    except _RowProblem as problem:
        raise MeasurementError(problem.reason, line=line, field=problem.field) from None


def _build(raw: Mapping[str, Any], line: int, row_id: str) -> Measurement:
    spec = _metric_spec(raw)
    model, gpu = _required_text(raw, "model"), _required_text(raw, "gpu")
    isl = _positive_int(raw, "isl", required=True)
    osl = _positive_int(raw, "osl", required=True)
    concurrency, request_rate, load_flags = parse_load(_cell(raw, "concurrency_or_rate"))
    raw_value = _positive_float(raw, "value")
    num_gpus = _positive_int(raw, "num_gpus", required=spec.divide_by_gpus)
    tp, pp, ep = (_positive_int(raw, column, required=False) for column in ("tp", "pp", "ep"))
    weight = _precision(raw, "weight_precision")
    kv = _precision(raw, "kv_precision")
    flags = set(spec.flags | load_flags)
    if not kv and weight:
        kv = default_kv_precision(weight)
        flags.add("kv_precision_assumed")
    engine, notes = _cell(raw, "engine"), _cell(raw, "notes")
    version, raw_metric = _cell(raw, "source_date_or_version"), _cell(raw, "metric")
    flags |= _text_flags(engine, notes, raw_metric, version)
    if "offline" in flags and _few_or_drawn_requests(notes, flags):
        flags.add("offline_burst")
    if "disaggregated" in flags and spec.metric == "output_tok_s_per_gpu":
        flags.add("per_decode_gpu")
    return Measurement(
        source=_cell(raw, "source"),
        source_version=version,
        model=model,
        gpu=gpu,
        num_gpus=num_gpus,
        tp=tp,
        pp=pp,
        ep=ep,
        engine=engine,
        engine_family=engine_family(engine),
        weight_precision=weight,
        kv_precision=kv,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        request_rate=request_rate,
        metric=spec.metric,
        value=raw_value / num_gpus if spec.divide_by_gpus else raw_value,
        raw_metric=raw_metric,
        raw_value=raw_value,
        statistic=spec.statistic,
        line=line,
        row_id=row_id,
        flags=frozenset(flags),
        notes=notes,
    )


# ---------------------------------------------------------------- files


def _read_text(path_or_file: str | Path | IO) -> str:
    if hasattr(path_or_file, "read"):
        content = path_or_file.read()
    else:
        content = Path(path_or_file).read_bytes()
    # Uploads arrive as bytes (Django UploadedFile); Excel adds a BOM.
    return content.decode("utf-8-sig") if isinstance(content, bytes) else content


def _check_header(fieldnames: list[str] | None) -> None:
    present = {name.strip() for name in fieldnames or []}
    for column in REQUIRED_COLUMNS:
        if column not in present:
            raise MeasurementError("missing column in the header", line=1, field=column)


@overload
def read_measurements(
    path_or_file: str | Path | IO, *, strict: Literal[True] = True
) -> list[Measurement]: ...


@overload
def read_measurements(
    path_or_file: str | Path | IO, *, strict: Literal[False]
) -> tuple[list[Measurement], list[SkippedRow]]: ...


def read_measurements(path_or_file, *, strict=True):
    """Read a CSV in the measured.csv format.

    Parameters
    ----------
    path_or_file : str, Path or file object
        Text or binary; a UTF-8 BOM is tolerated.
    strict : bool
        True (uploads): any bad row refuses the whole file. False (the shipped reference
        files, which hold rows with unstated conditions): bad rows are returned as skipped.

    Returns
    -------
    list of Measurement
        In strict mode.
    (list of Measurement, list of SkippedRow)
        In non-strict mode.

    Raises
    ------
    MeasurementError
        Strict mode: every bad row is listed; ``line``/``field`` name the first. Also for a
        header without a required column, in both modes. Nothing partial is returned.
    """
    reader = csv.DictReader(io.StringIO(_read_text(path_or_file), newline=""))
    _check_header(reader.fieldnames)
    rows: list[Measurement] = []
    problems: list[MeasurementError] = []
    skipped: list[SkippedRow] = []
    for raw in reader:
        line = reader.line_num  # rows never span lines in this format
        try:
            rows.append(measurement_from_row(raw, line=line))
        except MeasurementError as error:
            problems.append(error)
            row_id = _cell(raw, "row_id") or f"line:{line}"
            skipped.append(SkippedRow(line, row_id, error.field or "", error.reason))
    if strict and problems:
        raise _combined(problems)
    return rows if strict else (rows, skipped)


def _combined(problems: list[MeasurementError]) -> MeasurementError:
    if len(problems) == 1:
        return problems[0]
    shown = "; ".join(str(problem) for problem in problems[:10])
    more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
    first = problems[0]
    return MeasurementError(
        f"{len(problems)} rows refused: {shown}{more}",
        line=first.line,
        field=first.field,
        problems=tuple(problems),
    )


def read_shipped_measurements() -> tuple[list[Measurement], list[SkippedRow]]:
    """Both shipped reference files, read non-strictly (skipped rows keep their row ids)."""
    rows: list[Measurement] = []
    skipped: list[SkippedRow] = []
    for path in SHIPPED_FILES:
        file_rows, file_skipped = read_measurements(path, strict=False)
        rows += file_rows
        skipped += file_skipped
    return rows, skipped


# ---------------------------------------------------------------- plain-fit filter

EXCLUDE_DISAGGREGATED = "disaggregated prefill/decode"
EXCLUDE_SPECULATIVE = "speculative decoding (MTP/EAGLE/draft model)"
EXCLUDE_NOT_PREDICTED = "metric not predicted by the model"
EXCLUDE_OSL_NOT_FIXED = "output length not fixed (no --ignore-eos)"
EXCLUDE_OFFLINE_BURST = (
    "offline burst of variable-length or few (<= 1,000) requests: one batch's fill and drain"
)
#: A serving benchmark that sends all its requests at once ("request rate inf") measures one
#: batch being filled and drained, not the steady state an offline max-throughput point is
#: (trtllm-bench streams thousands of fixed-length requests): with few requests or drawn
#: output lengths, the run's last stretch decodes a shrinking batch. GPUStack's ShareGPT
#: bursts of 1,000 requests measured 2,901 tok/s for gpt-oss-120b on one H100, a third of the
#: steady state of its batch.
BURST_MAX_REQUESTS = 1000
EXCLUDE_TYPO = "suspected typo in the source"
#: A run its own source shows misconfigured and superseded (a support thread's first
#: reproduction, before the maintainers' run of the same benchmark): it measures the mistake
EXCLUDE_MISCONFIGURED = "misconfigured run, superseded in its own source"
#: A multi-GPU row whose source gives neither TP nor a DP layout ("max TP/PP/DP config"): the
#: model needs the split (8 GPUs as TP8 or as 8 copies at TP1 differ by ~2.5x per GPU)
EXCLUDE_LAYOUT_UNSTATED = "parallel layout not stated for a multi-GPU run"
EXCLUDE_ITL_PER_CHUNK = "ITL measured per streamed chunk, not per token"
EXCLUDE_DERIVED = "derived as 1000/TPOT of the same point"
EXCLUDE_OTHER_STATISTIC = "same point has a preferred statistic (median > mean, TPOT > ITL)"
EXCLUDE_OTHER_LAUNCH = "same point measured by an earlier launch of the engine in the source"
EXCLUDE_OLDER_RUN = "same point has a newer run (overlapping captures)"
EXCLUDE_SATURATED = "open-loop run saturated (TTFT over 3x its lowest rate's: the queue grew)"
#: An open-loop run whose mean TTFT is this many times the same conditions' lowest-rate TTFT
#: was above what the engine serves: its prompts queued through the run, so its latencies
#: measure the run's length, not the engine. Below saturation a prompt waits at most a few
#: steps (the TensorRT-LLM 0.14 serving table: 1.0-2.8x at 2-16 req/s, 23x at 32 req/s).
SATURATED_TTFT_RATIO = 3.0


def _layout_unstated(row: Measurement) -> bool:
    """More than one GPU, no TP stated and no attention-DP layout in the notes."""
    return (row.num_gpus or 1) > 1 and not row.tp and "attention_dp" not in row.flags


# Order matters: the first matching rule names the reason.
_RULES: tuple[tuple[Callable[[Measurement], bool], str], ...] = (
    (lambda row: row.disaggregated, EXCLUDE_DISAGGREGATED),
    (lambda row: row.speculative, EXCLUDE_SPECULATIVE),
    (lambda row: not row.predicted, EXCLUDE_NOT_PREDICTED),
    (lambda row: "osl_not_fixed" in row.flags, EXCLUDE_OSL_NOT_FIXED),
    (lambda row: "offline_burst" in row.flags, EXCLUDE_OFFLINE_BURST),
    (lambda row: "suspected_typo" in row.flags, EXCLUDE_TYPO),
    (lambda row: "misconfigured" in row.flags, EXCLUDE_MISCONFIGURED),
    (_layout_unstated, EXCLUDE_LAYOUT_UNSTATED),
    (lambda row: "itl_per_chunk" in row.flags, EXCLUDE_ITL_PER_CHUNK),
    (lambda row: "derived_from_tpot" in row.flags, EXCLUDE_DERIVED),
)


def exclusion_reason(row: Measurement) -> str:
    """Why one row, on its own, stays out of a plain fit ('' when it may be used)."""
    for applies, reason in _RULES:
        if applies(row):
            return reason
    return ""


def plain_fit_rows(rows: Iterable[Measurement]) -> tuple[list[Measurement], list[Excluded]]:
    """Rows usable for a plain (aggregated, non-speculative) fit, and the rest with reasons.

    Besides the per-row rules of :func:`exclusion_reason`, duplicates are resolved so that
    each measured point counts once per metric:

    1. within one source and version, median beats mean, TPOT beats ITL and a published
       per-GPU value beats a converted total (``EXCLUDE_OTHER_STATISTIC``);
    2. when two source files of one publication hold the same point (the two overlapping
       InferenceX API captures), the file with the newer run is kept, as the InferenceX notes
       advise (``EXCLUDE_OLDER_RUN``). Versions compared inside one source (a blog post's
       before/after tables, successive TensorRT-LLM doc revisions) are all kept: their spread
       is the noise floor the notes recommend.
    """
    kept: list[Measurement] = []
    excluded: list[Excluded] = []
    for row in rows:
        reason = exclusion_reason(row)
        if reason:
            excluded.append(Excluded(row, reason))
        else:
            kept.append(row)
    kept, dropped = _best_statistic(kept)
    excluded += dropped
    kept, dropped = _newest_capture(kept)
    excluded += dropped
    kept, dropped = _saturated_runs(kept)
    return kept, excluded + dropped


def _statistic_rank(row: Measurement) -> tuple[int, int]:
    return (RAW_METRICS[row.raw_metric].preference, row.line)


def _best_statistic(rows: list[Measurement]) -> tuple[list[Measurement], list[Excluded]]:
    groups: dict[tuple, list[Measurement]] = defaultdict(list)
    for row in rows:
        groups[(row.source, row.source_version, row.condition_key, row.metric)].append(row)
    best = {}
    for group in groups.values():
        winner = min(group, key=_statistic_rank)
        best |= {id(row): winner for row in group}
    kept = [row for row in rows if best[id(row)] is row]
    excluded = [
        Excluded(
            row,
            EXCLUDE_OTHER_STATISTIC if row.engine == best[id(row)].engine else EXCLUDE_OTHER_LAUNCH,
        )
        for row in rows
        if best[id(row)] is not row
    ]
    return kept, excluded


def _newest_capture(rows: list[Measurement]) -> tuple[list[Measurement], list[Excluded]]:
    groups: dict[tuple, list[Measurement]] = defaultdict(list)
    for row in rows:
        groups[(row.source_group, row.condition_key, row.metric)].append(row)
    winners: set[int] = set()
    for group in groups.values():
        newest = max(group, key=lambda row: (row.run_date, row.source)).source
        winners |= {id(row) for row in group if row.source == newest}
    return _partition(rows, winners, EXCLUDE_OLDER_RUN)


def _open_loop(row: Measurement) -> bool:
    return row.request_rate is not None and row.concurrency is None


def _saturated_runs(rows: list[Measurement]) -> tuple[list[Measurement], list[Excluded]]:
    """Open-loop rows (every metric) at a rate whose TTFT exceeds ``SATURATED_TTFT_RATIO``
    times the lowest-rate TTFT of the same source, version and conditions."""
    run_of = {
        id(row): (row.source, row.source_version, replace(row, request_rate=None).condition_key)
        for row in rows
        if _open_loop(row)
    }
    ttft: dict[tuple, dict[float, float]] = defaultdict(dict)
    for row in rows:
        if _open_loop(row) and row.metric == "ttft_ms":
            ttft[run_of[id(row)]][row.request_rate] = row.value
    saturated = {
        (run, rate)
        for run, by_rate in ttft.items()
        for rate, value in by_rate.items()
        if value > SATURATED_TTFT_RATIO * min(by_rate.values())
    }
    winners = {id(row) for row in rows if (run_of.get(id(row)), row.request_rate) not in saturated}
    return _partition(rows, winners, EXCLUDE_SATURATED)


def _partition(
    rows: list[Measurement], winners: set[int], reason: str
) -> tuple[list[Measurement], list[Excluded]]:
    kept = [row for row in rows if id(row) in winners]
    return kept, [Excluded(row, reason) for row in rows if id(row) not in winners]


# ---------------------------------------------------------------- cross-validation folds

SPLIT_KEYS: dict[str, Callable[[Measurement], str]] = {
    "source": lambda row: row.source_group,
    "model_family": lambda row: row.model_family,
    "model": lambda row: normalize_name(row.model),
    "gpu": lambda row: normalize_name(row.gpu),
    "engine_family": lambda row: row.engine_family,
}


def split_by(
    rows: Iterable[Measurement], key: str | Callable[[Measurement], str]
) -> dict[str, list[Measurement]]:
    """Group rows by ``key``: a name in ``SPLIT_KEYS`` or a function of a row.

    Raises
    ------
    ValueError
        For an unknown key name.
    """
    if isinstance(key, str):
        if key not in SPLIT_KEYS:
            raise ValueError(f"unknown split key {key!r} (known: {', '.join(SPLIT_KEYS)})")
        key = SPLIT_KEYS[key]
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return dict(groups)


def leave_one_group_out(
    rows: Iterable[Measurement], key: str | Callable[[Measurement], str]
) -> Iterator[tuple[str, list[Measurement], list[Measurement]]]:
    """Yield (held-out group, training rows, test rows), one fold per group."""
    groups = split_by(rows, key)
    for name, test in groups.items():
        train = [row for other, members in groups.items() if other != name for row in members]
        yield name, train, test


# ---------------------------------------------------------------- uploads


def _require(data: Mapping[str, Any], field: str, context: str) -> Any:
    if not isinstance(data, Mapping) or data.get(field) is None:
        raise MeasurementError(f"{context}: missing field", field=field)
    return data[field]


def _number(data: Mapping[str, Any], field: str, context: str) -> float:
    value = _require(data, field, context)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise MeasurementError(f"{context}: not a number: {value!r}", field=field) from None


def _mean_length(total: float, completed: float) -> str:
    return str(max(1, round(total / completed)))


@dataclass(frozen=True)
class _UploadConditions:
    source: str
    gpu: str
    model: str
    num_gpus: int
    tp: int
    pp: int | None
    ep: int | None
    engine: str
    weight_precision: str
    kv_precision: str

    def cells(self) -> dict[str, str]:
        return {
            "source": self.source,
            "model": self.model,
            "gpu": self.gpu,
            "num_gpus": str(self.num_gpus),
            "tp": str(self.tp),
            "pp": "" if self.pp is None else str(self.pp),
            "ep": "" if self.ep is None else str(self.ep),
            "engine": self.engine,
            "weight_precision": self.weight_precision,
            "kv_precision": self.kv_precision,
        }


def _rows_from_fields(
    base: Mapping[str, str], values: Iterable[tuple[str, str, Any]], id_prefix: str
) -> list[Measurement]:
    """One Measurement per (JSON field, raw metric, value), through the CSV row checks.

    Fields that are absent (None) are skipped: every statistic is optional once the
    required ones were checked.
    """
    rows = []
    for json_field, raw_metric, value in values:
        if value is None:
            continue
        cells = {**base, "metric": raw_metric, "value": str(value)}
        cells["notes"] = f"{base.get('notes', '')}; from {json_field}".lstrip("; ")
        try:
            rows.append(measurement_from_row(cells, line=0, row_id=f"{id_prefix}:{json_field}"))
        except MeasurementError as error:
            field = json_field if error.field == "value" else error.field
            raise MeasurementError(error.reason, field=field) from None
    return rows


_VLLM_FIELDS = (
    ("output_throughput", "total_output_tok_s"),
    ("median_ttft_ms", "ttft_ms_median"),
    ("mean_ttft_ms", "ttft_ms_mean"),
    ("p99_ttft_ms", "ttft_ms_p99"),
    ("median_tpot_ms", "tpot_ms_median"),
    ("mean_tpot_ms", "tpot_ms_mean"),
    ("p99_tpot_ms", "tpot_ms_p99"),
    ("median_itl_ms", "itl_ms_median"),
    ("mean_itl_ms", "itl_ms_mean"),
    ("p99_itl_ms", "itl_ms_p99"),
    ("median_e2el_ms", "e2e_ms_median"),
    ("mean_e2el_ms", "e2e_ms_mean"),
)
_VLLM_REQUIRED = ("completed", "output_throughput", "median_ttft_ms", "median_tpot_ms")


def _vllm_load(data: Mapping[str, Any]) -> str:
    """concurrency_or_rate cell from ``max_concurrency`` and ``request_rate``."""
    context = "vLLM result JSON"
    concurrency = data.get("max_concurrency")
    rate = data.get("request_rate")
    if concurrency is None and rate is None:
        raise MeasurementError(
            f"{context}: missing field (or request_rate)", field="max_concurrency"
        )
    parts = [f"concurrency={int(concurrency)}"] if concurrency is not None else []
    if rate is not None and str(rate).lower() != "inf" and math.isfinite(float(rate)):
        parts.append(f"rate={float(rate)}")
    return ", ".join(parts) or "offline (request_rate inf, no max_concurrency)"


def parse_vllm_benchmark_json(
    data: Mapping[str, Any],
    *,
    gpu: str,
    model: str | None = None,
    num_gpus: int,
    tp: int,
    pp: int | None = 1,
    ep: int | None = None,
    engine: str = "vLLM",
    weight_precision: str = "",
    kv_precision: str = "",
    isl: int | None = None,
    osl: int | None = None,
    source: str = "upload: vLLM benchmark_serving / vllm bench serve result",
) -> list[Measurement]:
    """Measurements from a ``vllm bench serve --save-result`` (benchmark_serving.py) JSON.

    The JSON holds throughput (``output_throughput``, total output tokens/s of the server),
    ``mean/median/p99_{ttft,tpot,itl}_ms``, ``max_concurrency``, ``request_rate`` ("inf" for
    closed loop), ``completed`` and ``total_input_tokens``/``total_output_tokens``; hardware
    and precision come from the arguments. ``model`` defaults to the JSON's ``model_id``.
    ISL/OSL default to the per-request means (flagged ``mean_lengths``).

    Raises
    ------
    MeasurementError
        Naming the missing or bad field.
    """
    context = "vLLM result JSON"
    for field in _VLLM_REQUIRED:
        _require(data, field, context)
    completed = _number(data, "completed", context)
    if completed <= 0:
        raise MeasurementError(f"{context}: no completed requests", field="completed")
    lengths = _lengths(data, isl, osl, completed, context)
    model_name = model or _require(data, "model_id", context)
    conditions = _UploadConditions(
        source, gpu, str(model_name), num_gpus, tp, pp, ep, engine, weight_precision, kv_precision
    )
    base = {
        **conditions.cells(),
        **lengths,
        "source_date_or_version": str(data.get("date", "")),
        "concurrency_or_rate": _vllm_load(data),
    }
    values = [(field, metric, data.get(field)) for field, metric in _VLLM_FIELDS]
    rows = _rows_from_fields(base, values, "vllm")
    return _flag_mean_lengths(rows, isl is None or osl is None)


def _lengths(
    data: Mapping[str, Any], isl: int | None, osl: int | None, completed: float, context: str
) -> dict[str, str]:
    cells = {}
    cells["isl"] = (
        str(isl) if isl else _mean_length(_number(data, "total_input_tokens", context), completed)
    )
    cells["osl"] = (
        str(osl) if osl else _mean_length(_number(data, "total_output_tokens", context), completed)
    )
    return cells


def _flag_mean_lengths(rows: list[Measurement], from_means: bool) -> list[Measurement]:
    if not from_means:
        return rows
    return [_with_flags(row, {"mean_lengths"}) for row in rows]


def _with_flags(row: Measurement, extra: set[str]) -> Measurement:
    return replace(row, flags=row.flags | frozenset(extra))


# guidellm reports: metrics[<name>]["successful"] is a distribution summary with mean, median
# and percentiles.p99. Its inter_token_latency_ms is (last - first token) / (tokens - 1) per
# request, i.e. vLLM's TPOT; its time_per_output_token_ms includes the first token, so it is
# not used.
_GUIDELLM_STATS = (
    ("time_to_first_token_ms", "ttft_ms"),
    ("inter_token_latency_ms", "tpot_ms"),
)


def _guidellm_load(benchmark: Mapping[str, Any], index: int) -> str:
    config = benchmark.get("config") or benchmark.get("args") or {}
    strategy = config.get("strategy") if isinstance(config, Mapping) else None
    field = f"benchmarks[{index}].config.strategy"
    if not isinstance(strategy, Mapping) or not strategy.get("type_"):
        raise MeasurementError("guidellm report: missing field", field=field)
    kind = strategy["type_"]
    if kind == "synchronous":
        return "concurrency=1"
    if kind == "concurrent":
        return f"concurrency={int(_require(strategy, 'streams', 'guidellm report'))}"
    if kind in ("constant", "poisson"):
        return f"rate={float(_require(strategy, 'rate', 'guidellm report'))}"
    if kind == "throughput":
        return "offline (guidellm throughput: all requests at once)"
    raise MeasurementError(f"guidellm report: unsupported strategy {kind!r}", field=field)


def _guidellm_summary(metrics: Mapping[str, Any], name: str, index: int) -> Mapping[str, Any]:
    field = f"benchmarks[{index}].metrics.{name}.successful"
    summary = metrics.get(name, {}).get("successful") if isinstance(metrics, Mapping) else None
    if not isinstance(summary, Mapping):
        raise MeasurementError("guidellm report: missing field", field=field)
    return summary


def _guidellm_values(metrics: Mapping[str, Any], index: int) -> list[tuple[str, str, Any]]:
    """(field path, raw metric, value) for one benchmark's summaries."""
    throughput = _guidellm_summary(metrics, "output_tokens_per_second", index)
    values = [
        ("output_tokens_per_second.successful.mean", "total_output_tok_s", throughput.get("mean"))
    ]
    for name, metric in _GUIDELLM_STATS:
        summary = _guidellm_summary(metrics, name, index)
        prefix = f"{name}.successful"
        values += [
            (f"{prefix}.median", f"{metric}_median", summary.get("median")),
            (f"{prefix}.mean", f"{metric}_mean", summary.get("mean")),
            (
                f"{prefix}.percentiles.p99",
                f"{metric}_p99",
                (summary.get("percentiles") or {}).get("p99"),
            ),
        ]
    return values


def parse_guidellm_report(
    data: Mapping[str, Any],
    *,
    gpu: str,
    model: str,
    num_gpus: int,
    tp: int,
    pp: int | None = 1,
    ep: int | None = None,
    engine: str = "vLLM",
    weight_precision: str = "",
    kv_precision: str = "",
    isl: int | None = None,
    osl: int | None = None,
    source: str = "upload: guidellm report",
) -> list[Measurement]:
    """Measurements from a guidellm ``benchmarks.json`` report (one point per benchmark).

    Each entry of ``benchmarks`` gives its load in ``config.strategy`` (synchronous,
    concurrent ``streams``, constant/poisson ``rate``, throughput = offline) and statistics
    under ``metrics.<name>.successful``: ``output_tokens_per_second`` (mean is the aggregate
    rate), ``time_to_first_token_ms`` and ``inter_token_latency_ms`` (median, mean,
    percentiles.p99). ISL/OSL default to the means of ``prompt_token_count`` and
    ``output_token_count`` (flagged ``mean_lengths``).

    Raises
    ------
    MeasurementError
        Naming the missing or bad field.
    """
    benchmarks = _require(data, "benchmarks", "guidellm report")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise MeasurementError("guidellm report: no benchmarks", field="benchmarks")
    conditions = _UploadConditions(
        source, gpu, model, num_gpus, tp, pp, ep, engine, weight_precision, kv_precision
    )
    rows: list[Measurement] = []
    for index, benchmark in enumerate(benchmarks):
        rows += _guidellm_benchmark(benchmark, index, conditions, isl, osl)
    return rows


def _guidellm_benchmark(
    benchmark: Mapping[str, Any],
    index: int,
    conditions: _UploadConditions,
    isl: int | None,
    osl: int | None,
) -> list[Measurement]:
    metrics = _require(benchmark, "metrics", f"guidellm report benchmarks[{index}]")
    values = _guidellm_values(metrics, index)
    lengths = {
        "isl": str(isl) if isl else _guidellm_mean_length(metrics, "prompt_token_count", index),
        "osl": str(osl) if osl else _guidellm_mean_length(metrics, "output_token_count", index),
    }
    base = {
        **conditions.cells(),
        **lengths,
        "source_date_or_version": str(benchmark.get("run_id", "")),
        "concurrency_or_rate": _guidellm_load(benchmark, index),
        "notes": "guidellm inter_token_latency_ms taken as TPOT (same definition)",
    }
    rows = _rows_from_fields(base, values, f"guidellm[{index}]")
    return _flag_mean_lengths(rows, isl is None or osl is None)


def _guidellm_mean_length(metrics: Mapping[str, Any], name: str, index: int) -> str:
    mean = _guidellm_summary(metrics, name, index).get("mean")
    if mean is None:
        raise MeasurementError(
            "guidellm report: missing field", field=f"benchmarks[{index}].metrics.{name}.mean"
        )
    return str(max(1, round(float(mean))))


# ---------------------------------------------------------------- disaggregated layouts

_POOL_RE = (
    r"{pool} (?P<{pool}_gpus>\d+) GPUs \((?P<{pool}_workers>\d+) worker\(s\), "
    r"TP(?P<{pool}_tp>\d+) EP(?P<{pool}_ep>\d+)(?P<{pool}_dpa>, DP-attention)?\)"
)
_DISAGG_LAYOUT_RE = re.compile(
    _POOL_RE.format(pool="prefill") + ", " + _POOL_RE.format(pool="decode")
)


def disaggregated_layout(notes: str) -> dict[str, dict[str, int]] | None:
    """The prefill and decode pools an InferenceX disaggregated row's notes give, as
    ``{"prefill": {workers, tp, pp, ep, dp}, "decode": {...}}``; None when not stated.

    The notes read "prefill 22 GPUs (11 worker(s), TP2 EP2, DP-attention), decode 12 GPUs
    (3 worker(s), TP4 EP4, DP-attention)". A worker has ``gpus / workers`` GPUs. With
    attention data-parallelism (SGLang/TRT-LLM ``--enable-dp-attention``) each GPU is its own
    attention rank: ``tp = 1, dp = GPUs per worker`` and the experts are spread over the
    worker (``ep = dp``: MoE-TP shards them as EP would); without it ``tp = GPUs per
    worker``, ``dp = 1`` and ``ep = EP``.
    """
    found = _DISAGG_LAYOUT_RE.search(notes or "")
    if not found:
        return None
    out: dict[str, dict[str, int]] = {}
    for pool in ("prefill", "decode"):
        gpus, workers = int(found[f"{pool}_gpus"]), int(found[f"{pool}_workers"])
        if workers < 1 or gpus % workers:
            return None
        per_worker, ep = gpus // workers, int(found[f"{pool}_ep"])
        if found[f"{pool}_dpa"]:
            layout = {"tp": 1, "dp": per_worker, "ep": per_worker}
        else:
            layout = {"tp": per_worker, "dp": 1, "ep": min(ep, per_worker)}
        out[pool] = {"workers": workers, "pp": 1, **layout}
    return out


# ---------------------------------------------------------------- disaggregated recipes
RecipeKey = tuple[str, str, str, int, int, tuple[int, int, bool], tuple[int, int, bool], int]


def _pool_key(pool: Mapping[str, int]) -> tuple[int, int, bool]:
    """(workers, GPUs per worker, attention-DP) of a pool as ``disaggregated_layout`` reads it."""
    return pool["workers"], pool["tp"] * pool["dp"], pool["dp"] > 1


def _recipe_keys(row: Mapping[str, str]) -> list[RecipeKey]:
    """The keys of one ``disagg-recipes.csv`` line, one per concurrency it ran."""
    family = "trtllm" if "trt" in row["framework"] else "sglang"
    pools = tuple(
        (int(row[f"{p}_workers"]), int(row[f"{p}_tp"]),
         row[f"{p}_dp_attn"].strip().lower() == "true")
        for p in ("prefill", "decode")
    )  # fmt: skip
    gpu, precision = row["gpu"].strip().lower(), row["precision"].strip().lower()
    head = (family, gpu, precision, int(row["isl"]), int(row["osl"]), *pools)
    return [(*head, int(conc)) for conc in row["conc_list"].split()]


def _recipe_rows(path: Path):
    """Non-speculative lines of ``disagg-recipes.csv`` (none when the file is absent)."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["spec_decoding"] == "none"]


def recipe_decode_batches(path: Path = DISAGG_RECIPES_CSV) -> dict[RecipeKey, set[int]]:
    """Decode max batch per attention-DP rank of each launched configuration.

    Read from ``disagg-recipes.csv`` (InferenceX ``.github/configs/nvidia-master.yaml``: each
    search-space entry names a recipe such as ``ctx1_gen4_tep8_batch8_eplb0_mtp0``, whose
    ``batch8`` is the decode worker's ``max_batch_size`` per rank). Key: (engine family, gpu,
    precision, isl, osl, prefill pool, decode pool, concurrency), pools as ``_pool_key``;
    non-speculative entries with a whole-number batch only.
    """
    out: dict[RecipeKey, set[int]] = defaultdict(set)
    for row in _recipe_rows(path):
        batch = (row.get("decode_batch_per_rank") or "").strip()
        if batch.isdigit():
            for key in _recipe_keys(row):
                out[key].add(int(batch))
    return out


def sglang_prefill_tokens_per_rank(
    max_prefill_tokens: int | None, chunked_prefill_size: int, dp: int, dp_attention: bool
) -> int:
    """Prompt tokens one SGLang prefill rank takes into a step (tokens).

    A step adds waiting prompts while both ``--max-prefill-tokens`` (per scheduler, 16,384
    when unset) and the chunk budget last, and with attention-DP SGLang divides
    ``--chunked-prefill-size`` by the DP size (``ServerArgs``: "DP attention is enabled. The
    chunked prefill size is adjusted to ..."):
    ``min(max_prefill_tokens, chunked_prefill_size / dp if DP attention else
    chunked_prefill_size)``. Example: DP 4 with 32,768 and 65,536 gives 16,384 per rank.
    """
    chunk = chunked_prefill_size // dp if dp_attention and dp > 1 else chunked_prefill_size
    return min(max_prefill_tokens or SGLANG_DEFAULT_MAX_PREFILL_TOKENS, chunk)


def recipe_prefill_budgets(
    path: Path = DISAGG_RECIPES_CSV, recipes: Path = SGLANG_PREFILL_RECIPES_CSV
) -> dict[RecipeKey, set[int]]:
    """Prefill tokens per step and rank of each launched SGLang configuration whose recipe
    states its chunk size (``sglang-prefill-recipes.csv``, joined on ``config_file``), keyed
    as ``recipe_decode_batches``."""
    stated: dict[str, int] = {}
    if recipes.exists():
        with recipes.open(newline="") as handle:
            for r in csv.DictReader(handle):
                if r["chunked_prefill_size"].strip().isdigit():
                    stated[r["config_file"].strip()] = sglang_prefill_tokens_per_rank(
                        int(r["max_prefill_tokens"]) if r["max_prefill_tokens"].strip() else None,
                        int(r["chunked_prefill_size"]), int(r["prefill_dp"]),
                        r["prefill_dp_attention"].strip().lower() == "true",
                    )  # fmt: skip
    out: dict[RecipeKey, set[int]] = defaultdict(set)
    for row in _recipe_rows(path):
        budget = stated.get(row["config_file"].strip())
        if budget is None:
            continue
        for key in _recipe_keys(row):
            if key[0] == "sglang":  # the family as the keys read it from ``framework``
                out[key].add(budget)
    return out


def recipe_value(
    values: Mapping[RecipeKey, set[int]],
    family: str,
    gpu_slug: str,
    precision: str,
    isl: int,
    osl: int,
    layout: Mapping[str, Mapping[str, int]],
    concurrency: int,
) -> int:
    """The recipes' value (decode batch or prefill budget per rank) for one measured row; 0
    when no entry says, or entries disagree. A one-GPU worker matches an entry with or
    without attention-DP (the flag changes nothing there). ``gpu_slug`` "h100_sxm" matches
    the recipes' "h100"."""
    choices = []
    for pool in ("prefill", "decode"):
        workers, per_worker, dpa = _pool_key(layout[pool])
        flags = (dpa,) if per_worker > 1 else (True, False)
        choices.append([(workers, per_worker, flag) for flag in flags])
    found: set[int] = set()
    gpu = gpu_slug.split("_")[0]
    for p_key in choices[0]:
        for d_key in choices[1]:
            found |= values.get(
                (family, gpu, precision, isl, osl, p_key, d_key, concurrency), set()
            )
    return found.pop() if len(found) == 1 else 0


@dataclass(frozen=True)
class LaunchSettings:
    """What a published launch recipe set for a disaggregated deployment, per attention-DP
    rank (0: the recipe does not say): the decode workers' max batch (TRT-LLM
    ``max_batch_size``) and the prefill workers' prompt tokens per step."""

    decode_max_batch: int = 0
    prefill_budget_tokens: int = 0

    def __bool__(self) -> bool:
        return bool(self.decode_max_batch or self.prefill_budget_tokens)

    def label(self) -> str:
        """E.g. "launch recipe: decode max batch 8 per rank"."""
        said = []
        if self.decode_max_batch:
            said.append(f"decode max batch {self.decode_max_batch} per rank")
        if self.prefill_budget_tokens:
            said.append(f"prefill {self.prefill_budget_tokens:,} tokens a step per rank")
        return "launch recipe: " + ", ".join(said) if said else ""


@functools.lru_cache(maxsize=1)
def _shipped_recipe_values() -> tuple[dict, dict]:
    return recipe_decode_batches(), recipe_prefill_budgets()


def _nominal_lengths(tokens: float) -> list[int]:
    """The recipe lengths ``tokens`` may state: itself, or a nominal length whose drawn mean
    (``sizing.calibrate.DRAWN_LENGTH_FACTOR`` x nominal: InferenceX draws lengths in [0.8, 1]
    x nominal) it is to the token, for ``recipe_value`` to look up. Example: 922 states 922,
    1,024 or 1,025 (the recipes run 1,024)."""
    # the calibration's own factor (imported here: sizing.calibrate loads scipy, ~0.9 s)
    from sizing.calibrate import DRAWN_LENGTH_FACTOR

    low = math.ceil((tokens - 1.0) / DRAWN_LENGTH_FACTOR)
    high = math.floor((tokens + 1.0) / DRAWN_LENGTH_FACTOR)
    drawn = range(low, high + 1)
    return [int(tokens), *drawn] if tokens == int(tokens) else list(drawn)


def launch_settings(
    family: str,
    gpu_slug: str,
    precision: str,
    isl: float,
    osl: float,
    layout: Mapping[str, Mapping[str, int]],
    concurrency: float,
    values: tuple[dict, dict] | None = None,
) -> LaunchSettings:
    """The shipped recipes' settings (``disagg-recipes.csv``, ``recipe_value``) for a
    disaggregated deployment stated as ``predict`` states it: pools of ``workers``, GPUs per
    worker ``tp`` x ``dp`` and ``dp`` attention ranks, lengths nominal or drawn-mean, the
    recipe's own concurrency. ``LaunchSettings()`` when none matches (a blank or fractional
    concurrency matches none). ``values``: (decode batches, prefill budgets); the shipped
    recipes when None."""
    batches, budgets = values if values is not None else _shipped_recipe_values()
    if not math.isfinite(concurrency) or concurrency != int(concurrency):
        return LaunchSettings()
    found = LaunchSettings()
    for nominal_isl in _nominal_lengths(isl):
        for nominal_osl in _nominal_lengths(osl):
            key = (family, gpu_slug, precision, nominal_isl, nominal_osl, layout,
                   int(concurrency))  # fmt: skip
            found = LaunchSettings(recipe_value(batches, *key), recipe_value(budgets, *key))
            if found:
                return found
    return found


# ---------------------------------------------------------------- aggregated launch recipes
def _recipe_matches(recipe: Mapping[str, str], row: Measurement) -> bool:
    """Whether one ``agg-recipes.csv`` line describes how ``row`` was launched (blank
    ``tp`` or ``concurrency_max``: any)."""
    conc = row.concurrency
    if conc is None or row.disaggregated or row.speculative:
        return False
    low, high = recipe["concurrency_min"].strip(), recipe["concurrency_max"].strip()
    return (
        row.source_group == recipe["source_group"].strip()
        and row.model_family == recipe["model_family"].strip()
        and row.engine_family == recipe["engine"].strip()
        and normalize_name(row.gpu) == recipe["gpu"].strip().lower()
        and row.weight_precision == recipe["weight_precision"].strip()
        and (not recipe["tp"].strip() or row.tp == int(recipe["tp"]))
        and (not low or conc >= int(low))
        and (not high or conc <= int(high))
    )


def with_launch_recipes(
    rows: Iterable[Measurement], path: Path = AGG_RECIPES_CSV
) -> list[Measurement]:
    """``rows`` with the engine settings their launch recipes state (``agg-recipes.csv``).

    InferenceX launches SGLang on B200 and B300 with ``--scheduler-recv-interval`` 10 below 16
    clients and 30 from 16 (``benchmarks/dsr1_*_b200.sh``; the B300 scripts reuse them): the
    scheduler then polls for new requests every 10 or 30 decode steps, which every TTFT of
    those runs waits for (``sizing.operating.recv_wait_s``). The same scripts set the share of
    HBM for weights and cache and cap the running sequences (``--mem-fraction-static``,
    ``--max-running-requests``): DeepSeek-R1 FP8 at TP 4 runs at 0.95 and 32, where the 0.90
    default leaves its 168 GB of weights per GPU room for 4 sequences and 32 clients would
    wait 60 s for a slot; at TP 8 it runs at 0.82 and 128. The first matching line wins."""
    rows = list(rows)
    if not path.exists():
        return rows
    with path.open(newline="") as handle:
        recipes = list(csv.DictReader(handle))
    out = []
    for row in rows:
        found = next((r for r in recipes if _recipe_matches(r, row)), None)
        if found is not None:
            row = replace(
                row,
                scheduler_recv_interval=int(found["scheduler_recv_interval"]),
                gpu_memory_utilization=float(found.get("mem_fraction_static") or 0.0),
                max_num_seqs=int(found.get("max_running_requests") or 0),
            )
        out.append(row)
    return out
