"""``CandidateArrays``: the struct-of-arrays every sizing function works on.

One row is one deployable configuration: model x GPU x weight/KV precision x TP/PP/EP/DP x
engine settings x calibration. Specs are gathered once into flat numpy arrays (one value per
row), so the physics in memory.py / steptime.py is plain array arithmetic over thousands to
millions of rows with no Python loop. Units are in the names; bytes and seconds are base units.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sizing.precision import (
    PRECISIONS,
    attention_compute_precision,
    attention_peak_flops,
    compute_precision,
    default_kv_precision,
    kv_bytes_per_element,
    peak_flops,
    weight_bytes_per_param,
)
from sizing.specs import (
    Calibration,
    EngineSettings,
    GpuSpec,
    ModelSpec,
    canonical_precision,
    lora_module_mask,
)

_MODEL_FIELDS = {
    # array name: (ModelSpec attribute or callable, dtype)
    "num_layers": ("num_layers", np.float64),
    "hidden_size": ("hidden_size", np.float64),
    "num_attention_heads": ("num_attention_heads", np.int64),
    "num_kv_heads": ("num_kv_heads", np.int64),
    "head_dim": ("head_dim", np.float64),
    "vocab_size": ("vocab_size", np.float64),
    "total_params": ("total_params", np.float64),
    "active_params": ("active_params", np.float64),
    "embedding_params": ("embedding_params", np.float64),
    "tied_embeddings": ("tie_word_embeddings", np.bool_),
    "kv_lora_rank": ("kv_lora_rank", np.float64),
    "qk_rope_head_dim": ("qk_rope_head_dim", np.float64),
    "full_layers": (lambda m: m.n_full_layers, np.float64),
    "sliding_layers": ("sliding_window_layers", np.float64),
    "sliding_window": ("sliding_window", np.float64),
    "linear_layers": ("linear_attention_layers", np.float64),
    "linear_state_elements": ("linear_state_elements", np.float64),
    "num_experts": ("num_experts", np.float64),
    "experts_per_token": ("experts_per_token", np.float64),
    "shared_experts": ("shared_experts", np.float64),
    "params_per_expert": ("params_per_expert", np.float64),
    "num_moe_layers": ("num_moe_layers", np.float64),
    "max_context": ("max_context", np.float64),
    "vision_params": ("vision_params", np.float64),
    "vision_merge": ("vision_merge", np.float64),
}

_GPU_FIELDS = {
    "memory_bytes": (lambda g: g.memory_gb * 1e9, np.float64),
    "hbm_bytes_s": (lambda g: g.hbm_bandwidth_tb_s * 1e12, np.float64),
    # The catalog quotes scale-up bandwidth bidirectional; a ring all-reduce sends one way.
    "link_bytes_s": (lambda g: g.scale_up_bw_gb_s * 1e9 / 2.0, np.float64),
    "scale_out_bytes_s": (lambda g: g.scale_out_gb_s * 1e9, np.float64),
    "gpus_per_node": ("gpus_per_node", np.int64),
    "scale_up_domain_gpus": ("scale_up_domain_gpus", np.int64),
    "usd_per_gpu_hour": ("usd_per_gpu_hour", np.float64),
}

_ENGINE_FIELDS = {
    "gpu_memory_utilization": ("gpu_memory_utilization", np.float64),
    "max_num_batched_tokens": ("max_num_batched_tokens", np.float64),
    "max_num_seqs": ("max_num_seqs", np.float64),
    "block_size": ("block_size", np.float64),
    "runtime_overhead_bytes": (lambda e: e.runtime_overhead_gb * 1e9, np.float64),
    "workspace_bytes_per_token_hidden": ("workspace_bytes_per_token_hidden", np.float64),
    "max_model_len": ("max_model_len", np.float64),
    "scheduler_recv_interval": ("scheduler_recv_interval", np.float64),
    "kv_share_of_free": (lambda e: 1.0 if e.engine == "trtllm" else 0.0, np.float64),
    "kv_reserves_output": (lambda e: float(e.reserves_output), np.float64),
    "spec_tokens": (lambda e: e.spec_tokens if e.spec_method else 0, np.float64),
    "spec_tokens_per_step": (lambda e: e.spec_tokens_per_step, np.float64),
    # NaN when acceptance is given per position
    "spec_acceptance": (
        lambda e: float("nan") if e.spec_acceptance_by_position else e.spec_acceptance,
        np.float64,
    ),
    "spec_draft_params": (lambda e: e.spec_draft_params if e.spec_method else 0.0, np.float64),
    "spec_draft_active_params": ("spec_draft_active_params", np.float64),
    "spec_draft_layers": ("spec_draft_layers", np.float64),
    "spec_draft_kv_elements_per_token": ("spec_draft_kv_elements_per_token", np.float64),
    "lora_adapters": ("lora_adapters", np.float64),
    "lora_rank": ("lora_rank", np.float64),
    "lora_active": ("lora_active", np.float64),
    "lora_resident_slots": (
        lambda e: e.lora_resident_slots or min(e.lora_adapters, math.ceil(e.lora_active)),
        np.float64,
    ),
    "lora_module_mask": (lambda e: lora_module_mask(e.lora_target_modules), np.float64),
}

_CALIBRATION_FIELDS = {
    "eta_mem": ("eta_mem", np.float64),
    "eta_flop_decode": ("eta_flop_decode", np.float64),
    "eta_flop_prefill": ("eta_flop_prefill", np.float64),
    "step_overhead_s": ("step_overhead_s", np.float64),
    "allreduce_latency_s": ("allreduce_latency_s", np.float64),
    "link_efficiency": ("link_efficiency", np.float64),
    "step_overhead_per_layer_s": ("step_overhead_per_layer_s", np.float64),
    "step_overhead_per_seq_s": ("step_overhead_per_seq_s", np.float64),
    "step_overhead_per_moe_layer_s": ("step_overhead_per_moe_layer_s", np.float64),
    "prompt_overhead_per_moe_layer_s": ("prompt_overhead_per_moe_layer_s", np.float64),
    "frontend_latency_s": ("frontend_latency_s", np.float64),
    "prefill_wave_fraction": ("prefill_wave_fraction", np.float64),
    "first_token_decode_steps": ("first_token_decode_steps", np.float64),
}


def _table(objs: Sequence[Any], spec: dict) -> dict[str, np.ndarray]:
    """One array per field over the unique objects (the gather source)."""
    out = {}
    for name, (attr, dtype) in spec.items():
        get = attr if callable(attr) else (lambda o, a=attr: getattr(o, a))
        out[name] = np.array([get(o) for o in objs], dtype=dtype)
    return out


def _factorize_objects(value: Any, n: int, kind: type) -> tuple[list, np.ndarray]:
    """(unique objects, index per row) for one object or a sequence of n objects.

    Specs hold dicts, so they are unhashable: identity is the key. Equal-but-distinct objects
    simply become two table rows, which costs nothing.
    """
    if isinstance(value, kind):
        return [value], np.zeros(n, dtype=np.int64)
    seen: dict[int, int] = {}
    uniq: list = []
    idx = np.empty(n, dtype=np.int64)
    for i, obj in enumerate(value):
        j = seen.get(id(obj))
        if j is None:
            j = seen[id(obj)] = len(uniq)
            uniq.append(obj)
        idx[i] = j
    return uniq, idx


def precision_codes(values: Any, n: int) -> np.ndarray:
    """Index into ``PRECISIONS`` per row, from a string or a sequence of strings/None."""
    if isinstance(values, str):
        return np.full(n, PRECISIONS.index(canonical_precision(values)), dtype=np.int64)
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return np.broadcast_to(arr.astype(np.int64), (n,)).copy()
    cache: dict[Any, int] = {}
    out = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        c = cache.get(v)
        if c is None:
            c = cache[v] = (
                -1
                if v is None or v == "" or v == "auto"
                else PRECISIONS.index(canonical_precision(v))
            )
        out[i] = c
    return out


def expert_precision_of(model: ModelSpec, given: str | None = None) -> str:
    """The routed experts' precision when it is not the weights': ``given``; blank (None/''),
    the published checkpoint's where only its experts are quantized
    (``ModelSpec.checkpoint_expert_precision``, gpt-oss: mxfp4); '' when they are at the
    weight precision. The one rule a blank row follows (``CandidateArrays.from_tables``); a
    caller wanting a checkpoint-quantized model's experts at the weight precision names it."""
    return given or model.checkpoint_expert_precision


def _expert_codes(
    models: Sequence[ModelSpec], model_index: np.ndarray, w_code: np.ndarray, e_code: Any
) -> np.ndarray:
    """Per row, the routed experts' precision code: the given one; where it is -1 (blank),
    ``expert_precision_of(model)`` (the published checkpoint's), else the weights' own."""
    n = len(w_code)
    given = np.broadcast_to(np.asarray(e_code, dtype=np.int64), (n,))
    published = precision_codes([expert_precision_of(m) for m in models], len(models))
    e = np.where(given < 0, published[model_index], given)
    return np.where(e < 0, w_code, e)


def _length(*values: Any) -> int:
    n = 1
    for v in values:
        if isinstance(v, (str, ModelSpec, GpuSpec, EngineSettings, Calibration)) or v is None:
            continue
        if np.ndim(v) > 0:
            n = max(n, len(v))
    return n


#: Attribute of a scalar row (``CandidateArrays.scalar_row``) holding ``row_constant`` values.
ROW_MEMO = "_row_constants"


def row_constant(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute ``fn(c, *flags)``, a value of the candidate row alone, once per scalar row.

    The step-time memo calls the core ~1,000 times per candidate row with the same scalar
    row and new step inputs; the row's own terms (streamed weight bytes, attention FLOPs per
    cached token, ...) cost ~1-5 us each per call. A scalar row's numpy scalars are
    immutable, so their value is kept on the row; array rows (whose arrays a caller may
    change in place) compute it every time. Same function, same numbers: only when it runs.
    ``flags`` are positional and hashable (a keyword argument is refused, never mis-keyed).
    """

    @functools.wraps(fn)
    def cached(c: CandidateArrays, *flags: Any) -> Any:
        memo = getattr(c, ROW_MEMO, None)
        if memo is None:
            return fn(c, *flags)
        key = (cached, flags)  # the module's own name for it: a row pickles by reference
        value = memo.get(key)
        if value is None:
            value = memo[key] = fn(c, *flags)
        return value

    return cached


@dataclass(frozen=True)
class CandidateArrays:
    """Per-row arrays of everything the sizing chain reads (see the module docstring).

    Units: params are counts; ``*_bytes`` bytes; ``*_bytes_s`` bytes/s; ``peak_flops`` FLOP/s;
    ``*_s`` seconds; ``weight_bytes_per_param`` and ``kv_bytes_per_element`` B/element.
    ``models``/``gpus`` are the unique specs; ``model_index``/``gpu_index`` point into them.
    """

    models: tuple[ModelSpec, ...]
    gpus: tuple[GpuSpec, ...]
    model_index: np.ndarray
    gpu_index: np.ndarray
    weight_precision_code: np.ndarray  # index into precision.PRECISIONS
    kv_precision_code: np.ndarray
    # model
    num_layers: np.ndarray
    hidden_size: np.ndarray
    num_attention_heads: np.ndarray
    num_kv_heads: np.ndarray
    head_dim: np.ndarray
    vocab_size: np.ndarray
    total_params: np.ndarray
    active_params: np.ndarray
    embedding_params: np.ndarray
    tied_embeddings: np.ndarray
    kv_lora_rank: np.ndarray
    qk_rope_head_dim: np.ndarray
    full_layers: np.ndarray
    sliding_layers: np.ndarray
    sliding_window: np.ndarray
    linear_layers: np.ndarray
    linear_state_elements: np.ndarray
    num_experts: np.ndarray
    experts_per_token: np.ndarray
    shared_experts: np.ndarray
    params_per_expert: np.ndarray
    num_moe_layers: np.ndarray
    max_context: np.ndarray
    vision_params: np.ndarray
    vision_merge: np.ndarray
    # gpu
    memory_bytes: np.ndarray
    hbm_bytes_s: np.ndarray
    link_bytes_s: np.ndarray
    scale_out_bytes_s: np.ndarray
    gpus_per_node: np.ndarray
    scale_up_domain_gpus: np.ndarray
    usd_per_gpu_hour: np.ndarray
    # precision
    weight_bytes_per_param: np.ndarray
    #: routed experts' bytes per param: their own precision when the checkpoint mixes them
    #: (gpt-oss MXFP4 experts with bf16 attention, Kimi K2 int4 experts; a blank row reads the
    #: published checkpoint's, ``expert_precision_of``), else the weights'
    expert_bytes_per_param: np.ndarray
    expert_precision_code: np.ndarray
    #: input embedding and LM head bytes per param: their own precision when given, else
    #: ``max(b_w, 2)`` (quantized checkpoints keep them in bf16)
    embedding_bytes_per_param: np.ndarray
    embedding_precision_code: np.ndarray  # -1: the max(b_w, 2) default
    kv_bytes_per_element: np.ndarray
    peak_flops: np.ndarray
    #: dense peak the routed experts' GEMMs run at: their own precision's (fp4 experts on a
    #: B200 run fp4 GEMMs while bf16 attention runs bf16 ones), else ``peak_flops``
    expert_peak_flops: np.ndarray
    #: dense peak attention runs at: the KV cache's precision's (fp8 or bf16, never fp4)
    attention_peak_flops: np.ndarray
    #: the vision encoder's peak: bf16 (engines leave the vision tower unquantized)
    vision_peak_flops: np.ndarray
    # parallelism
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    dp: np.ndarray
    # engine
    gpu_memory_utilization: np.ndarray
    max_num_batched_tokens: np.ndarray
    max_num_seqs: np.ndarray
    block_size: np.ndarray
    runtime_overhead_bytes: np.ndarray
    workspace_bytes_per_token_hidden: np.ndarray
    max_model_len: np.ndarray  # 0: the model's max_context
    #: decode steps between the scheduler's polls for new requests (1: every step)
    scheduler_recv_interval: np.ndarray
    #: 1 where gpu_memory_utilization is a share of the memory left once the model is loaded
    #: (TensorRT-LLM's free_gpu_memory_fraction), 0 where it is a share of all HBM (vLLM's
    #: gpu_memory_utilization, SGLang's mem_fraction_static); see memory.usable_bytes_per_gpu
    kv_share_of_free: np.ndarray
    #: 1 where the engine admits a sequence only if the KV for its whole output is free
    #: (TensorRT-LLM's default capacity scheduler, GUARANTEED_NO_EVICT: it reserves prompt +
    #: max output tokens up front and never preempts), 0 where it admits on the tokens
    #: written so far and preempts under pressure (vLLM, SGLang); see
    #: operating.admitted_context_tokens
    kv_reserves_output: np.ndarray
    # speculative decoding (sizing.speculative): k drafted (0: off), tokens per verify step,
    # the draft's params / active params / layers (0: a head) / KV elements per token
    spec_tokens: np.ndarray
    spec_tokens_per_step: np.ndarray
    spec_acceptance: np.ndarray
    spec_draft_params: np.ndarray
    spec_draft_active_params: np.ndarray
    spec_draft_layers: np.ndarray
    spec_draft_kv_elements_per_token: np.ndarray
    # LoRA (sizing.lora): adapters, rank (0: off), distinct per batch, resident slots, modules
    lora_adapters: np.ndarray
    lora_rank: np.ndarray
    lora_active: np.ndarray
    lora_resident_slots: np.ndarray
    lora_module_mask: np.ndarray
    # prefix cache (tokens of the shared prefix, share of requests that hit it); zero unless
    # ``with_prefix`` sets them (the plan from the traffic, predict from its columns)
    prefix_tokens: np.ndarray
    prefix_hit_rate: np.ndarray
    # vision-language input (sizing.vision.with_images): image tokens per request and the
    # encoder's FLOPs per prefilled token; zero without images
    image_tokens: np.ndarray
    vision_flops_per_prefill_token: np.ndarray
    # calibration
    eta_mem: np.ndarray
    eta_flop_decode: np.ndarray
    eta_flop_prefill: np.ndarray
    step_overhead_s: np.ndarray
    allreduce_latency_s: np.ndarray
    link_efficiency: np.ndarray
    step_overhead_per_layer_s: np.ndarray
    step_overhead_per_seq_s: np.ndarray
    step_overhead_per_moe_layer_s: np.ndarray
    prompt_overhead_per_moe_layer_s: np.ndarray
    frontend_latency_s: np.ndarray
    prefill_wave_fraction: np.ndarray
    first_token_decode_steps: np.ndarray

    def __len__(self) -> int:
        return int(np.size(self.tp))  # 1 for a ``scalar_row``

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        models: ModelSpec | Sequence[ModelSpec],
        gpus: GpuSpec | Sequence[GpuSpec],
        weight_precision: str | Sequence[str],
        kv_precision: str | Sequence[str | None] | None = None,
        tp: int | Sequence[int] = 1,
        pp: int | Sequence[int] = 1,
        ep: int | Sequence[int] = 1,
        dp: int | Sequence[int] = 1,
        engine: EngineSettings | Sequence[EngineSettings] | None = None,
        calibration: Calibration | Sequence[Calibration] | None = None,
        usd_per_gpu_hour: float | Sequence[float] | None = None,
        expert_precision: str | Sequence[str | None] | None = None,
        embedding_precision: str | Sequence[str | None] | None = None,
    ) -> CandidateArrays:
        """Rows from specs; each argument is one value (broadcast) or a sequence of n values.

        ``kv_precision`` None/''/'auto' picks ``precision.default_kv_precision``;
        ``expert_precision`` None/'' reads the routed experts as published: the checkpoint's
        own precision where only they are quantized (``expert_precision_of``; gpt-oss: mxfp4),
        else ``weight_precision`` (name it to have a checkpoint's experts at the weights');
        ``embedding_precision`` None/'' keeps the embedding and LM head at ``max(b_w, 2)``.
        ``usd_per_gpu_hour`` overrides ``GpuSpec.usd_per_gpu_hour`` when given.
        """
        n = _length(
            models,
            gpus,
            weight_precision,
            kv_precision,
            tp,
            pp,
            ep,
            dp,
            engine,
            calibration,
            usd_per_gpu_hour,
        )
        m_uniq, m_idx = _factorize_objects(models, n, ModelSpec)
        g_uniq, g_idx = _factorize_objects(gpus, n, GpuSpec)
        e_uniq, e_idx = _factorize_objects(engine or EngineSettings(), n, EngineSettings)
        c_uniq, c_idx = _factorize_objects(calibration or Calibration(), n, Calibration)
        w_code = precision_codes(weight_precision, n)
        kv_code = precision_codes(kv_precision if kv_precision is not None else [None] * n, n)
        e_code = precision_codes(expert_precision if expert_precision is not None else [None] * n,
                                 n)  # fmt: skip
        emb_code = precision_codes(
            embedding_precision if embedding_precision is not None else [None] * n, n
        )
        return cls.from_tables(
            m_uniq,
            g_uniq,
            m_idx,
            g_idx,
            w_code,
            kv_code,
            tp,
            pp,
            ep,
            dp,
            e_uniq,
            e_idx,
            c_uniq,
            c_idx,
            usd_per_gpu_hour,
            e_code,
            emb_code,
        )

    @classmethod
    def from_tables(
        cls,
        models: Sequence[ModelSpec],
        gpus: Sequence[GpuSpec],
        model_index: np.ndarray,
        gpu_index: np.ndarray,
        weight_precision_code: np.ndarray,
        kv_precision_code: np.ndarray,
        tp: Any = 1,
        pp: Any = 1,
        ep: Any = 1,
        dp: Any = 1,
        engines: Sequence[EngineSettings] = (EngineSettings(),),
        engine_index: Any = 0,
        calibrations: Sequence[Calibration] = (Calibration(),),
        calibration_index: Any = 0,
        usd_per_gpu_hour: Any = None,
        expert_precision_code: Any = -1,
        embedding_precision_code: Any = -1,
    ) -> CandidateArrays:
        """Fast path: unique spec tables plus integer index arrays (what the bench and
        ``predict_rows`` use). ``kv_precision_code`` -1 means the default for the weights;
        ``expert_precision_code`` -1 the experts as published (``expert_precision_of``: the
        checkpoint's own precision where only they are quantized, else the weights');
        ``embedding_precision_code`` -1 ``max(b_w, 2)``."""
        model_index = np.asarray(model_index, dtype=np.int64)
        gpu_index = np.asarray(gpu_index, dtype=np.int64)
        n = max(len(model_index), len(gpu_index), np.size(weight_precision_code))
        model_index = np.broadcast_to(model_index, (n,))
        gpu_index = np.broadcast_to(gpu_index, (n,))
        w_code = np.broadcast_to(np.asarray(weight_precision_code, dtype=np.int64), (n,))
        kv_code = np.broadcast_to(np.asarray(kv_precision_code, dtype=np.int64), (n,)).copy()
        default_kv = np.array([PRECISIONS.index(default_kv_precision(p)) for p in PRECISIONS])
        kv_code = np.where(kv_code < 0, default_kv[w_code], kv_code)

        cols: dict[str, Any] = {}
        for name, arr in _table(models, _MODEL_FIELDS).items():
            cols[name] = arr[model_index]
        for name, arr in _table(gpus, _GPU_FIELDS).items():
            cols[name] = arr[gpu_index]
        e_idx = np.broadcast_to(np.asarray(engine_index, dtype=np.int64), (n,))
        for name, arr in _table(engines, _ENGINE_FIELDS).items():
            cols[name] = arr[e_idx]
        c_idx = np.broadcast_to(np.asarray(calibration_index, dtype=np.int64), (n,))
        for name, arr in _table(calibrations, _CALIBRATION_FIELDS).items():
            cols[name] = arr[c_idx]
        if usd_per_gpu_hour is not None:
            price = np.asarray(usd_per_gpu_hour, dtype=np.float64)
            cols["usd_per_gpu_hour"] = np.broadcast_to(price, (n,)).astype(np.float64)

        w_bytes = np.array([weight_bytes_per_param(p) for p in PRECISIONS])
        kv_bytes = np.array([kv_bytes_per_element(p) for p in PRECISIONS])
        peaks = np.array([[peak_flops(g, p) for p in PRECISIONS] for g in gpus])
        cols["weight_bytes_per_param"] = w_bytes[w_code]
        e_code = _expert_codes(models, model_index, w_code, expert_precision_code)
        cols["expert_precision_code"] = e_code
        cols["expert_bytes_per_param"] = w_bytes[e_code]
        emb_code = np.broadcast_to(np.asarray(embedding_precision_code, dtype=np.int64), (n,))
        cols["embedding_precision_code"] = emb_code.copy()
        cols["embedding_bytes_per_param"] = np.where(
            emb_code < 0, np.maximum(w_bytes[w_code], 2.0), w_bytes[np.maximum(emb_code, 0)]
        )
        cols["kv_bytes_per_element"] = kv_bytes[kv_code]
        cols["peak_flops"] = peaks[gpu_index, w_code]
        cols["expert_peak_flops"] = peaks[gpu_index, e_code]
        cols["vision_peak_flops"] = peaks[gpu_index, PRECISIONS.index("bf16")]
        attn = np.array([[attention_peak_flops(g, p) for p in PRECISIONS] for g in gpus])
        attn = attn[gpu_index, kv_code]
        cols["attention_peak_flops"] = np.where(attn > 0, attn, cols["peak_flops"])
        for name, v in (("tp", tp), ("pp", pp), ("ep", ep), ("dp", dp)):
            cols[name] = np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)).copy()
        cols["prefix_tokens"] = np.zeros(n)
        cols["prefix_hit_rate"] = np.zeros(n)
        cols["image_tokens"] = np.zeros(n)
        cols["vision_flops_per_prefill_token"] = np.zeros(n)
        return cls(
            models=tuple(models),
            gpus=tuple(gpus),
            model_index=np.ascontiguousarray(model_index),
            gpu_index=np.ascontiguousarray(gpu_index),
            weight_precision_code=np.ascontiguousarray(w_code),
            kv_precision_code=kv_code,
            **cols,
        )

    # ------------------------------------------------------------------ helpers
    def take(self, rows: np.ndarray) -> CandidateArrays:
        """Rows ``rows`` (an index array, repeats allowed): expand candidates over a grid."""
        changes = {
            f.name: getattr(self, f.name)[rows]
            for f in dataclasses.fields(self)
            if f.name not in ("models", "gpus")
        }
        return dataclasses.replace(self, **changes)

    def scalar_row(self) -> CandidateArrays:
        """Row 0 with every per-row array as a numpy scalar of the same value and dtype.

        The core functions give the same numbers (numpy scalars and one-element arrays do
        the same float arithmetic), but each operation on the row's own values costs ~0.1 us
        instead of ~1 us; the step-time memo calls the core per grid cell, where those
        operations are most of the call."""
        changes = {
            f.name: getattr(self, f.name)[0]
            for f in dataclasses.fields(self)
            if f.name not in ("models", "gpus")
        }
        row = dataclasses.replace(self, **changes)
        # numpy scalars cannot change: a value of the row alone holds for the row's lifetime
        object.__setattr__(row, ROW_MEMO, {})
        return row

    def with_prefix(self, prefix_tokens: Any, prefix_hit_rate: Any) -> CandidateArrays:
        """The rows with a shared prompt prefix of ``prefix_tokens`` that a share
        ``prefix_hit_rate`` of requests finds cached (scalars or one value per row)."""
        n = len(self)
        tokens = np.broadcast_to(np.asarray(prefix_tokens, dtype=np.float64), (n,)).copy()
        hit = np.broadcast_to(np.asarray(prefix_hit_rate, dtype=np.float64), (n,)).copy()
        return dataclasses.replace(self, prefix_tokens=tokens, prefix_hit_rate=hit)

    def model_name(self, i: int) -> str:
        return self.models[self.model_index[i]].name

    def gpu_name(self, i: int) -> str:
        return self.gpus[self.gpu_index[i]].name

    def weight_precision(self, i: int) -> str:
        return PRECISIONS[self.weight_precision_code[i]]

    def expert_precision(self, i: int) -> str:
        return PRECISIONS[self.expert_precision_code[i]]

    def kv_precision(self, i: int) -> str:
        return PRECISIONS[self.kv_precision_code[i]]

    def embedding_precision(self, i: int) -> str:
        """'' when the embedding follows the default ``max(b_w, 2)`` rule."""
        code = int(self.embedding_precision_code[i])
        return PRECISIONS[code] if code >= 0 else ""

    def mixed_precision(self, i: int) -> bool:
        """Experts or embeddings at a precision of their own on row ``i``."""
        return bool(
            self.expert_precision_code[i] != self.weight_precision_code[i]
            or self.embedding_precision_code[i] >= 0
        )

    def compute_precision(self, i: int) -> str:
        return compute_precision(self.gpus[self.gpu_index[i]], self.weight_precision(i))

    def expert_compute_precision(self, i: int) -> str:
        return compute_precision(self.gpus[self.gpu_index[i]], self.expert_precision(i))

    def attention_compute_precision(self, i: int) -> str:
        return attention_compute_precision(self.gpus[self.gpu_index[i]], self.kv_precision(i))

    @property
    def gpus_per_instance(self) -> np.ndarray:
        """GPUs of one serving instance (a replica): tp * pp * dp."""
        return self.tp * self.pp * self.dp
