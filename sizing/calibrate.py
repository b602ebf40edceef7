"""Fit the roofline's efficiency constants to measured results, and measure the fit's error.

Pure numpy/scipy (no Django). The Django side (``fleets.calibration``, the ``calibrate`` and
``validate`` commands) resolves catalog names into specs and stores the fitted profiles.

What is fitted
--------------
A profile is a handful of physical constants of :class:`~sizing.specs.Calibration`
(``FITTED_CONSTANTS``), never a table of measured values: every prediction still runs the
whole chain (memory fit -> step time -> closed-loop operating point) through
:func:`sizing.chain.predict_rows`. Which term each constant drives (steptime.py):

- ``eta_mem``: decode step memory time ``bytes / (BW * eta_mem)`` -> TPOT, throughput;
- ``eta_flop_decode``: compute time of decode tokens (large batches, MoE) -> TPOT;
- ``eta_flop_prefill``: compute time of prompt chunks -> TTFT, mixed steps;
- ``step_overhead_s``: fixed cost per engine step -> TPOT at small batch, TTFT per chunk;
- ``step_overhead_per_seq_s``: host cost per running sequence per step (scheduling,
  sampling) -> TPOT at large batch, max throughput;
- ``step_overhead_per_moe_layer_s``: a MoE layer's extra cost per step over a dense one
  (router, permutes, expert launches) -> a MoE model's TPOT at small batch;
- ``prompt_overhead_per_moe_layer_s``: a MoE layer's host cost on a step carrying prompt
  tokens (run eagerly, not from a CUDA graph) -> a MoE model's TTFT per chunk;
- ``frontend_latency_s``: the engine's fixed latency before the scheduler sees a request
  -> TTFT;
- ``allreduce_latency_s``, ``link_efficiency``: TP all-reduces, EP all-to-alls, PP hops.

Least squares on log ratios
---------------------------
For points i with measured value ``y_i`` of metric m(i) and prediction ``f_i(theta)``:

``r_i = w_m(i) * log(f_i(theta) / y_i)``, ``w_m = 1 / sqrt(n_m)`` (each metric weighs the
same however many rows it has), plus one prior residual per fitted constant,
``r_k = (log theta_k - log theta0_k) / (PRIOR_SIGMA_LOG * sqrt(N))``, a weak pull to the
physics default so that a constant the data barely move stays physical. The fit runs in
``log theta`` inside ``CONSTANT_BOUNDS`` with a soft-L1 loss (robust to the 5-20 % version
spread between publications). A log ratio makes 2x over and 2x under equally bad.

Constants whose terms the points do not exercise (``|d log f / d log theta_k|`` ~ 0 for all
points, e.g. link constants on single-GPU rows) are held at their prior value. A fit needs at
least as many points as free constants, else it is refused (:class:`CalibrationRefused`).

Profiles and fallback
---------------------
Profiles are keyed (GPU, engine family, precision) with ``ANY`` wildcards; generation-level
profiles use ``"gen:<generation>"`` as the GPU. :func:`select_profile` walks
same GPU/engine/precision -> same GPU/engine -> same GPU other engine -> same generation ->
physics defaults, and returns the label of the profile it used.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from sizing import trtllm_bench
from sizing.chain import predict_rows
from sizing.jointfit import (
    CONSTANT_BOUNDS,
    ENGINE_CONSTANTS,
    FITTED_CONSTANTS,
    PRIOR,
    SILICON_CONSTANTS,
    VENDOR_OF_GENERATION,
    JointFit,
    engine_family_node,
    engine_nodes,
    fit_joint,
    node_chain,
    release_order,
    silicon_nodes,
)
from sizing.precision import default_kv_precision
from sizing.specs import Calibration, EngineSettings, GpuSpec, ModelSpec

__all__ = ["CONSTANT_BOUNDS", "ENGINE_CONSTANTS", "FITTED_CONSTANTS", "SILICON_CONSTANTS"]

# The constants, their bounds and the physics prior live with the joint fit (jointfit.py).
FIT_METRICS = ("output_tok_s_per_gpu", "ttft_ms", "tpot_ms")
ANY = "any"
PHYSICS_LABEL = "physics defaults"
PRIOR_SIGMA_LOG = math.log(4.0)  # a 4x move of a constant costs about one bad point
# A constant is "informed" when its log moves the log prediction of some point by this much.
MIN_SENSITIVITY = 1e-3
# Flags whose rows are predicted and reported but not fitted by default, and why.
UNFITTED_FLAGS = {
    "experimental": (
        "InferenceX experimental token-position sweep (authors' own caveat; osl 128 behind "
        "prompts up to 32k makes TPOT mostly prefill interference)"
    ),
}
# InferenceX draws lengths uniformly in [0.8, 1] x nominal (--random-range-ratio 0.8).
DRAWN_LENGTH_FACTOR = 0.9
DRAWN_LENGTHS_FLAG = "lengths_drawn_0.8_to_1"


PHYSICS = PRIOR  # the prior every fit starts from, and the last fallback
MIN_FIT_POINTS = 3


class CalibrationRefused(ValueError):
    """A fit that cannot be made, with the reason in words."""


# ============================================================================ points
@dataclass(frozen=True)
class FitPoint:
    """One measured value with everything needed to predict it.

    ``concurrency`` is NaN for offline max-throughput rows. ``isl``/``osl`` are the mean
    lengths the engine saw (InferenceX's nominal lengths times ``DRAWN_LENGTH_FACTOR``).
    ``gpu_key`` is the catalog slug; ``precision`` the weight precision.
    """

    model: ModelSpec
    gpu: GpuSpec
    num_gpus: int
    tp: int
    pp: int
    ep: int
    weight_precision: str
    kv_precision: str
    isl: float
    osl: float
    concurrency: float
    engine: str
    metric: str
    value: float
    row_id: str = ""
    gpu_key: str = ""
    generation: str = ""
    source_group: str = ""
    model_family: str = ""
    flags: frozenset[str] = frozenset()
    #: the engine release the row was measured on ('' when the source does not say)
    engine_release: str = ""
    #: the routed experts' precision when it is not ``weight_precision`` (see ``_precisions``)
    expert_precision: str = ""
    #: open-loop Poisson arrivals (req/s; NaN: closed loop at ``concurrency``, or offline)
    #: and the requests the run sent (NaN: not stated), see ``operating.open_loop``
    request_rate: float = math.nan
    run_requests: float = math.nan
    #: the engine's ``scheduler_recv_interval`` in the run's launch recipe (1: every step)
    scheduler_recv_interval: int = 1
    #: the launch recipe's HBM share and running-sequence cap (0: the engine's defaults)
    gpu_memory_utilization: float = 0.0
    max_num_seqs: int = 0

    @property
    def lengths_drawn(self) -> bool:
        """The benchmark drew each request's lengths (closed-loop clients drift apart)."""
        return DRAWN_LENGTHS_FLAG in self.flags

    @property
    def precision(self) -> str:
        return self.weight_precision

    @property
    def offline(self) -> bool:
        """All requests queued at once (max throughput): neither clients nor a rate."""
        return math.isnan(self.concurrency) and math.isnan(self.request_rate)

    def conditions(self) -> str:
        """The row's conditions in one line, for worst-row listings."""
        load = (
            "offline"
            if self.offline
            else f"{self.request_rate:g} req/s"
            if math.isnan(self.concurrency)
            else f"c={int(self.concurrency)}"
        )
        return (
            f"{self.model.name} on {self.num_gpus}x{self.gpu_key} TP{self.tp} PP{self.pp} "
            f"EP{self.ep} {self.engine} {self.weight_precision}/{self.kv_precision}"
            f"{' experts ' + self.expert_precision if self.expert_precision else ''} "
            f"{self.isl:g}/{self.osl:g} {load}"
        )


def _engine_name(family: str) -> str:
    return family if family in ("vllm", "sglang", "trtllm") else "vllm"


def point_engine(p: FitPoint) -> EngineSettings:
    """The engine settings a point was measured with: its family's defaults, except that
    TensorRT-LLM's offline rows ran ``trtllm-bench throughput``, whose batch size and token
    budget come from its own heuristic (``sizing.trtllm_bench``), and a run whose launch
    recipe polls for requests every k decode steps carries that k
    (``scheduler_recv_interval``), and its HBM share and running-sequence cap where the
    recipe sets them."""
    name = _engine_name(p.engine)
    changes: dict[str, float] = {}
    if p.scheduler_recv_interval > 1:
        changes["scheduler_recv_interval"] = p.scheduler_recv_interval
    if p.gpu_memory_utilization > 0:
        changes["gpu_memory_utilization"] = p.gpu_memory_utilization
    if p.max_num_seqs > 0:
        changes["max_num_seqs"] = p.max_num_seqs
    if _ran_trtllm_bench(p):
        batch, tokens = trtllm_bench.bench_limits(_bench_requests(p), p.isl, p.osl, p.pp)
        changes |= {"max_num_seqs": batch, "max_num_batched_tokens": tokens}
    return dataclasses.replace(_ENGINES[name], **changes) if changes else _ENGINES[name]


def _ran_trtllm_bench(p: FitPoint) -> bool:
    return _engine_name(p.engine) == "trtllm" and p.offline


def _bench_requests(p: FitPoint) -> float:
    """The requests ``trtllm-bench`` expects the cache to hold for this point (it reads the
    checkpoint's quantisation: the experts' when only they are quantized)."""
    kv = p.kv_precision or default_kv_precision(p.weight_precision)
    weights = p.expert_precision or p.weight_precision
    return trtllm_bench.kv_max_requests(p.model, p.gpu, p.num_gpus, p.tp, weights, kv, p.isl, p.osl)


def points_from_measurements(
    rows: Iterable[Any],
    find_model: Callable[[str], tuple[str, ModelSpec]],
    find_gpu: Callable[[str], tuple[str, GpuSpec]],
    generation_of: Callable[[str], str],
) -> tuple[list[FitPoint], list[tuple[Any, str]]]:
    """Turn ``fleets.measurements.Measurement`` rows into fit points.

    Parameters
    ----------
    rows : iterable of Measurement-like objects (duck-typed: model, gpu, num_gpus, tp, pp,
        ep, engine_family, weight_precision, kv_precision, isl, osl, concurrency,
        request_rate, metric, value, row_id, flags, offline, source_group, model_family)
    find_model, find_gpu : name -> (catalog slug, spec); raise LookupError when unknown
    generation_of : GPU slug -> architecture generation ('' when unknown)

    Returns
    -------
    (points, skipped)
        ``skipped`` pairs each unusable row with the reason.
    """
    points: list[FitPoint] = []
    skipped: list[tuple[Any, str]] = []
    for row in rows:
        reason = _unpredictable(row)
        if reason:
            skipped.append((row, reason))
            continue
        try:
            model_key, model = find_model(row.model)
            gpu_key, gpu = find_gpu(row.gpu)
        except LookupError as error:
            skipped.append((row, f"not in the catalog: {error.args[0] if error.args else error}"))
            continue
        point = _point(row, model, gpu, gpu_key, generation_of(gpu_key))
        if _ran_trtllm_bench(point) and _bench_requests(point) <= 0:
            skipped.append((row, BENCH_LIMITS_UNKNOWN))
            continue
        points.append(point)
    return points, skipped


def unfitted_reason(point_or_row: Any) -> str:
    """Why a predictable row is kept out of fits by default ('' when it is fitted)."""
    for flag, reason in UNFITTED_FLAGS.items():
        if flag in getattr(point_or_row, "flags", ()):
            return reason
    return ""


def _unpredictable(row: Any) -> str:
    """Why the closed-loop model cannot predict this row ('' when it can)."""
    if row.metric not in FIT_METRICS:
        return f"metric {row.metric} is not a mean/median the model predicts"
    if row.offline and row.metric != "output_tok_s_per_gpu":
        return "offline run: latency is unbounded queueing, not a model output"
    if row.request_rate is not None and row.metric == "output_tok_s_per_gpu":
        return "open-loop throughput is the offered rate (and the run's drain), not the engine's"
    if not row.weight_precision:
        return "weight precision unknown"
    return ""


def _layout(row: Any) -> tuple[int, int, int, int]:
    """(num_gpus, tp, pp, ep) with the source's silences filled conservatively. A row that ran
    attention data-parallel (flag ``attention_dp``: "DEP4", "DP-attention") is TP 1 with the
    GPUs as DP ranks and the experts over them (its sources write the rank count as TP)."""
    pp = row.pp or 1
    num_gpus = row.num_gpus or (row.tp or 1) * pp
    if "attention_dp" in getattr(row, "flags", ()):
        return num_gpus, 1, pp, row.ep or max(num_gpus // pp, 1)
    tp = row.tp or max(num_gpus // pp, 1)
    return num_gpus, tp, pp, row.ep or 1


#: why an offline TensorRT-LLM row is not predicted when the bench's heuristic finds no room
BENCH_LIMITS_UNKNOWN = (
    "trtllm-bench's own heuristic leaves no KV cache for this run, so it was run with batch "
    "limits the source does not give"
)


def _precisions(row: Any, model: ModelSpec) -> tuple[str, str, str]:
    """(weights, KV cache, routed experts) a row ran at.

    A checkpoint published with only its experts quantized (``checkpoint_expert_precision``;
    gpt-oss: MXFP4 experts, bf16 attention and embeddings) is served as published, whatever
    a table's precision column says (the TensorRT-LLM perf-overview labels gpt-oss "FP4" on
    B200 and "FP8" on Hopper after the column header): experts at the checkpoint's precision,
    the rest bf16, the cache as stated, else (``auto``) at the model's bf16.
    """
    expert = model.checkpoint_expert_precision
    if not expert:
        return row.weight_precision, row.kv_precision, ""
    assumed = "kv_precision_assumed" in getattr(row, "flags", ())
    return "bf16", "bf16" if assumed else row.kv_precision, expert


_RUN_REQUESTS_RE = re.compile(r"\b(\d[\d,]*) requests\b")


def _run_requests(row: Any) -> float:
    """The requests an open-loop run sent, where its source says ("500 requests"; NaN when
    it does not): how long a queue above saturation grows (``operating.open_loop``)."""
    for text in (getattr(row, "source_version", ""), getattr(row, "notes", "")):
        match = _RUN_REQUESTS_RE.search(text or "")
        if match:
            return float(match.group(1).replace(",", ""))
    return math.nan


def _point(row: Any, model: ModelSpec, gpu: GpuSpec, gpu_key: str, generation: str) -> FitPoint:
    num_gpus, tp, pp, ep = _layout(row)
    weight, kv, expert = _precisions(row, model)
    scale = DRAWN_LENGTH_FACTOR if DRAWN_LENGTHS_FLAG in row.flags else 1.0
    return FitPoint(
        model=model,
        gpu=gpu,
        num_gpus=num_gpus,
        tp=tp,
        pp=pp,
        ep=ep,
        weight_precision=weight,
        kv_precision=kv,
        expert_precision=expert,
        isl=row.isl * scale,
        osl=row.osl * scale,
        concurrency=math.nan if row.concurrency is None else float(row.concurrency),
        request_rate=math.nan if row.request_rate is None else float(row.request_rate),
        run_requests=_run_requests(row),
        engine=row.engine_family,
        metric=row.metric,
        value=float(row.value),
        row_id=row.row_id,
        gpu_key=gpu_key,
        generation=generation,
        source_group=row.source_group,
        model_family=row.model_family,
        flags=frozenset(row.flags),
        engine_release=engine_release(
            row.engine_family, row.engine, getattr(row, "source_version", "")
        ),
        scheduler_recv_interval=int(getattr(row, "scheduler_recv_interval", 1) or 1),
        gpu_memory_utilization=float(getattr(row, "gpu_memory_utilization", 0.0) or 0.0),
        max_num_seqs=int(getattr(row, "max_num_seqs", 0) or 0),
    )


# Where a release is written in an engine name, container image or source note, per family.
_RELEASE_PATTERNS = {
    "sglang": (r"sglang[^0-9]{0,12}?v?(\d+\.\d+\.\d+)", r"sgl-dev:v?(\d+\.\d+\.\d+)"),
    "vllm": (r"vllm[^0-9]{0,20}?v?(\d+\.\d+)",),
    "trtllm": (
        r"tensorrt[-_ ]llm[^0-9]{0,12}?v?(\d+\.\d+)",
        r"tensorrt_llm==(\d+\.\d+)",
        r"tensorrt-llm/release:(\d+\.\d+)",
    ),
    "other": (r"atom(\d+\.\d+\.\d+)", r"_atom(\d{8})"),
}


def engine_release(family: str, *texts: str) -> str:
    """The engine release named in ``texts`` (first match), e.g. ``"0.5.12"`` for SGLang
    (patch releases move SGLang's kernels), ``"0.21"`` for vLLM, ``"1.3"`` for TensorRT-LLM;
    '' when none is named. Release candidates count as their release."""
    for text in texts:
        for pattern in _RELEASE_PATTERNS.get(family, ()):
            found = re.search(pattern, text or "", re.IGNORECASE)
            if found:
                return found.group(1)
    return ""


# ============================================================================ prediction
_ENGINES = {name: EngineSettings(engine=name) for name in ("vllm", "sglang", "trtllm")}


@dataclass(frozen=True)
class _Columns:
    """Points as the column arrays ``predict_rows`` takes (built once per point set)."""

    points: tuple[FitPoint, ...]
    arrays: dict[str, Any]
    metric_index: np.ndarray  # index into FIT_METRICS
    measured: np.ndarray

    @classmethod
    def of(cls, points: Sequence[FitPoint]) -> _Columns:
        pts = tuple(points)

        def col(name, dtype=np.float64):
            return np.array([getattr(p, name) for p in pts], dtype=dtype)

        arrays = {
            "models": [p.model for p in pts],
            "gpus": [p.gpu for p in pts],
            "num_gpus": col("num_gpus", np.int64),
            "tp": col("tp", np.int64),
            "pp": col("pp", np.int64),
            "ep": col("ep", np.int64),
            "weight_precision": [p.weight_precision for p in pts],
            "kv_precision": [p.kv_precision or None for p in pts],
            "expert_precision": [p.expert_precision or None for p in pts],
            "isl": col("isl"),
            "osl": col("osl"),
            "concurrency": col("concurrency"),
            "request_rate": col("request_rate"),
            "run_requests": col("run_requests"),
            "engine": [point_engine(p) for p in pts],
            "lengths_drawn": np.array([p.lengths_drawn for p in pts], dtype=bool),
        }
        metric_index = np.array([FIT_METRICS.index(p.metric) for p in pts], dtype=np.int64)
        return cls(pts, arrays, metric_index, col("value"))

    def predict(self, calibration: Calibration | Sequence[Calibration]) -> np.ndarray:
        """Predicted value of each point's own metric (NaN where the model says misfit)."""
        if not self.points:
            return np.zeros(0)
        out = predict_rows(**self.arrays, calibration=calibration)
        table = np.stack([out.output_tok_s_per_gpu, out.ttft_ms, out.tpot_ms])
        predicted = table[self.metric_index, np.arange(len(self.points))]
        return np.where(out.fits & (predicted > 0), predicted, np.nan)


def predict_points(
    points: Sequence[FitPoint], calibration: Calibration | Sequence[Calibration] = PHYSICS
) -> np.ndarray:
    """Predicted value of each point's metric under ``calibration`` (one, or one per point)."""
    return _Columns.of(points).predict(calibration)


def absolute_percentage_error(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """``APE = |predicted - measured| / measured`` (fraction; NaN stays NaN)."""
    return np.abs(np.asarray(predicted) - np.asarray(measured)) / np.asarray(measured)


# ============================================================================ one fit
@dataclass(frozen=True)
class FitResult:
    """A fitted profile: constants, what they were fitted on, and in-sample error."""

    calibration: Calibration
    free_constants: tuple[str, ...]
    row_ids: tuple[str, ...]
    n_points: int
    in_sample_median_ape: float
    in_sample_by_metric: dict[str, tuple[float, float, int]]  # metric -> (median, mean, n)
    cost: float
    refused: str = ""
    #: constants (of the nodes this profile reads) that ended at a physical bound: the fit
    #: could not explain the data inside physics there, so that term is suspect
    bound_hits: tuple[str, ...] = ()

    @property
    def quality(self) -> dict[str, Any]:
        """What a reviewer needs to trust the profile: points, bound hits, a verdict."""
        verdict = "constants at a bound" if self.bound_hits else "ok"
        if self.n_points == 0:
            verdict = "no own points (borrowed from its generation and engine)"
        return {"n_points": self.n_points, "bound_hits": list(self.bound_hits), "verdict": verdict}

    @property
    def constants(self) -> dict[str, float]:
        return {name: getattr(self.calibration, name) for name in FITTED_CONSTANTS}


def _log_theta(calibration: Calibration, names: Sequence[str]) -> np.ndarray:
    return np.log([getattr(calibration, name) for name in names])


def _with(calibration: Calibration, names: Sequence[str], log_theta: np.ndarray, **extra):
    values = {name: float(np.exp(v)) for name, v in zip(names, log_theta, strict=True)}
    return dataclasses.replace(calibration, **values, **extra)


def _clip_to_bounds(calibration: Calibration) -> Calibration:
    """The start point must be strictly inside the bounds for least_squares."""
    values = {}
    for name, (low, high) in CONSTANT_BOUNDS.items():
        values[name] = float(np.clip(getattr(calibration, name), low * 1.001, high * 0.999))
    return dataclasses.replace(calibration, **values)


def informed_constants(
    points: Sequence[FitPoint], base: Calibration = PHYSICS, step_log: float = 0.05
) -> tuple[str, ...]:
    """Constants whose term moves at least one point's prediction (finite difference in log).

    ``max_i |log f_i(theta * e^h) - log f_i(theta)| / h >= MIN_SENSITIVITY``.
    """
    columns = _Columns.of(points)
    base = _clip_to_bounds(base)
    reference = np.log(columns.predict(base))
    informed = []
    for name in FITTED_CONSTANTS:
        moved = _with(base, [name], _log_theta(base, [name]) + step_log)
        delta = np.abs(np.log(columns.predict(moved)) - reference) / step_log
        if np.nanmax(delta, initial=0.0) >= MIN_SENSITIVITY:
            informed.append(name)
    return tuple(informed)


def _metric_weights(columns: _Columns) -> np.ndarray:
    counts = np.bincount(columns.metric_index, minlength=len(FIT_METRICS)).astype(float)
    return 1.0 / np.sqrt(np.maximum(counts[columns.metric_index], 1.0))


def _error_by_metric(columns: _Columns, predicted: np.ndarray) -> dict:
    ape = absolute_percentage_error(predicted, columns.measured)
    table = {}
    for k, metric in enumerate(FIT_METRICS):
        values = ape[(columns.metric_index == k) & np.isfinite(ape)]
        if len(values):
            table[metric] = (float(np.median(values)), float(np.mean(values)), len(values))
    return table


def fit_calibration(
    points: Sequence[FitPoint],
    base: Calibration = PHYSICS,
    constants: Sequence[str] | None = None,
    name: str = "fitted",
) -> FitResult:
    """Least-squares fit of the free constants to ``points`` (see the module docstring).

    Parameters
    ----------
    points : measured points; misfit predictions (model says it does not fit in memory)
        are left out of the residuals
    base : start point and prior (physics defaults unless given)
    constants : names to fit; default: the ``informed_constants`` of the points
    name : becomes ``Calibration.name``

    Raises
    ------
    CalibrationRefused
        No points, or fewer usable points than free constants.
    """
    base = _clip_to_bounds(base)
    columns = _Columns.of(points)
    start = columns.predict(base)
    usable = np.isfinite(start)
    if not usable.any():
        raise CalibrationRefused(f"{name}: no point the model can place (none fit in memory)")
    columns = _Columns.of([p for p, ok in zip(columns.points, usable, strict=True) if ok])
    names = tuple(constants) if constants is not None else informed_constants(columns.points, base)
    unknown = set(names) - set(FITTED_CONSTANTS)
    if unknown:
        raise CalibrationRefused(f"{name}: not a fitted constant: {', '.join(sorted(unknown))}")
    n = len(columns.points)
    if n < max(len(names), 1):
        raise CalibrationRefused(
            f"{name}: {n} usable points for {len(names)} constants ({', '.join(names)}); "
            "a fit needs at least as many points as constants"
        )
    theta0 = _log_theta(base, names)
    weights = _metric_weights(columns)
    prior_scale = 1.0 / (PRIOR_SIGMA_LOG * math.sqrt(n))

    def residuals(log_theta: np.ndarray) -> np.ndarray:
        predicted = columns.predict(_with(base, names, log_theta))
        predicted = np.where(np.isfinite(predicted), predicted, 1e-30)
        data = weights * np.log(predicted / columns.measured)
        return np.concatenate([data, prior_scale * (log_theta - theta0)])

    low = np.log([CONSTANT_BOUNDS[k][0] for k in names])
    high = np.log([CONSTANT_BOUNDS[k][1] for k in names])
    solution = least_squares(
        residuals, theta0, bounds=(low, high), loss="soft_l1", f_scale=0.1,
        diff_step=1e-3, max_nfev=60 * (len(names) + 1),
    )  # fmt: skip
    fitted = _with(base, names, solution.x, name=name)
    predicted = columns.predict(fitted)
    ape = absolute_percentage_error(predicted, columns.measured)
    return FitResult(
        calibration=fitted,
        free_constants=names,
        row_ids=tuple(p.row_id for p in columns.points),
        n_points=n,
        in_sample_median_ape=float(np.nanmedian(ape)),
        in_sample_by_metric=_error_by_metric(columns, predicted),
        cost=float(solution.cost),
    )


# ============================================================================ profiles
@dataclass(frozen=True)
class ProfileKey:
    """(GPU slug or ``gen:<generation>``, engine family or ANY, precision or ANY, engine
    release or ANY)."""

    gpu: str
    engine: str = ANY
    precision: str = ANY
    version: str = ANY

    @property
    def label(self) -> str:
        parts = [self.gpu]
        if self.engine != ANY:
            parts.append(self.engine if self.version == ANY else f"{self.engine} {self.version}")
        if self.precision != ANY:
            parts.append(self.precision)
        return " / ".join(parts)


def generation_key(generation: str) -> str:
    return f"gen:{generation}"


@dataclass
class ProfileSet:
    """Fitted profiles by key, the refusals with reasons, the joint fit behind them, and the
    fallback walk."""

    profiles: dict[ProfileKey, FitResult] = field(default_factory=dict)
    refused: dict[ProfileKey, str] = field(default_factory=dict)
    joint: JointFit | None = None

    def select(
        self, gpu: str, engine: str, precision: str, generation: str, version: str = ""
    ) -> tuple[Calibration, str]:
        table = {k: r.calibration for k, r in self.profiles.items()}
        fitted = _fitted_releases(table, engine)
        composable = version and self.joint is not None and generation and fitted
        if composable and not _runtime_releases(fitted, engine, version):
            # no fitted release of this runtime (a cross-validation fold held them all out):
            # its family's constants from the joint fit, not another runtime's
            key = ProfileKey(generation_key(generation), engine, precision or ANY, version)
            table[key] = _key_calibration(self.joint, key, generation, {})[0]
        return select_profile(
            table,
            gpu,
            engine,
            precision,
            generation,
            version,
        )


def fallback_keys(
    gpu: str, engine: str, precision: str, generation: str, version: str = ""
) -> list[ProfileKey]:
    """Keys to try in order for one place (a GPU or a generation), most specific first:
    engine x precision x release -> engine x release -> engine x precision -> engine.
    ``generation`` adds the same walk on ``gen:<generation>`` after the GPU's."""
    precision = precision or ANY
    version = version or ANY
    places = [gpu] + ([generation_key(generation)] if generation else [])
    keys = []
    for place in places:
        candidates = [
            ProfileKey(place, engine, precision, version),
            ProfileKey(place, engine, ANY, version),
            ProfileKey(place, engine, precision, ANY),
            ProfileKey(place, engine, ANY, ANY),
        ]
        keys += [k for k in dict.fromkeys(candidates)]
    return keys


def select_profile(
    profiles: Mapping[ProfileKey, Calibration],
    gpu: str,
    engine: str,
    precision: str,
    generation: str,
    version: str = "",
    owned: Mapping[ProfileKey, Calibration] | None = None,
) -> tuple[Calibration, str]:
    """The calibration for one deployment and the human-readable name of the profile used.

    One walk for every door (runs, predict, validate, the API, the report):

    1. the owner's own profiles (``owned``) for this GPU x engine (x precision x release);
    2. this GPU x engine (x precision x release), then this generation x engine (x ...):
       a GPU with no profile of its own borrows its generation's silicon, not another
       engine's profile (H200 x vLLM uses hopper x vLLM before H200 x TensorRT-LLM). The
       shipped fit composes a generation x engine profile for every generation and engine
       family it knows, measured together or not (``_composed_keys``), so this step answers
       for them: an unmeasured generation reads its vendor's silicon;
    3. this GPU, another engine (the one with the lowest error), then this generation,
       another engine, then the generation alone;
    4. the physics defaults.

    A release not given (or not fitted) means the newest fitted release. The label is the
    profile's own name (it names the GPU or generation, engine release and precision), with
    "(other engine)" when step 3 answered.
    """
    version = _same_runtime(profiles, engine, version) or version
    walk = fallback_keys(gpu, engine, precision, generation, version)
    for table in (owned or {}, profiles):
        for key in walk if table is profiles else walk[:4]:
            if key in table:
                return table[key], _label(table[key], key)
    places = [gpu] + ([generation_key(generation)] if generation else [])
    for place in places:
        others = [
            k
            for k in profiles
            if k.gpu == place and k.engine not in (engine, ANY) and k.precision == ANY
            and k.version == ANY
        ]  # fmt: skip
        if others:
            best = min(others, key=lambda k: (profiles[k].relative_error, k.engine))
            return profiles[best], f"{_label(profiles[best], best)} (other engine)"
    if generation and ProfileKey(generation_key(generation)) in profiles:
        key = ProfileKey(generation_key(generation))
        return profiles[key], _label(profiles[key], key)
    return PHYSICS, PHYSICS_LABEL


def _same_runtime(profiles: Iterable[ProfileKey], engine: str, version: str) -> str:
    """The fitted release a walk reads for ``version``: itself when fitted; else, when the
    newest fitted release runs another runtime (``jointfit.engine_family_node``), the newest
    fitted release of its own (TensorRT-LLM 0.12 reads 0.20, a TensorRT-engine release, not
    1.3); '' otherwise (the walk's newest release, or no version given)."""
    releases = _fitted_releases(profiles, engine)
    if not version or version in releases:
        return version
    same = _runtime_releases(releases, engine, version)
    newest = max(releases, key=release_order, default="")
    if not same or newest in same:
        return ""
    return max(same, key=release_order)


def _fitted_releases(profiles: Iterable[ProfileKey], engine: str) -> set[str]:
    return {k.version for k in profiles if k.engine == engine and k.version != ANY}


def _runtime_releases(releases: Iterable[str], engine: str, version: str) -> list[str]:
    """The ``releases`` that run the same runtime as ``version`` (``engine_family_node``)."""
    runtime = engine_family_node(engine, version)
    return [r for r in releases if engine_family_node(engine, r) == runtime]


def _label(calibration: Calibration, key: ProfileKey) -> str:
    name = calibration.name
    return name if name and name not in ("fitted", PHYSICS_LABEL) else key.label


def profile_name(key: ProfileKey, release: str) -> str:
    """Human-readable profile name: ``"hopper / vllm 0.21 / fp8"``; a key without a release
    names the release it uses (``"(newest)"``), an unversioned family says so."""
    place = key.gpu.removeprefix("gen:")
    parts = [place]
    if key.engine != ANY:
        if key.version != ANY:
            parts.append(f"{key.engine} {key.version}")
        elif release:
            parts.append(f"{key.engine} {release} (newest)")
        else:
            parts.append(f"{key.engine} (release not stated)")
    else:
        parts.append("any engine")
    if key.precision != ANY:
        parts.append(key.precision)
    return " / ".join(parts)


def _newest_releases(points: Sequence[FitPoint]) -> dict[str, str]:
    newest: dict[str, str] = {}
    for p in points:
        r = p.engine_release
        if r and release_order(r) > release_order(newest.get(p.engine, "")):
            newest[p.engine] = r
    return newest


def _profile_keys(points: Sequence[FitPoint], places_of: Callable[[FitPoint], tuple]) -> list:
    """Keys a fit emits: per place (generation, or GPU for uploads) x engine seen there:
    engine alone, x each precision seen at the place, x each release of the engine, and the
    exact precision x release combinations measured; and the place alone."""
    keys: set[ProfileKey] = set()
    precisions: dict[str, set[str]] = defaultdict(set)
    releases: dict[str, set[str]] = defaultdict(set)
    engines: dict[str, set[str]] = defaultdict(set)
    for p in points:
        for place in places_of(p):
            precisions[place].add(p.precision)
            engines[place].add(p.engine)
            if p.engine_release:
                releases[p.engine].add(p.engine_release)
                keys.add(ProfileKey(place, p.engine, p.precision, p.engine_release))
    for place, families in engines.items():
        keys.add(ProfileKey(place))
        for family in families:
            keys.add(ProfileKey(place, family))
            keys |= {ProfileKey(place, family, prec) for prec in precisions[place]}
            keys |= {ProfileKey(place, family, ANY, r) for r in releases[family]}
    return sorted(keys, key=lambda k: (k.gpu, k.engine, k.precision, k.version))


def _composed_keys(points: Sequence[FitPoint], fitted: set[ProfileKey]) -> list[ProfileKey]:
    """Keys no point measured, composed from the joint fit so a deployment borrows strength
    along the hierarchy instead of another engine's profile: every generation (those without
    points read their vendor's silicon, then the prior) x every engine family and release
    seen anywhere, x each precision measured on the generation (with and without a named
    release). H200 x SGLang with no SGLang
    run on Hopper is Hopper's silicon with SGLang's engine constants, not Hopper x vLLM; an
    L4 (Ada, unmeasured) is NVIDIA's silicon with the engine's constants, not the defaults."""
    families = {p.engine for p in points}
    releases = {(p.engine, p.engine_release) for p in points if p.engine_release}
    precisions: dict[str, set[str]] = defaultdict(set)
    for p in points:
        precisions[p.generation].add(p.precision)
    keys: set[ProfileKey] = set()
    for generation in sorted(set(VENDOR_OF_GENERATION) | set(precisions) - {""}):
        place = generation_key(generation)
        keys.add(ProfileKey(place))
        for family in families:
            keys.add(ProfileKey(place, family))
            keys |= {ProfileKey(place, family, prec) for prec in precisions[generation]}
            named = [r for e, r in releases if e == family]
            keys |= {ProfileKey(place, family, ANY, r) for r in named}
            # a named release x a measured precision: the precision's silicon leaf with the
            # release's engine constants (the walk's first key), not the release's generation
            # node (TensorRT-LLM 1.0 x bf16 on Hopper: eta_mem 0.77, not the generation's 0.60)
            keys |= {
                ProfileKey(place, family, prec, r) for r in named for prec in precisions[generation]
            }
    return sorted(keys - fitted, key=lambda k: (k.gpu, k.engine, k.precision, k.version))


def _key_calibration(joint: JointFit, key: ProfileKey, generation: str, newest: dict) -> tuple:
    """(Calibration, nodes' bound hits) a profile key stands for, composed from the joint fit:
    precision ANY reads the generation's silicon node, release ANY the newest release (or
    the family node), engine ANY the prior's engine constants."""
    precision = "" if key.precision == ANY else key.precision
    family = "" if key.engine == ANY else key.engine
    release = newest.get(family, "") if key.version == ANY else key.version
    name = profile_name(key, newest.get(family, ""))
    calibration = joint.calibration(generation, precision or "*", family or "*", release, name)
    if not precision:  # the generation node itself, not a precision leaf
        s_top, _ = silicon_nodes(generation, "")
        values = {k: joint.resolve(s_top, k) for k in SILICON_CONSTANTS}
        calibration = dataclasses.replace(calibration, **values)
    if not family:
        calibration = dataclasses.replace(
            calibration, **{k: getattr(PRIOR, k) for k in ENGINE_CONSTANTS}
        )
    hits = joint.hits_for(generation, precision or "*", family or "*", release)
    return calibration, tuple(hits)


def fit_profiles(
    points: Sequence[FitPoint],
    min_precision_points: int = 30,
    error_of: Mapping[ProfileKey, float] | None = None,
    level: str = "generation",
    start: JointFit | None = None,
) -> ProfileSet:
    """One hierarchical joint fit of all points (``sizing.jointfit``), then the profiles it
    supports, keyed by generation (``level="generation"``, the shipped fit: GPUs of one
    generation share silicon constants), by GPU (``level="gpu"``) or both (``"both"``, a
    user's upload for their own fleet). Fewer than ``MIN_FIT_POINTS`` placeable points are
    refused (priors would be all the profile says). ``min_precision_points`` is kept for
    callers; precision leaves are always fitted, pulled toward their generation by the prior.

    ``error_of`` sets each profile's ``relative_error`` (cross-validated median APE, from
    :func:`cross_validate`); without it the in-sample median APE is used, floored at 10 %.
    """
    result = ProfileSet()
    columns = _Columns.of(points)
    if not points:
        return result
    first = columns.predict(PHYSICS)
    placeable = [p for p, v in zip(points, first, strict=True) if np.isfinite(v)]
    conditions = {
        (p.model.name, p.gpu_key, p.tp, p.isl, p.osl, p.concurrency, p.request_rate)
        for p in placeable
    }
    if len(placeable) < MIN_FIT_POINTS or len(conditions) < 2:
        result.refused[ProfileKey("all")] = (
            f"{len(placeable)} usable points (of {len(points)}; the rest do not fit in memory) "
            f"at {len(conditions)} condition(s): a fit needs at least {MIN_FIT_POINTS} measured "
            "points at 2 or more conditions (one condition cannot tell the terms apart)"
        )
        return result
    columns = _Columns.of(placeable)
    joint = fit_joint(
        placeable, columns.predict, columns.metric_index, columns.measured, start=start
    )
    result.joint = joint
    newest = _newest_releases(placeable)
    own = [
        joint.calibration(p.generation, p.precision, p.engine, p.engine_release) for p in placeable
    ]
    predicted = columns.predict(own)

    def places_of(p: FitPoint) -> tuple[str, ...]:
        generation = (generation_key(p.generation),) if p.generation else ()
        gpu = (p.gpu_key,) if p.gpu_key else ()
        return {"gpu": gpu, "both": gpu + generation}.get(level, generation)

    generation_of_place = {place: p.generation for p in placeable for place in places_of(p)}
    keys = _profile_keys(placeable, places_of)
    if level == "generation":
        composed = _composed_keys(placeable, set(keys))
        generation_of_place |= {k.gpu: k.gpu.removeprefix("gen:") for k in composed}
        keys += composed
    for key in keys:
        served = [i for i, p in enumerate(placeable) if _serves(key, p)]
        calibration, hits = _key_calibration(joint, key, generation_of_place[key.gpu], newest)
        sub = _Columns(
            tuple(placeable[i] for i in served),
            {},
            columns.metric_index[served],
            columns.measured[served],
        )
        ape = absolute_percentage_error(predicted[served], columns.measured[served])
        finite = ape[np.isfinite(ape)]
        in_sample = float(np.median(finite)) if len(finite) else math.nan
        error = (error_of or {}).get(key, max(in_sample, 0.10) if len(finite) else 0.25)
        fit = FitResult(
            calibration=dataclasses.replace(calibration, relative_error=float(error)),
            free_constants=_free_constants(joint, key, generation_of_place[key.gpu], newest),
            row_ids=tuple(placeable[i].row_id for i in served),
            n_points=len(served),
            in_sample_median_ape=in_sample,
            in_sample_by_metric=_error_by_metric(sub, predicted[served]),
            cost=joint.cost,
            bound_hits=hits,
        )
        result.profiles[key] = fit
    return result


def _free_constants(joint: JointFit, key: ProfileKey, generation: str, newest: dict) -> tuple:
    precision = "" if key.precision == ANY else key.precision
    family = "" if key.engine == ANY else key.engine
    release = newest.get(family, "") if key.version == ANY else key.version
    s_top, s_leaf = silicon_nodes(generation, precision)
    nodes = node_chain(s_leaf if precision else s_top)  # the vendor's constants count too
    if family:
        nodes += node_chain(engine_nodes(family, release)[1])
    free = {name for node in nodes for name in joint.values.get(node, {})}
    return tuple(name for name in FITTED_CONSTANTS if name in free)


# ============================================================================ validation
def predict_with_profiles(points: Sequence[FitPoint], profiles: ProfileSet):
    """(predicted values, profile label per point) using the fallback walk."""
    chosen = [
        profiles.select(p.gpu_key, p.engine, p.precision, p.generation, p.engine_release)
        for p in points
    ]
    predicted = _Columns.of(points).predict([c for c, _ in chosen])
    return predicted, [label for _, label in chosen]


@dataclass(frozen=True)
class Evaluation:
    """Predictions of a point set, in or out of sample, with the profile each one used."""

    points: tuple[FitPoint, ...]
    predicted: np.ndarray
    labels: tuple[str, ...]
    folds: tuple[str, ...] = ()

    @property
    def ape(self) -> np.ndarray:
        measured = np.array([p.value for p in self.points])
        return absolute_percentage_error(self.predicted, measured)


def evaluate_in_sample(points: Sequence[FitPoint], **fit_options) -> tuple[ProfileSet, Evaluation]:
    profiles = fit_profiles(points, **fit_options)
    predicted, labels = predict_with_profiles(points, profiles)
    return profiles, Evaluation(tuple(points), predicted, tuple(labels))


def cross_validate(
    points: Sequence[FitPoint], fold_of: Callable[[FitPoint], str], **fit_options
) -> Evaluation:
    """Hold out each fold (e.g. a whole source or model family), fit profiles on the rest,
    predict the held-out points through the fallback walk. Every prediction is out of sample.
    """
    folds: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(points):
        folds[fold_of(p)].append(i)
    predicted = np.full(len(points), np.nan)
    labels = [""] * len(points)
    fold_names = [""] * len(points)
    for fold, test_index in folds.items():
        held = set(test_index)
        train = [p for i, p in enumerate(points) if i not in held]
        profiles = fit_profiles(train, **fit_options)
        values, used = predict_with_profiles([points[i] for i in test_index], profiles)
        for k, i in enumerate(test_index):
            predicted[i], labels[i], fold_names[i] = values[k], used[k], fold
    return Evaluation(tuple(points), predicted, tuple(labels), tuple(fold_names))


def source_fold(point: FitPoint) -> str:
    """Hold-one-publication-out fold. Successive TensorRT-LLM perf-overview revisions re-measure
    the same configurations, so they form one fold: holding out one revision while training on
    the next would leak the answer."""
    if "perf-overview" in point.source_group:
        return "TensorRT-LLM perf-overview (all revisions)"
    return point.source_group


def model_family_fold(point: FitPoint) -> str:
    return point.model_family


def profile_cv_errors(
    evaluation: Evaluation, profiles: ProfileSet
) -> dict[ProfileKey, dict[str, dict[str, float]]]:
    """Per profile key, the error per metric of the points it serves:
    ``{metric: {"median_ape_pct", "mean_ape_pct", "n"}}`` (out of sample when the evaluation
    is a cross-validation)."""
    ape = evaluation.ape
    metrics = np.array([p.metric for p in evaluation.points])
    errors = {}
    for key in profiles.profiles:
        serves = np.array([_serves(key, p) for p in evaluation.points], dtype=bool)
        table = {}
        for metric in FIT_METRICS:
            values = ape[serves & (metrics == metric) & np.isfinite(ape)]
            if len(values):
                table[metric] = {
                    "median_ape_pct": _pct(np.median(values)),
                    "mean_ape_pct": _pct(np.mean(values)),
                    "n": int(len(values)),
                }
        errors[key] = table
    return errors


def relative_errors(table: Mapping[str, Mapping[str, float]], fallback: float) -> tuple:
    """(relative_error, ttft_relative_error) fractions from a per-metric CV table.

    The throughput/TPOT band is the n-weighted median APE of those two metrics; a metric with
    no held-out point keeps ``fallback`` (throughput/TPOT) or ``2 * fallback`` (TTFT)."""
    main = [table[m] for m in ("output_tok_s_per_gpu", "tpot_ms") if m in table]
    if main:
        n = sum(e["n"] for e in main)
        band = sum(e["median_ape_pct"] * e["n"] for e in main) / n / 100.0
    else:
        band = fallback
    ttft = table["ttft_ms"]["median_ape_pct"] / 100.0 if "ttft_ms" in table else 2 * fallback
    return float(band), float(ttft)


def apply_cv_errors(profiles: ProfileSet, evaluation: Evaluation) -> dict:
    """Set every profile's ``relative_error``/``ttft_relative_error`` from the out-of-sample
    errors of the points it serves; return the per-profile CV tables."""
    tables = profile_cv_errors(evaluation, profiles)
    for key, fit in list(profiles.profiles.items()):
        in_sample = fit.in_sample_median_ape
        fallback = (max(in_sample, 0.10) if math.isfinite(in_sample) else 0.25) * 1.5
        band, ttft = relative_errors(tables.get(key, {}), fallback)
        calibration = dataclasses.replace(
            fit.calibration, relative_error=band, ttft_relative_error=ttft
        )
        profiles.profiles[key] = dataclasses.replace(fit, calibration=calibration)
    return tables


def calibrate_with_cv(
    points: Sequence[FitPoint], fold_of: Callable[[FitPoint], str] | None = None, **fit_options
) -> tuple[ProfileSet, Evaluation, dict]:
    """Fit profiles on all points and set their error bands by cross-validation.

    ``fold_of`` defaults to hold-one-model-family-out when the points span several families
    (the planner's question: a model not measured on this GPU), else to five interleaved folds
    of the points (a single user upload). Returns (profiles, CV evaluation, CV tables).
    """
    if fold_of is None:
        families = {p.model_family for p in points}
        fold_of = model_family_fold if len(families) > 1 else _interleaved_fold(points)
    profiles = fit_profiles(points, **fit_options)
    evaluation = cross_validate(points, fold_of, **fit_options)
    tables = apply_cv_errors(profiles, evaluation)
    return profiles, evaluation, tables


def _interleaved_fold(points: Sequence[FitPoint], folds: int = 5):
    index = {id(p): f"fold {i % folds}" for i, p in enumerate(points)}
    return lambda p: index[id(p)]


def _serves(key: ProfileKey, p: FitPoint) -> bool:
    gpu_ok = key.gpu in (p.gpu_key, generation_key(p.generation))
    engine_ok = key.engine in (ANY, p.engine) and key.version in (ANY, p.engine_release)
    return gpu_ok and engine_ok and key.precision in (ANY, p.precision)


# ============================================================================ error tables
MAX_THROUGHPUT = "output_tok_s_per_gpu (max throughput)"
REPORT_METRICS = (MAX_THROUGHPUT, *FIT_METRICS)


def report_metric(point: FitPoint) -> str:
    """The metric as error tables show it: offline throughput is the max-throughput target."""
    if point.metric == "output_tok_s_per_gpu" and point.offline:
        return MAX_THROUGHPUT
    return point.metric


GROUPINGS: dict[str, Callable[[FitPoint], str]] = {
    "gpu": lambda p: p.gpu_key,
    "model_family": lambda p: p.model_family,
    "engine": lambda p: p.engine,
}


def error_summary(evaluation: Evaluation, worst: int = 10) -> dict[str, Any]:
    """Median and mean APE (%) per metric, per metric x GPU / model family / engine, and the
    ``worst`` rows. Points the model cannot place (misfit) are counted, not averaged."""
    ape = evaluation.ape
    metrics = np.array([report_metric(p) for p in evaluation.points], dtype=object)
    summary: dict[str, Any] = {"overall": _table(ape, metrics, [ANY] * len(ape))}
    for name, key in GROUPINGS.items():
        summary[f"by_{name}"] = _table(ape, metrics, [key(p) for p in evaluation.points])
    summary["unplaced"] = int(np.sum(~np.isfinite(ape)))
    summary["worst"] = _worst(evaluation, ape, worst)
    return summary


def _table(ape: np.ndarray, metrics: np.ndarray, groups: Sequence[str]) -> list[dict]:
    rows = []
    groups = np.asarray(groups, dtype=object)
    for group in sorted(set(groups)):
        for metric in REPORT_METRICS:
            mask = (groups == group) & (metrics == metric)
            values = ape[mask & np.isfinite(ape)]
            if not mask.any():
                continue
            rows.append(
                {
                    "group": group,
                    "metric": metric,
                    "n": int(len(values)),
                    "unplaced": int(mask.sum() - len(values)),
                    "median_ape_pct": _pct(np.median(values)) if len(values) else None,
                    "mean_ape_pct": _pct(np.mean(values)) if len(values) else None,
                }
            )
    return rows


def _pct(x: float) -> float:
    return round(float(x) * 100.0, 1)


def _worst(evaluation: Evaluation, ape: np.ndarray, count: int) -> list[dict]:
    order = np.argsort(-np.where(np.isfinite(ape), ape, -1.0))[:count]
    rows = []
    for i in order:
        if not np.isfinite(ape[i]):
            continue
        p = evaluation.points[i]
        rows.append(
            {
                "row_id": p.row_id,
                "metric": p.metric,
                "measured": p.value,
                "predicted": round(float(evaluation.predicted[i]), 3),
                "ape_pct": _pct(ape[i]),
                "profile": evaluation.labels[i] if evaluation.labels else "",
                "conditions": p.conditions(),
                "source_group": p.source_group,
            }
        )
    return rows
