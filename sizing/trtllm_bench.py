"""The batch limits ``trtllm-bench throughput`` runs with, for measurements it made.

TensorRT-LLM's perf-overview tables (offline max throughput, every request queued at once)
were made with ``trtllm-bench throughput``. Given no ``--max_batch_size`` and
``--max_num_tokens``, it picks both from the dataset's mean lengths by a heuristic
(``tensorrt_llm/bench/build/tuning.py``: ``calc_engine_setting`` and ``finetune_setting``;
``tensorrt_llm/bench/benchmark/utils/general.py``: ``get_settings``), not the engine's
serving defaults. Predicting those rows at a serving default (1,024 sequences, 8,192 tokens)
caps a TP8 instance at a quarter of the batch it ran, and splits a 20,000-token prompt into
chunks the benchmark never made.

The heuristic, in its own terms (GiB = 2^30 B):

``cache_GiB = (n_gpus * HBM_GiB - P * b_w / 2^30) * 0.95``
``kv_GiB_per_token = 2 * L * max(TP, n_kv) * d_head * b_kv / 2^30``
``requests = cache_GiB / (kv_GiB_per_token * (isl + osl))``
``raw_bs = min(requests, 4096) / PP``;  ``raw_tokens = min(raw_bs * (1 + isl / osl), 32768)``

``max_batch_size``: ``max(64, 32 * ceil(raw_bs / 32))`` below 256, ``128 * ceil(raw_bs / 128)``
below 1,024, else ``256 * ceil(raw_bs / 256)``. ``max_num_tokens``: ``max(2048, 256 *
ceil(raw_tokens / 256))`` below 4,096, ``512 * ceil(.. / 512)`` below 8,192, else ``1024 *
ceil(.. / 1024)``. Chunked prefill is off by default, so a whole prompt must fit one step:
``max_num_tokens = max(max_num_tokens, isl + max_batch_size)``.

Worked: Llama 3.3 70B fp4 (70.55e9 params, 80 layers, 8 KV heads of 128, fp8 cache) on one
B200 (192,265,846,784 B = 179.06 GiB) at 128/128: engine ``70.55e9 * 0.5 / 2^30 = 32.85`` GiB;
cache ``(179.06 - 32.85) * 0.95 = 138.90`` GiB; ``2 * 80 * 8 * 128 * 1 / 2^30 = 1.526e-4`` GiB
per token; ``138.90 / (1.526e-4 * 256) = 3,556`` requests -> batch ``256 * 14 = 3,584``,
tokens ``min(3,556 * 2, 32768) = 7,112`` -> ``512 * 14 = 7,168`` (>= 128 + 3,584).

b_w and b_kv are the bare element sizes the tool uses (NVFP4 0.5, fp8 1, bf16 2), without block
scales, and 2 for a quantisation it does not list (gpt-oss's MXFP4: the whole checkpoint is
counted at 2 B/param); an MLA model is counted as its config's KV heads, as the tool does.
Where that leaves no cache (gpt-oss-120b on one H200) the tool refuses to pick limits, so
the run was given its own, which the source does not publish.
"""

from __future__ import annotations

import math

from sizing.specs import GpuSpec, ModelSpec, canonical_precision

GIB = float(1 << 30)
KV_CACHE_FRACTION = 0.95  # calc_engine_setting's default kv_cache_gpu_mem_fraction
MAX_BATCH = 4096  # "cap total batch size to avoid decoder buffer size becoming too large"
MAX_TOKENS = 32768  # "cap num tokens to avoid TRT activation buffer becoming too large"
#: tuning.py's ``BYTES_PER_ELEM`` (NO_QUANT 2, FP8 and FP8_BLOCK_SCALES 1, NVFP4 0.5); any
#: other quantisation (MXFP4, int4, int8) reads its default, 2
TOOL_BYTES_PER_ELEMENT = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def kv_max_requests(
    model: ModelSpec,
    gpu: GpuSpec,
    num_gpus: int,
    tp: int,
    weight_precision: str,
    kv_precision: str,
    isl: float,
    osl: float,
) -> float:
    """Requests of ``isl + osl`` tokens the tool expects the KV cache to hold (see module);
    ``kv_precision`` already resolved (the caller applies the engine's default)."""
    b_w = TOOL_BYTES_PER_ELEMENT.get(canonical_precision(weight_precision), 2.0)
    b_kv = TOOL_BYTES_PER_ELEMENT.get(canonical_precision(kv_precision), 2.0)
    kv_gib_per_token = 2 * model.num_layers * max(tp, model.num_kv_heads) * model.head_dim
    kv_gib_per_token *= b_kv / GIB
    engine_gib = model.total_params * b_w / GIB
    cache_gib = (num_gpus * gpu.memory_gb * 1e9 / GIB - engine_gib) * KV_CACHE_FRACTION
    return cache_gib / (kv_gib_per_token * (isl + osl))


#: ``finetune_setting``'s optimistic rounding: (below this value, round up to a multiple of
#: this step), the last row for everything above
BATCH_STEPS = ((256, 32), (1024, 128), (math.inf, 256))
TOKEN_STEPS = ((4096, 256), (8192, 512), (math.inf, 1024))
MIN_BATCH, MIN_TOKENS = 64, 2048


def _round_up(value: float, steps: tuple[tuple[float, int], ...], floor: int) -> int:
    """``value`` rounded up to the step of the first row it is below, at least ``floor``."""
    step = next(step for below, step in steps if value < below)
    return max(floor, step * math.ceil(value / step))


def bench_limits(requests: float, isl: float, osl: float, pp: int) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` from the expected requests (``finetune_setting``
    with its optimistic rounding, then whole prompts per step since chunking is off)."""
    raw_bs = min(requests, MAX_BATCH) / pp
    raw_tokens = min(raw_bs * (1.0 + isl / osl), MAX_TOKENS)
    batch = _round_up(raw_bs, BATCH_STEPS, MIN_BATCH)
    tokens = _round_up(raw_tokens, TOKEN_STEPS, MIN_TOKENS)
    return batch, max(tokens, math.ceil(isl) + batch)
