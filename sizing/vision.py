"""Vision-language input: image tokens join the prompt, the vision encoder joins the prefill.

Tokens per image
----------------
A ViT cuts each ``tile_px x tile_px`` tile of an image into ``ceil(tile_px / patch)^2``
patches; a merger folds ``merge`` neighbouring patches into one language-model token
(Qwen2-VL and Qwen3.5: ``spatial_merge_size`` 2, i.e. 2x2 = 4; Kimi K2.5: ``merge_kernel_size``
[2, 2]; Gemma: a 3x3 ``pooling_kernel_size`` = 9)::

    tokens_per_image = tiles * ceil(tile_px / patch)^2 / merge

A config that states a fixed count (Gemma's ``vision_soft_tokens_per_image``: 280) is used as
it is, and a scenario may give the count directly. Qwen2-VL's own example: a 224 x 224 image
with 14-px patches and a 2x2 merge is 256 / 4 = 64 tokens ("66 tokens" with the two
vision-boundary tokens; Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191, section 2.1).
The default tile is 448 px (InternVL 1.5's tile, Chen et al. 2024, arXiv:2404.16821).

Prompt
------
``isl' = isl + images * tokens_per_image`` (``fold_images``): prefill, KV and TTFT all see
the image tokens, through the same chain as text.

Encoder FLOPs
-------------
A forward pass costs about 2 FLOPs per parameter per input token (Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", arXiv:2001.08361, ``C_forward ~ 2N``); the encoder
runs on the patches, before the merge::

    flops_per_image = 2 * P_v * tokens_per_image * merge

Spread over the prefilled tokens (the encoder runs once per prompt, before its first chunk):
``vision_flops_per_prefill_token = 2 * P_v * merge * image_tokens / isl'``, timed at the bf16
peak (engines leave the vision tower unquantized) and sharded like the language model. The
ViT's own attention (``4 * patches * d`` per patch per layer: about 15 % more at 1,024
patches of width 1,152) is left out, as in the 2N rule.

Memory: a model serving images holds its encoder, ``P_v * 2`` B (bf16) split like the
dense weights (``memory.vision_weight_bytes``); decode steps do not stream it.

Encoder size from a Hugging Face ``vision_config`` (biases and norms left out)::

    P_v = layers * (4 d^2 + 2 d * ffn) + 3 * t * patch^2 * d + (merge d)^2 + merge d * d_text

(attention Q, K, V, O and a two-matrix MLP per layer; the patch embedding over 3 channels and
``t`` frames; the merger's two projections; a pooling merger, Gemma's, has only the
``d * d_text`` projection). The SigLIP-so400m-shaped towers of Qwen3.5,
Kimi K2.5 and Gemma 4 (27 layers, d 1,152, ffn 4,304) come to 0.41e9 before the merger.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.derivation import Step, q, step
from sizing.specs import ModelSpec, Traffic

#: InternVL 1.5's tile side (arXiv:2404.16821): the default when a scenario gives no tile
DEFAULT_TILE_PX = 448
MAX_IMAGES = 1000
MAX_TOKENS_PER_IMAGE = 100_000


class VisionError(ValueError):
    """Images asked of a model that cannot say how many tokens an image is."""


def _first(cfg: Mapping, *names, default=0):
    for name in names:
        value = cfg.get(name)
        if value not in (None, "", []):
            return value
    return default


def vision_from_hf_config(cfg: Mapping) -> dict:
    """``ModelSpec`` vision fields from a config.json with a ``vision_config`` (``{}`` if none
    or if it cannot be read): ``vision_params``, ``vision_patch_size``, ``vision_merge``,
    ``vision_tokens_per_image``."""
    vc = cfg.get("vision_config") if isinstance(cfg, Mapping) else None
    if not isinstance(vc, Mapping):
        return {}
    try:
        return _vision_fields(cfg, vc)
    except (TypeError, ValueError, OverflowError):  # an imported config of another shape
        return {}


def _vision_fields(cfg: Mapping, vc: Mapping) -> dict:
    d = float(_first(vc, "hidden_size", "vt_hidden_size", "embed_dim"))
    ffn = float(_first(vc, "intermediate_size", "vt_intermediate_size", default=4 * d))
    layers = float(_first(vc, "num_hidden_layers", "depth", "vt_num_hidden_layers"))
    patch = int(_first(vc, "patch_size"))
    if not (d > 0 and layers > 0 and patch > 0):
        return {}
    concat = True  # a patch merger concatenates neighbours; pooling averages them (no params)
    if "spatial_merge_size" in vc:
        merge = int(vc["spatial_merge_size"]) ** 2
    elif isinstance(vc.get("merge_kernel_size"), list | tuple):
        merge = math.prod(int(k) for k in vc["merge_kernel_size"])
    elif "pooling_kernel_size" in vc:
        merge, concat = int(vc["pooling_kernel_size"]) ** 2, False
    else:
        merge = 1
    if merge < 1:
        return {}
    width = merge * d if concat else d  # the merger's input width
    frames = float(_first(vc, "temporal_patch_size", default=1))
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), Mapping) else cfg
    d_text = float(_first(vc, "out_hidden_size", "text_hidden_size") or text.get("hidden_size", d))
    params = (
        layers * (4 * d * d + 2 * d * ffn)
        + 3 * frames * patch * patch * d
        + width * width * (width > d)
        + width * d_text
    )
    fixed = int(_first(cfg, "vision_soft_tokens_per_image", "mm_tokens_per_image"))
    if not (math.isfinite(params) and params > 0 and fixed >= 0):
        return {}
    return {
        "vision_params": float(params),
        "vision_patch_size": patch,
        "vision_merge": max(merge, 1),
        "vision_tokens_per_image": fixed,
    }


def derived_tokens_per_image(model: ModelSpec, tiles: float, tile_px: float) -> float:
    """``tiles * ceil(tile_px / patch)^2 / merge`` from the model's vision config, or its fixed
    count (NaN when the model has no vision config)."""
    if model.vision_tokens_per_image > 0:
        return float(model.vision_tokens_per_image)
    if model.vision_patch_size <= 0:
        return math.nan
    side = math.ceil(tile_px / model.vision_patch_size)
    return float(tiles * side * side / max(model.vision_merge, 1))


def tokens_per_image(model: ModelSpec, traffic: Traffic) -> float:
    """The traffic's ``tokens_per_image`` when given, else derived from the model's config;
    raises ``VisionError`` when neither says."""
    if traffic.tokens_per_image > 0:
        return float(traffic.tokens_per_image)
    tokens = derived_tokens_per_image(model, traffic.image_tiles, traffic.tile_px)
    if not tokens > 0:
        raise VisionError(
            f"{model.name} has no vision config: give tokens_per_image for its images"
        )
    return tokens


def fold_images(traffic: Traffic, tokens: float) -> Traffic:
    """The traffic with ``images * tokens`` image tokens added to the prompt (mean and p95);
    unchanged without images or when already folded (``image_tokens`` > 0)."""
    if traffic.images_per_request <= 0 or traffic.image_tokens > 0:
        return traffic
    image = float(traffic.images_per_request * tokens)
    p95 = traffic.prompt_tokens_p95
    return dataclasses.replace(
        traffic,
        prompt_tokens_mean=traffic.prompt_tokens_mean + image,
        prompt_tokens_p95=p95 + image if p95 else p95,
        image_tokens=image,
    )


def with_images(c: CandidateArrays, image_tokens, prompt_tokens) -> CandidateArrays:
    """Rows whose prompts carry ``image_tokens`` of ``prompt_tokens`` (scalars or per row):
    ``vision_flops_per_prefill_token = 2 * P_v * merge * image_tokens / prompt_tokens``."""
    n = len(c)
    image = np.broadcast_to(np.asarray(image_tokens, dtype=np.float64), (n,)).copy()
    prompt = np.maximum(np.broadcast_to(np.asarray(prompt_tokens, dtype=np.float64), (n,)), 1.0)
    per_token = 2.0 * c.vision_params * c.vision_merge * image / prompt
    return dataclasses.replace(c, image_tokens=image, vision_flops_per_prefill_token=per_token)


def vision_steps(c: CandidateArrays, traffic: Traffic, text_tokens: float, i: int) -> list[Step]:
    """How the image tokens and the encoder's FLOPs of row ``i`` were found."""
    model = c.models[c.model_index[i]]
    images = float(traffic.images_per_request)
    per_image = float(c.image_tokens[i]) / images
    s: list[Step] = []
    if traffic.tokens_per_image > 0:
        s.append(
            step(
                "tokens_per_image",
                "given",
                [],
                per_image,
                "tokens",
                "the scenario's count",
                kind="model",
            )  # fmt: skip
        )
    elif model.vision_tokens_per_image > 0:
        s.append(
            step(
                "tokens_per_image",
                "fixed by the model's config",
                [],
                per_image,
                "tokens",
                "vision_soft_tokens_per_image",
                kind="model",
            )  # fmt: skip
        )
    else:
        s.append(
            step(
                "tokens_per_image",
                "tiles * ceil(tile_px / patch) ** 2 / merge",
                [
                    q("tiles", traffic.image_tiles, "tiles per image"),
                    q("tile_px", traffic.tile_px, "px"),
                    q("patch", model.vision_patch_size, "px (vision_config.patch_size)"),
                    q("merge", model.vision_merge, "patches per token (vision_config)"),
                ],
                per_image,
                "tokens",
                "the model's vision config (Qwen2-VL: 224 px, 14-px patches, 2x2 merge: 64)",
            )
        )
    image = q("image_tokens", c.image_tokens[i], "tokens")
    s += [
        step(
            "image_tokens_per_request",
            "images * tokens_per_image",
            [q("images", images, "per request"), q("tokens_per_image", per_image, "tokens")],
            c.image_tokens[i],
            "tokens",
        ),
        step(
            "prompt_tokens_with_images",
            "text + image_tokens",
            [q("text", text_tokens, "tokens"), image],
            text_tokens + c.image_tokens[i],
            "tokens",
            "prefill, KV and TTFT below are for this prompt",
        ),
        step(
            "vision_encoder_gflop_per_request",
            "2 * P_v * image_tokens * merge / 1e9",
            [
                q("P_v", c.vision_params[i], "params (vision encoder)"),
                image,
                q("merge", c.vision_merge[i], "patches per token"),
            ],
            2.0 * c.vision_params[i] * c.image_tokens[i] * c.vision_merge[i] / 1e9,
            "GFLOP",
            "2 FLOPs per param per patch (Kaplan et al. 2020); added to the prefill at the "
            "bf16 peak",
        ),
    ]
    return s
