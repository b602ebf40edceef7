"""Vision-language input: image tokens in the prompt, the vision encoder's FLOPs in prefill."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.derivation import evaluate
from sizing.specs import Policy, Slo, Traffic
from sizing.steptime import prefill_time
from sizing.vision import (
    VisionError,
    derived_tokens_per_image,
    fold_images,
    tokens_per_image,
    vision_from_hf_config,
    with_images,
)

CONFIGS = Path(__file__).resolve().parents[2] / "fleets" / "catalog" / "model_configs"


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


QWEN35 = vision_from_hf_config(_config("Qwen--Qwen3.5-397B-A17B"))
#: an 8B language model with Qwen3.5's vision tower: small enough for one H100
VLM = dataclasses.replace(LLAMA_8B, name="8B + Qwen3.5 vision", **QWEN35)


def test_qwen2_vl_224px_image_is_64_tokens_as_its_paper_says():
    # Qwen2-VL (arXiv:2409.12191, section 2.1): a 224 x 224 image, 14-px patches, 2x2 merge,
    # "is compressed to 66 tokens": 64 image tokens plus the two vision-boundary tokens
    cfg = {"vision_config": {"hidden_size": 1280, "depth": 32, "patch_size": 14,
                             "spatial_merge_size": 2, "intermediate_size": 5120}}  # fmt: skip
    model = dataclasses.replace(LLAMA_8B, **vision_from_hf_config(cfg))
    assert derived_tokens_per_image(model, 1, 224) == 64.0  # 66 with boundaries: -3 %


def test_vision_configs_of_the_shipped_models():
    # Qwen3.5: 27 layers x (4 * 1152^2 + 2 * 1152 * 4304) = 411,070,464; patch embedding
    # 3 * 2 frames * 16^2 * 1152 = 1,769,472; merger 4608^2 + 4608 * 4096 = 40,108,032
    assert QWEN35 == {
        "vision_params": 452_947_968.0,
        "vision_patch_size": 16,
        "vision_merge": 4,
        "vision_tokens_per_image": 0,
    }
    # one 448-px tile: (448 / 16)^2 = 784 patches / 4 = 196 tokens
    assert derived_tokens_per_image(VLM, 1, 448) == 196.0
    assert derived_tokens_per_image(VLM, 4, 448) == 784.0
    kimi = vision_from_hf_config(_config("moonshotai--Kimi-K2.5"))
    assert (kimi["vision_patch_size"], kimi["vision_merge"]) == (14, 4)
    gemma = vision_from_hf_config(_config("google--gemma-4-26B-A4B"))
    assert (gemma["vision_tokens_per_image"], gemma["vision_merge"]) == (280, 9)
    assert vision_from_hf_config(_config("meta-llama--Meta-Llama-3.1-8B")) == {}
    # a vision_config of another shape is no vision config, never an error
    for odd in (
        {"patch_size": [14, 14], "hidden_size": 1152, "depth": 27},
        {"patch_size": 14, "hidden_size": "wide", "depth": 27},
        {"patch_size": 14, "hidden_size": 1152, "depth": 27, "spatial_merge_size": 0},
    ):
        assert vision_from_hf_config({"vision_config": odd}) == {}, odd  # fmt: skip


def test_a_text_model_needs_the_count_given():
    traffic = Traffic(1, 1, 1000, 100, images_per_request=1)
    with pytest.raises(VisionError, match="tokens_per_image"):
        tokens_per_image(LLAMA_8B, traffic)
    assert tokens_per_image(LLAMA_8B, dataclasses.replace(traffic, tokens_per_image=256)) == 256


def test_fold_images_adds_the_image_tokens_to_the_prompt_once():
    t = Traffic(1, 1, 1000, 100, prompt_tokens_p95=3000, images_per_request=2)
    folded = fold_images(t, 196)
    assert (folded.prompt_tokens_mean, folded.prompt_tokens_p95) == (1392, 3392)
    assert folded.image_tokens == 392
    assert fold_images(folded, 196) == folded
    assert fold_images(Traffic(1, 1, 1000, 100), 196) == Traffic(1, 1, 1000, 100)


def test_the_encoder_flops_join_the_prefill():
    # given a 1,000-token text prompt with 2 images of 196 tokens (1,392 prefilled tokens)
    c = CandidateArrays.build(VLM, H100, "bf16")
    imaged = with_images(c, 392, 1392)
    p = np.array([1392.0])
    base, with_encoder = prefill_time(c, p), prefill_time(imaged, p)
    # then the prefill carries 2 * P_v * merge * image tokens more FLOPs:
    # 2 * 452,947,968 * 4 * 392 = 1.4204e12
    extra = with_encoder.stage.flops_prefill[0] - base.stage.flops_prefill[0]
    assert extra == pytest.approx(2 * 452_947_968 * 4 * 392)
    assert extra == pytest.approx(1.4204e12, rel=1e-4)
    # timed at the bf16 peak at the prefill efficiency: + 2.61 ms
    added_s = with_encoder.prefill_s[0] - base.prefill_s[0]
    assert added_s == pytest.approx(extra / (989.5e12 * 0.55))


def test_images_raise_ttft_and_replicas_through_the_plan():
    slo, policy = Slo(300, 40), Policy()
    text = Traffic(20, 10, 1000, 300)
    images = dataclasses.replace(text, images_per_request=4)
    same_tokens = dataclasses.replace(text, prompt_tokens_mean=1000 + 4 * 196)
    [a] = plan(text, slo, policy, [Candidate(VLM, H100)], tails=None).rows
    [b] = plan(images, slo, policy, [Candidate(VLM, H100)], tails=None).rows
    [c] = plan(same_tokens, slo, policy, [Candidate(VLM, H100)], tails=None).rows
    # the image tokens are prompt tokens (KV per request, prefill), and the encoder's FLOPs
    # make the prefill slower than a text prompt of as many tokens
    assert b.mean_value_ttft_ms > c.mean_value_ttft_ms > a.mean_value_ttft_ms
    assert b.requests_per_s_per_replica < a.requests_per_s_per_replica
    assert b.replicas >= a.replicas
    steps = {s.name: s for s in b.derivation}
    assert steps["tokens_per_image"].stage == "Vision input"
    assert "P_v * 2" in steps["weights_bytes_total"].formula
    assert steps["tokens_per_image"].value == 196
    assert steps["prompt_tokens_with_images"].value == 1784
    for name in ("tokens_per_image", "image_tokens_per_request", "prompt_tokens_with_images",
                 "vision_encoder_gflop_per_request", "weights_bytes_total",
                 "weights_gb_per_gpu"):  # fmt: skip
        s = steps[name]
        assert evaluate(s.formula, s.inputs) == pytest.approx(s.value), name


def test_plan_groups_models_by_their_tokens_per_image():
    # a text model given no count cannot take images; with a count both models plan
    t = Traffic(5, 5, 1000, 300, images_per_request=1, tokens_per_image=100)
    rows = plan(t, Slo(2000, 50), Policy(), [Candidate(VLM, H100), Candidate(LLAMA_8B, H100)],
                tails=None).rows  # fmt: skip
    assert {r.model for r in rows} == {VLM.name, LLAMA_8B.name}
    with pytest.raises(VisionError):
        plan(dataclasses.replace(t, tokens_per_image=0), Slo(2000, 50), Policy(),
             [Candidate(LLAMA_8B, H100)], tails=None)  # fmt: skip


def test_predict_rows_with_images_matches_a_longer_prompt_in_memory():
    a = predict_rows(VLM, H100, 1, 1, 1, 1, "bf16", None, 1000 + 196, 200, 8)
    b = predict_rows(VLM, H100, 1, 1, 1, 1, "bf16", None, 1000, 200, 8, images_per_request=1)
    given = predict_rows(VLM, H100, 1, 1, 1, 1, "bf16", None, 1000, 200, 8,
                         images_per_request=1, tokens_per_image=196)  # fmt: skip
    # the encoder's weights (bf16) join the memory fit: 2 * 452,947,968 B = 0.906 GB
    assert b.weights_gb_per_gpu[0] - a.weights_gb_per_gpu[0] == pytest.approx(0.905896, abs=1e-6)
    assert b.max_concurrency[0] < a.max_concurrency[0]
    assert b.ttft_ms[0] > a.ttft_ms[0]  # the encoder's FLOPs
    text = predict_rows(VLM, H100, 1, 1, 1, 1, "bf16", None, 1000, 200, 8)
    assert text.weights_gb_per_gpu[0] == a.weights_gb_per_gpu[0]  # no images: no encoder
    assert given.ttft_ms[0] == b.ttft_ms[0]
