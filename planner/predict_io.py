"""``predict``'s CSV contract: read benchmark-shaped rows, resolve names, call the core.

A bad row (unknown model or GPU, a non-numeric length...) gets ``fits=false`` and its reason;
the other rows still compute. Rows are resolved through a per-name cache, so 100,000 rows cost
a few hundred distinct look-ups, and the core evaluates all good rows in one vectorized call.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from sizing.chain import predict_rows
from sizing.disagg import LINKS, DisaggLayout, Pool, predict_disagg
from sizing.engine_settings import ENGINE_FIELDS, SettingError, binding_settings, engine_overrides
from sizing.operating import kv_sequences_live
from sizing.serving import lora_overrides, speculative_overrides
from sizing.specs import (
    Calibration,
    EngineSettings,
    GpuSpec,
    ModelSpec,
    canonical_precision,
)
from sizing.speculative import default_head_params
from sizing.vision import (
    DEFAULT_TILE_PX,
    MAX_IMAGES,
    MAX_TOKENS_PER_IMAGE,
    derived_tokens_per_image,
    with_images,
)

REQUIRED = (
    "model",
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "ep",
    "weight_precision",
    "kv_precision",
    "isl",
    "osl",
    "concurrency",
)
OUTPUT = (
    "fits",
    "reason",
    "weights_gb_per_gpu",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "max_concurrency",
    "total_output_tok_s",
    "output_tok_s_per_gpu",
    "ttft_ms",
    "tpot_ms",
    "profile",
)
ENGINES = {"vllm", "sglang", "trtllm"}
#: Engine names accepted in the ``engine`` column, by family; a release may follow
#: ("vllm 0.21", "SGLang v0.5.12", "tensorrt-llm==1.3") or sit in an ``engine_version`` column.
ENGINE_ALIASES = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}
#: The product name a family's releases are written after (``calibrate._RELEASE_PATTERNS``).
RELEASE_NAMES = {"trtllm": "tensorrt-llm"}
MAX_GPUS = 100_000
MAX_TOKENS = 10_000_000
#: Optional input columns: engine settings, prefix cache, speculative decoding, LoRA. Blank
#: or absent: the engine's defaults and no technique (the numbers are then unchanged).
ENGINE_COLUMNS = ENGINE_FIELDS
PREFIX_COLUMNS = ("prefix_tokens", "prefix_hit_rate")
SPEC_COLUMNS = ("spec_method", "spec_tokens", "spec_acceptance")
LORA_COLUMNS = ("lora_adapters", "lora_rank", "lora_active")
#: components at their own precision when the checkpoint mixes them (gpt-oss: fp4 experts,
#: bf16 attention and embeddings); blank: the routed experts at the published checkpoint's
#: precision where only they are quantized (gpt-oss: mxfp4), else at weight_precision; the
#: embedding and LM head at max(weight bytes, bf16). Attention/dense weights are
#: weight_precision, the cache kv_precision.
PRECISION_COLUMNS = ("expert_precision", "embedding_precision")
#: vision-language prompts (sizing.vision): images per request, and tokens per image (blank:
#: from the model's vision config, one 448-px tile)
VISION_COLUMNS = ("images_per_request", "tokens_per_image")
#: open-loop load: Poisson arrivals at ``request_rate`` requests/s per instance (``vllm bench
#: serve --request-rate``), given instead of ``concurrency`` (``sizing.operating.open_loop``)
LOAD_COLUMNS = ("request_rate",)
MAX_REQUEST_RATE = 1_000_000.0
#: Disaggregated prefill/decode rows (``mode`` = ``disagg``): each pool's workers and layout
#: (each worker uses tp x pp x dp GPUs); ``num_gpus, tp, pp, ep`` may then be blank. Optional:
#: ``kv_link`` (auto | nvlink | rdma) and ``kv_layerwise_overlap`` (true/false).
POOL_FIELDS = ("workers", "tp", "pp", "ep", "dp")
DISAGG_COLUMNS = (
    "mode",
    *(f"{pool}_{name}" for pool in ("prefill", "decode") for name in POOL_FIELDS),
    "kv_link",
    "kv_layerwise_overlap",
)
DISAGG_OUTPUT = ("kv_transfer_ms", "prefill_gpus", "decode_gpus")
MODES = ("agg", "disagg")
OPTIONAL = (
    ENGINE_COLUMNS + PREFIX_COLUMNS + SPEC_COLUMNS + LORA_COLUMNS + PRECISION_COLUMNS
    + VISION_COLUMNS + DISAGG_COLUMNS + LOAD_COLUMNS
)  # fmt: skip


class RowError(ValueError):
    pass


@dataclass
class ParsedRow:
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
    engine_version: str = ""
    settings: tuple = ()  # sorted (name, value) EngineSettings overrides
    prefix_tokens: float = 0.0
    prefix_hit_rate: float = 0.0
    expert_precision: str = ""
    embedding_precision: str = ""
    images_per_request: float = 0.0
    tokens_per_image: float = 0.0  # 0: from the model's vision config
    #: a disaggregated deployment (``mode`` = ``disagg``), else None
    disagg: DisaggLayout | None = None
    #: open-loop Poisson arrivals (req/s per instance); NaN: closed loop at ``concurrency``
    request_rate: float = math.nan
    #: a disaggregated row's published launch recipe (``fleets.measurements.LaunchSettings``:
    #: decode max batch, prefill tokens a step), where the caller found one; None: none
    launch: Any = None

    def engine_settings(self) -> EngineSettings:
        return _engine_settings(self.engine, self.settings)

    def pool_engines(self) -> tuple[EngineSettings, EngineSettings]:
        """(decode, prefill) workers' engine settings of a disaggregated row: the row's own
        settings, and where it leaves them blank its launch recipe's decode max batch
        (``max_num_seqs``) and prefill tokens a step (``max_num_batched_tokens``), as the
        calibration reads its measured rows (``sizing.disagg.point_inputs``)."""
        decode, prefill = dict(self.settings), dict(self.settings)
        if self.launch and self.launch.decode_max_batch:
            decode["max_num_seqs"] = int(self.launch.decode_max_batch)
        if self.launch and self.launch.prefill_budget_tokens:
            prefill["max_num_batched_tokens"] = int(self.launch.prefill_budget_tokens)
        return (_engine_settings(self.engine, tuple(sorted(decode.items()))),
                _engine_settings(self.engine, tuple(sorted(prefill.items()))))  # fmt: skip

    def with_launch(self, recipe) -> ParsedRow:
        """This row with what ``recipe`` (a ``LaunchSettings`` or None) sets that the row's
        own settings leave blank (a stated ``max_num_seqs`` / ``max_num_batched_tokens``
        wins); ``launch`` None where that is nothing."""
        if recipe:
            stated = dict(self.settings)
            recipe = dataclasses.replace(
                recipe,
                decode_max_batch=0 if "max_num_seqs" in stated else recipe.decode_max_batch,
                prefill_budget_tokens=0 if "max_num_batched_tokens" in stated
                else recipe.prefill_budget_tokens,
            )  # fmt: skip
        return dataclasses.replace(self, launch=recipe or None)


def _engine(row: dict) -> tuple[str, str]:
    """(family, release) from the ``engine`` (and optional ``engine_version``) columns."""
    from sizing.calibrate import engine_release

    text = (row.get("engine") or "vllm").strip().lower() or "vllm"
    name = re.split(r"[\s=:]+", text, maxsplit=1)[0]
    family = ENGINE_ALIASES.get(name, name)
    if family not in ENGINES:
        raise RowError(f"engine must be one of {', '.join(sorted(ENGINES))}, got {text!r}")
    # read under the name the release patterns know ("trtllm 0.14" is "tensorrt-llm 0.14")
    spelled = RELEASE_NAMES.get(family, family)
    version_text = (row.get("engine_version") or "").strip()
    release = engine_release(family, f"{spelled} {version_text}") if version_text else ""
    return family, release or engine_release(family, text.replace(name, spelled, 1))


def _int(row: dict, field: str, default: int | None = None, high: int = MAX_GPUS) -> int:
    text = (row.get(field) or "").strip()
    if not text:
        if default is None:
            raise RowError(f"{field} is required")
        return default
    try:
        value = float(text)
    except ValueError as exc:
        raise RowError(f"{field} is not a number: {text!r}") from exc
    if not math.isfinite(value) or value != int(value) or not 1 <= value <= high:
        raise RowError(f"{field} must be a whole number from 1 to {high}, got {text!r}")
    return int(value)


def _tokens(row: dict, field: str) -> float:
    return float(_int(row, field, high=MAX_TOKENS))


def _precision(text: str, field: str) -> str:
    try:
        return canonical_precision(text)
    except ValueError as exc:
        raise RowError(f"{field}: {exc}") from exc


class Resolver:
    """Caches name -> spec look-ups (the callables raise LookupError for unknown names)."""

    def __init__(self, find_model, find_gpu):
        self._find = {"model": find_model, "gpu": find_gpu}
        self._cache: dict[tuple[str, str], object] = {}

    def get(self, kind: str, name: str):
        key = (kind, name.strip().lower())
        if key not in self._cache:
            try:
                self._cache[key] = self._find[kind](name)
            except LookupError as exc:
                self._cache[key] = exc
        value = self._cache[key]
        if isinstance(value, Exception):
            raise RowError(str(value.args[0] if value.args else value))
        return value


@functools.lru_cache(maxsize=4096)
def _engine_settings(engine: str, settings: tuple) -> EngineSettings:
    """One EngineSettings object per distinct setting (rows share it: one table row)."""
    return EngineSettings(engine=engine, **dict(settings))


def _given(row: dict, columns) -> dict:
    return {c: (row.get(c) or "").strip() for c in columns if (row.get(c) or "").strip()}


def _settings(row: dict, model: ModelSpec) -> tuple:
    """EngineSettings overrides from the optional columns (RowError names a bad one)."""
    try:
        values = engine_overrides(_given(row, ENGINE_COLUMNS), EngineSettings())
        spec = _given(row, SPEC_COLUMNS)
        if spec:
            block = {"method": spec.get("spec_method", ""), "tokens": spec.get("spec_tokens")}
            block["acceptance"] = spec.get("spec_acceptance")
            if block["method"].strip().lower() in ("eagle", "mtp"):
                block["head_params"] = default_head_params(model)
            block = {k: v for k, v in block.items() if v is not None}
            values |= speculative_overrides(block, None, (model,))
        lora = _given(row, LORA_COLUMNS)
        if lora:
            values |= lora_overrides(
                {
                    "adapters": lora.get("lora_adapters", ""),
                    "rank": lora.get("lora_rank", ""),
                    "active_per_batch": lora.get("lora_active", "1"),
                }
            )
    except SettingError as exc:
        raise RowError(f"{_column(exc.field)}: {exc.message}") from exc
    return tuple(sorted(values.items()))


def _column(field: str) -> str:
    """A serving block's field as the predict column that fed it."""
    names = {
        "serving.speculative.method": "spec_method",
        "serving.speculative.tokens": "spec_tokens",
        "serving.speculative.acceptance": "spec_acceptance",
        "serving.speculative.draft_model": "spec_method",
        "serving.lora.adapters": "lora_adapters",
        "serving.lora.rank": "lora_rank",
        "serving.lora.active_per_batch": "lora_active",
    }
    return names.get(field, field)


def _prefix(row: dict) -> tuple[float, float]:
    given = _given(row, PREFIX_COLUMNS)
    if not given:
        return 0.0, 0.0
    try:
        tokens = float(given.get("prefix_tokens", "0"))
        hit = float(given.get("prefix_hit_rate", "1"))
    except ValueError as exc:
        raise RowError(f"prefix_tokens / prefix_hit_rate: not a number ({exc})") from exc
    if not (math.isfinite(tokens) and 0 <= tokens <= MAX_TOKENS):
        raise RowError(f"prefix_tokens must be from 0 to {MAX_TOKENS:,}, got {tokens:g}")
    if not (math.isfinite(hit) and 0 <= hit <= 1):
        raise RowError(f"prefix_hit_rate must be in [0, 1], got {hit:g}")
    return tokens, hit


def _mode(row: dict) -> str:
    mode = (row.get("mode") or "").strip().lower() or "agg"
    if mode not in MODES:
        raise RowError(f"mode must be one of {', '.join(MODES)} (blank: agg), got {mode!r}")
    return mode


def _pool(row: dict, pool: str) -> Pool:
    """One pool's layout from its columns; workers and tp are required, pp/ep/dp default 1."""
    return Pool(
        workers=_int(row, f"{pool}_workers"),
        tp=_int(row, f"{pool}_tp"),
        pp=_int(row, f"{pool}_pp", 1),
        ep=_int(row, f"{pool}_ep", 1),
        dp=_int(row, f"{pool}_dp", 1),
    )


def _disagg(row: dict) -> DisaggLayout:
    link = (row.get("kv_link") or "").strip().lower() or "auto"
    if link not in LINKS:
        raise RowError(f"kv_link must be one of {', '.join(LINKS)}, got {link!r}")
    overlap = (row.get("kv_layerwise_overlap") or "").strip().lower()
    if overlap not in ("", "true", "false", "1", "0", "yes", "no"):
        raise RowError(f"kv_layerwise_overlap must be true or false, got {overlap!r}")
    layout = DisaggLayout(
        prefill=_pool(row, "prefill"),
        decode=_pool(row, "decode"),
        link=link,
        layerwise_overlap=overlap in ("true", "1", "yes"),
    )
    if layout.gpus > MAX_GPUS:
        raise RowError(f"prefill + decode GPUs must be at most {MAX_GPUS}, got {layout.gpus}")
    return layout


def _images(row: dict, model: ModelSpec) -> tuple[float, float]:
    """(images_per_request, tokens_per_image) from the vision columns (0, 0 if blank)."""
    given = _given(row, VISION_COLUMNS)
    if not given:
        return 0.0, 0.0
    values = {}
    for name, high in (("images_per_request", MAX_IMAGES), ("tokens_per_image",
                                                             MAX_TOKENS_PER_IMAGE)):  # fmt: skip
        if name not in given:
            values[name] = 0.0
            continue
        try:
            values[name] = float(given[name])
        except ValueError as exc:
            raise RowError(f"{name} is not a number: {given[name]!r}") from exc
        low = 0 if name == "images_per_request" else 1
        if not (math.isfinite(values[name]) and low <= values[name] <= high):
            raise RowError(f"{name} must be from {low} to {high:,}, got {given[name]!r}")
    images, per_image = values["images_per_request"], values["tokens_per_image"]
    if images > 0 and not per_image and not derived_tokens_per_image(model, 1, DEFAULT_TILE_PX) > 0:
        raise RowError(f"tokens_per_image: {model.name} has no vision config, give the count")
    return images, per_image


def _request_rate(row: dict, concurrency: float) -> float:
    """The open-loop rate (req/s, NaN when blank); refused beside a concurrency."""
    text = (row.get("request_rate") or "").strip()
    if not text:
        return math.nan
    if math.isfinite(concurrency):
        raise RowError(
            "request_rate and concurrency are two loads (open loop, closed loop): give one"
        )
    try:
        rate = float(text)
    except ValueError as exc:
        raise RowError(f"request_rate is not a number: {text!r}") from exc
    if not (math.isfinite(rate) and 0 < rate <= MAX_REQUEST_RATE):
        raise RowError(f"request_rate must be above 0 and at most {MAX_REQUEST_RATE:,.0f} req/s")
    return rate


def parse_row(row: dict, resolver: Resolver) -> ParsedRow:
    disagg = _disagg(row) if _mode(row) == "disagg" else None
    model = resolver.get("model", row.get("model") or "")
    gpu = resolver.get("gpu", row.get("gpu") or "")
    weight = _precision(row.get("weight_precision") or "", "weight_precision")
    kv_text = (row.get("kv_precision") or "").strip()
    kv = _precision(kv_text, "kv_precision") if kv_text else ""
    concurrency_text = (row.get("concurrency") or "").strip()
    concurrency = float(_int(row, "concurrency", high=1_000_000)) if concurrency_text else math.nan
    engine, release = _engine(row)
    settings = _settings(row, model)
    prefix_tokens, prefix_hit_rate = _prefix(row)
    expert_text = (row.get("expert_precision") or "").strip()
    # blank: the sizing core reads the experts as published (gpt-oss: mxfp4)
    expert = _precision(expert_text, "expert_precision") if expert_text else ""
    embedding_text = (row.get("embedding_precision") or "").strip()
    embedding = _precision(embedding_text, "embedding_precision") if embedding_text else ""
    images, per_image = _images(row, model)
    request_rate = _request_rate(row, concurrency)
    if disagg is not None and (embedding or images or math.isfinite(request_rate)):
        # the pools do not model them yet
        field = (
            "embedding_precision" if embedding
            else "images_per_request" if images else "request_rate"
        )  # fmt: skip
        raise RowError(f"{field} is not modelled for mode=disagg rows yet; leave it blank")
    if disagg is not None:  # num_gpus, tp, pp, ep may be blank: the pools say it
        d = disagg.decode
        layout = (disagg.gpus, d.tp, d.pp, d.ep)
    else:
        layout = (_int(row, "num_gpus"), _int(row, "tp"), _int(row, "pp", 1), _int(row, "ep", 1))
    return ParsedRow(
        model,
        gpu,
        *layout,
        weight,
        kv,
        _tokens(row, "isl"),
        _tokens(row, "osl"),
        concurrency,
        engine,
        release,
        settings,
        prefix_tokens,
        prefix_hit_rate,
        expert,
        embedding,
        images,
        per_image,
        disagg,
        request_rate,
    )


def _format(value) -> str:
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    number = float(value)
    if not math.isfinite(number):
        return ""
    if number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.6g}"


def predict_csv(
    source: TextIO,
    sink: TextIO,
    resolver: Resolver,
    calibration_for=lambda row: (Calibration(), "physics defaults"),
    simulate: bool = False,
    launch_for=lambda row: None,
) -> dict:
    """Read IN.csv from ``source`` and write OUT.csv to ``sink``; return counts.

    ``calibration_for(parsed_row) -> (Calibration, profile label)``: the profile each row
    uses (its GPU, engine family and release, weight precision); the label fills the
    ``profile`` column.

    ``launch_for(parsed_row) -> LaunchSettings | None``: a disaggregated row's published
    launch recipe (``ParsedRow.pool_engines``), named in its ``profile`` column.

    ``simulate``: replace throughput and the TTFT/TPOT medians of fitting rows by the
    discrete-event simulator's (slow path, ~0.05-1 s per row) instead of the mean-value model.
    """
    reader = csv.DictReader(source)
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ValueError(f"input header lacks required column(s): {', '.join(missing)}")
    rows = list(reader)
    parsed: list[ParsedRow | None] = []
    errors: dict[int, str] = {}
    for i, row in enumerate(rows):
        try:
            parsed.append(parse_row(row, resolver))
        except RowError as exc:
            parsed.append(None)
            errors[i] = str(exc)
    good = [i for i, p in enumerate(parsed) if p is not None]
    for i in good:
        if parsed[i].disagg is not None:
            parsed[i] = parsed[i].with_launch(launch_for(parsed[i]))
    results = _predict(parsed, good, calibration_for)
    if simulate:
        for i in good:
            if results[i]["fits"]:
                simulate_one = simulate_row if parsed[i].disagg is None else simulate_disagg_row
                results[i].update(simulate_one(parsed[i], results[i], calibration_for))
    writer = csv.writer(sink, lineterminator="\n")
    outputs = OUTPUT + (("engine_binding",) if set(ENGINE_COLUMNS) & set(header) else ())
    if "mode" in header:
        outputs += DISAGG_OUTPUT
    extra = [c for c in outputs if c not in header]
    writer.writerow(list(header) + extra)
    for i, row in enumerate(rows):
        out = dict(row)
        if i in errors:
            out.update({c: "" for c in outputs} | {"fits": "false", "reason": errors[i]})
        else:
            out.update({c: _format(v) for c, v in results[i].items()})
        writer.writerow([out.get(c, "") for c in list(header) + extra])
    return {
        "rows": len(rows),
        "bad_rows": len(errors),
        "fits": sum(1 for r in results.values() if r["fits"]),
    }


def _predict(parsed: list, good: list[int], calibration_for) -> dict[int, dict]:
    split = [i for i in good if parsed[i].disagg is not None]
    out = _predict_agg(parsed, [i for i in good if parsed[i].disagg is None], calibration_for)
    return out | _predict_disagg(parsed, split, calibration_for)


def _pool_arrays(layouts: list[Pool]) -> dict:
    return {name: np.array([getattr(p, name) for p in layouts]) for name in POOL_FIELDS}


def _predict_disagg(parsed: list, good: list[int], calibration_for) -> dict[int, dict]:
    """Disaggregated rows through ``sizing.disagg.predict_disagg`` (one vectorized call)."""
    if not good:
        return {}
    from fleets.calibration import disagg_fits
    from sizing.disagg import UNFITTED, fit_for
    from sizing.disagg_sim import closed_loop_wait_factors

    rows = [parsed[i] for i in good]
    fits = [fit_for(disagg_fits(), r.engine, r.gpu.name, r.gpu.vendor) for r in rows]
    bases = [calibration_for(r) for r in rows]
    profiles = []
    for (base, label), fit, row in zip(bases, fits, rows, strict=True):
        suffix = f" + disagg fit {fit.engine}" if fit is not UNFITTED else ""
        recipe = f" + {row.launch.label()}" if row.launch else ""
        profiles.append((fit.calibrate(base), label + suffix + recipe))
    engines = [r.pool_engines() for r in rows]
    layouts = [r.disagg for r in rows]
    deployment = dict(
        models=[r.model for r in rows],
        gpus=[r.gpu for r in rows],
        prefill=_pool_arrays([d.prefill for d in layouts]),
        decode=_pool_arrays([d.decode for d in layouts]),
        weight_precision=[r.weight_precision for r in rows],
        kv_precision=[r.kv_precision or None for r in rows],
        isl=np.array([r.isl for r in rows]),
        osl=np.array([r.osl for r in rows]),
        concurrency=np.array([r.concurrency for r in rows]),
        engine=[decode for decode, _ in engines],
        prefill_engine=[prefill for _, prefill in engines],
        link=np.array([d.link for d in layouts], dtype=object),
        layerwise_overlap=np.array([d.layerwise_overlap for d in layouts]),
        expert_precision=[r.expert_precision or None for r in rows],
    )
    # the closed loop's wave factor, as calibration computed its points': the simulator at
    # the rows' unfitted disaggregated constants (blank concurrency: 1, no simulation)
    unfitted = [UNFITTED.calibrate(base) for base, _ in bases]
    waves = closed_loop_wait_factors(**deployment, calibration=unfitted)
    p = predict_disagg(
        **deployment,
        calibration=[chosen[0] for chosen in profiles],
        prefill_wait_scale=np.array([fit.wait_scale for fit in fits]),
        slot_wait_scale=np.array([fit.slot_wait_scale for fit in fits]),
        prefill_wait_factor=waves.factor,
    )
    columns = {c: getattr(p, c).tolist() for c in OUTPUT + DISAGG_OUTPUT if c != "profile"}
    columns["profile"] = [label for _, label in profiles]
    return {i: {c: columns[c][k] for c in columns} for k, i in enumerate(good)}


def _predict_agg(parsed: list, good: list[int], calibration_for) -> dict[int, dict]:
    if not good:
        return {}
    rows = [parsed[i] for i in good]
    profiles = [calibration_for(r) for r in rows]
    prediction = predict_rows(
        [r.model for r in rows],
        [r.gpu for r in rows],
        np.array([r.num_gpus for r in rows]),
        np.array([r.tp for r in rows]),
        np.array([r.pp for r in rows]),
        np.array([r.ep for r in rows]),
        [r.weight_precision for r in rows],
        [r.kv_precision or None for r in rows],
        np.array([r.isl for r in rows]),
        np.array([r.osl for r in rows]),
        np.array([r.concurrency for r in rows]),
        engine=[r.engine_settings() for r in rows],
        calibration=[chosen[0] for chosen in profiles],
        prefix_tokens=np.array([r.prefix_tokens for r in rows]),
        prefix_hit_rate=np.array([r.prefix_hit_rate for r in rows]),
        expert_precision=[r.expert_precision or None for r in rows],
        embedding_precision=[r.embedding_precision or None for r in rows],
        images_per_request=np.array([r.images_per_request for r in rows]),
        tokens_per_image=np.array([r.tokens_per_image for r in rows]),
        request_rate=np.array([r.request_rate for r in rows]),
    )
    columns = {c: getattr(prediction, c).tolist() for c in OUTPUT if c != "profile"}
    columns["profile"] = [label for _, label in profiles]
    out = {i: {c: columns[c][k] for c in OUTPUT} for k, i in enumerate(good)}
    if any(r.settings for r in rows):  # which engine setting decides each row's memory
        c, fit, op = prediction.candidates, prediction.memory, prediction.operating
        texts = binding_settings(c, fit, kv_sequences_live(c, fit, op.isl_tokens, op.osl_tokens))
        for k, i in enumerate(good):
            out[i]["engine_binding"] = texts[k]
    return out


def simulate_disagg_row(row: ParsedRow, predicted: dict, calibration_for) -> dict:
    """The two-pool simulation (``sizing.disagg_sim``) of one fitting disaggregated row at
    its concurrency (blank: the decode pool's sequences), fixed lengths, ``max(10 C, 300)``
    requests of which the first ``2 C`` are warm-up; medians, as predict's."""
    from fleets.calibration import disagg_fits
    from sizing.candidates import CandidateArrays
    from sizing.disagg import fit_for
    from sizing.disagg_sim import simulate_disagg
    from sizing.simulate import LengthDist

    d, (decode_engine, prefill_engine) = row.disagg, row.pool_engines()
    fit = fit_for(disagg_fits(), row.engine, row.gpu.name, row.gpu.vendor)
    calibration = fit.calibrate(calibration_for(row)[0])

    def worker(pool, engine):
        return CandidateArrays.build(row.model, row.gpu, row.weight_precision,
                                     row.kv_precision or None, pool.tp, pool.pp, pool.ep,
                                     pool.dp, engine, calibration,
                                     expert_precision=row.expert_precision or None)  # fmt: skip

    conc = row.concurrency
    if not math.isfinite(conc):
        conc = predicted["max_concurrency"]
    conc = int(max(conc, 1))
    try:
        result = simulate_disagg(worker(d.prefill, prefill_engine),
                                 worker(d.decode, decode_engine), d.prefill.workers,
                                 d.decode.workers, LengthDist(row.isl), LengthDist(row.osl),
                                 requests=max(10 * conc, 300), concurrency=conc,
                                 warmup_requests=2 * conc, link=d.link,
                                 layerwise_overlap=d.layerwise_overlap)  # fmt: skip
    except ValueError as exc:
        return {"fits": False, "reason": f"simulation: {exc}"}
    return {
        "total_output_tok_s": result.output_tokens_per_s,
        "output_tok_s_per_gpu": result.output_tok_s_per_gpu,
        "ttft_ms": result.percentiles_ms("ttft")["p50"],
        "tpot_ms": result.percentiles_ms("tpot")["p50"],
    }


def simulate_row(row: ParsedRow, predicted: dict, calibration_for) -> dict:
    """Closed-loop simulation of one fitting row at its concurrency (blank: max_concurrency
    capped by max_num_seqs): fixed lengths, ``max(10 C, 300)`` requests of which the first
    ``2 C`` are warm-up; an open-loop row (``request_rate``) sends ``OPEN_LOOP_REQUESTS``
    Poisson arrivals at its rate. Returns the overridden output columns (medians)."""
    from sizing.candidates import CandidateArrays
    from sizing.chain import default_dp
    from sizing.simulate import LengthDist, Workload

    engine = row.engine_settings()
    dp = int(default_dp(row.num_gpus, row.tp, row.pp))
    c = CandidateArrays.build(row.model, row.gpu, row.weight_precision, row.kv_precision or None,
                              row.tp, row.pp, row.ep, dp, engine,
                              calibration_for(row)[0],
                              expert_precision=row.expert_precision or None,
                              embedding_precision=row.embedding_precision or None)  # fmt: skip
    isl = row.isl
    if row.images_per_request > 0:  # the image tokens join the prompt, as in predict_rows
        per_image = row.tokens_per_image or derived_tokens_per_image(row.model, 1,
                                                                     DEFAULT_TILE_PX)  # fmt: skip
        isl = row.isl + row.images_per_request * per_image
        c = with_images(c, row.images_per_request * per_image, isl)
    prefix = {"shared_prefix_tokens": row.prefix_tokens, "prefix_hit_rate": row.prefix_hit_rate}
    if math.isfinite(row.request_rate):  # open loop: Poisson arrivals at the row's rate
        w = Workload(LengthDist(isl), LengthDist(row.osl), requests=OPEN_LOOP_REQUESTS,
                     rate_rps=row.request_rate, warmup_requests=OPEN_LOOP_REQUESTS // 10,
                     **prefix)  # fmt: skip
        return _simulated_columns(c, w, row)
    conc = row.concurrency
    if not math.isfinite(conc):
        conc = min(predicted["max_concurrency"], engine.max_num_seqs * dp)
    conc = int(max(conc, 1))
    w = Workload(LengthDist(isl), LengthDist(row.osl), requests=max(10 * conc, 300),
                 concurrency=conc, warmup_requests=2 * conc, **prefix)  # fmt: skip
    return _simulated_columns(c, w, row)


#: requests an open-loop row's simulation sends (the first tenth are warm-up)
OPEN_LOOP_REQUESTS = 1000


def _simulated_columns(c, w, row: ParsedRow) -> dict:
    """Throughput and the TTFT/TPOT medians of one simulated row (or why it failed)."""
    from sizing.simulate import simulate as run

    try:
        result = run(c, w)
    except ValueError as exc:
        return {"fits": False, "reason": f"simulation: {exc}"}
    total = result.output_tokens_per_s
    return {
        "total_output_tok_s": total,
        "output_tok_s_per_gpu": total / row.num_gpus,
        "ttft_ms": result.percentiles_ms("ttft")["p50"],
        "tpot_ms": result.percentiles_ms("tpot")["p50"],
    }
