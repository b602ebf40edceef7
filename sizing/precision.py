"""Precision rules: bytes per stored element and which tensor-core peak a format computes at.

Weights
-------
``weight_bytes_per_param(p) = BYTES_PER_ELEMENT[p] + WEIGHT_SCALE_OVERHEAD.get(p, 0)`` (B/param):
bf16 2, fp8 1, int4 0.5 + 4/128 = 0.53125, fp4 (NVFP4) 0.5 + 1/16 = 0.5625, mxfp4 0.5 + 1/32
= 0.53125.

Compute peak
------------
fp8 weights run fp8 GEMMs; fp4 runs fp4 if the GPU has it, else fp8, else bf16; int4 is
weight-only (w4a16), dequantized into bf16 GEMMs; int8 uses int8 if present, else bf16; fp32
runs at half the bf16 peak (tf32). A GPU with no peak for any of these gets NaN (no estimate).

Attention (QK^T and PV) computes at its KV cache's precision, not the weights': an fp8 cache
runs fp8 attention kernels (TensorRT-LLM's FP8 context FMHA and XQA, FlashAttention-3 FP8),
a 4-bit cache is dequantized into fp8 ones, any other cache attends in bf16; no engine runs
fp4 attention, so NVFP4 weights on a B200 run 9 PFLOP/s GEMMs beside 4.5 PFLOP/s attention
(``attention_peak_flops``).

mxfp4 (gpt-oss's experts) runs against MXFP8 activations at the fp8 peak on a GPU with
block-scaled fp4 tensor cores (those with an fp4 peak), else weight-only at the bf16 peak:
TensorRT-LLM's GPT-OSS deployment guide, MoE backend matrix: B200/GB200/B300/GB300 MXFP8
activations x MXFP4 weights (TRTLLM backend), H200 BF16 activations x MXFP4 weights (TRITON).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sizing.specs import (
    BYTES_PER_ELEMENT,
    WEIGHT_SCALE_OVERHEAD,
    GpuSpec,
    canonical_precision,
)

#: Canonical precisions in a fixed order; arrays carry the index into this tuple.
PRECISIONS: tuple[str, ...] = tuple(BYTES_PER_ELEMENT)

#: Which dense peak a weight format computes at, widest last.
COMPUTE_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
    "mxfp4": ("fp8", "bf16", "fp16"),  # W4A8 (MXFP8 activations); see compute_precision
    "fp8": ("fp8", "bf16", "fp16"),
    "int8": ("int8", "bf16", "fp16"),
    "int4": ("bf16", "fp16"),
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "fp32": ("fp32",),
}


def dense_peaks(gpu: GpuSpec) -> dict[str, float]:
    """The datasheet's dense peaks by lower-case precision name (TFLOP/s), zeros left out."""
    return {k.lower(): v for k, v in gpu.dense_tflops.items() if v and v > 0}


#: Which dense peak attention (QK^T and PV) computes at, by KV-cache precision: an fp8 cache
#: runs fp8 attention kernels, a 4-bit cache is dequantized into fp8 ones, anything else
#: attends in bf16. Attention never runs fp4 GEMMs, whatever the weights are stored at.
ATTENTION_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp8": ("fp8", "bf16", "fp16"),
    "fp4": ("fp8", "bf16", "fp16"),
    "mxfp4": ("fp8", "bf16", "fp16"),
}


def attention_compute_precision(gpu: GpuSpec, kv_precision: str) -> str:
    """Name of the peak attention over a ``kv_precision`` cache runs at on ``gpu``."""
    p = canonical_precision(kv_precision)
    peaks = dense_peaks(gpu)
    for name in ATTENTION_FALLBACK.get(p, ("bf16", "fp16")):
        if name in peaks:
            return name
    return ""


def attention_peak_flops(gpu: GpuSpec, kv_precision: str) -> float:
    """Dense peak FLOP/s attention over a ``kv_precision`` cache runs at (NaN if none)."""
    name = attention_compute_precision(gpu, kv_precision)
    peaks = dense_peaks(gpu)
    return peaks[name] * 1e12 if name else math.nan


def weight_bytes_per_param(precision: str) -> float:
    """Stored bytes per weight, block-scale overhead included (B/param)."""
    p = canonical_precision(precision)
    return BYTES_PER_ELEMENT[p] + WEIGHT_SCALE_OVERHEAD.get(p, 0.0)


def kv_bytes_per_element(precision: str) -> float:
    """Stored bytes per KV-cache element; a 4-bit cache carries its block scales too (B)."""
    return weight_bytes_per_param(precision)


def default_kv_precision(weight_precision: str) -> str:
    """bf16 cache, except fp8/fp4 checkpoints, which engines serve with an fp8 cache."""
    p = canonical_precision(weight_precision)
    return "fp8" if p in ("fp8", "fp4") else "bf16"


def compute_precision(gpu: GpuSpec, weight_precision: str) -> str:
    """Name of the peak the GEMMs of ``weight_precision`` weights run at on ``gpu`` ('' if none)."""
    p = canonical_precision(weight_precision)
    peaks = dense_peaks(gpu)
    chain = COMPUTE_FALLBACK[p]
    if p == "mxfp4" and "fp4" not in peaks:
        chain = COMPUTE_FALLBACK["int4"]  # no block-scaled MMA: dequantized, like w4a16
    for name in chain:
        if name in peaks:
            return name
    if p == "fp32" and ("bf16" in peaks or "fp16" in peaks):
        return "tf32"
    return ""


def peak_flops(gpu: GpuSpec, weight_precision: str) -> float:
    """Dense peak FLOP/s for the compute precision of ``weight_precision`` (NaN if unknown).

    ``F = dense_tflops[compute_precision] * 1e12``; tf32 is taken as half the bf16 peak.
    """
    name = compute_precision(gpu, weight_precision)
    peaks = dense_peaks(gpu)
    if name == "":
        return math.nan
    if name == "tf32":
        return 0.5 * peaks.get("bf16", peaks.get("fp16", math.nan)) * 1e12
    return peaks[name] * 1e12


#: quantization_config methods that quantize the routed experts only (the modules left out
#: name the attention), with the precision they store the experts at
_EXPERT_ONLY_METHODS = {"mxfp4": "mxfp4"}


def checkpoint_from_hf_config(cfg: Mapping) -> dict:
    """``ModelSpec.checkpoint_expert_precision`` from a config.json (``{}`` when the checkpoint
    is stored at one precision or the config does not say).

    gpt-oss: ``{"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
    ..., "lm_head"]}`` -> ``{"checkpoint_expert_precision": "mxfp4"}``.
    """
    quant = cfg.get("quantization_config") if isinstance(cfg, Mapping) else None
    if not isinstance(quant, Mapping):
        return {}
    expert = _EXPERT_ONLY_METHODS.get(str(quant.get("quant_method", "")).lower())
    kept = quant.get("modules_to_not_convert") or ()
    if expert and any("self_attn" in str(module) for module in kept):
        return {"checkpoint_expert_precision": expert}
    return {}
