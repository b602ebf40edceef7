"""Checkpoints quantized in their experts only (gpt-oss's MXFP4): bytes, compute peak, and how
a measurement of one is read whatever its precision column says."""

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from specs_catalog import B200, GPT_OSS_120B, H100, H200, LLAMA_70B

from sizing import calibrate as cal
from sizing.candidates import CandidateArrays, expert_precision_of
from sizing.chain import Candidate, plan
from sizing.memory import weights_bytes_total
from sizing.precision import (
    PRECISIONS,
    checkpoint_from_hf_config,
    compute_precision,
    peak_flops,
    weight_bytes_per_param,
)
from sizing.specs import Policy, Slo, Traffic

CONFIGS = Path(__file__).resolve().parents[2] / "fleets" / "catalog" / "model_configs"
GPT_OSS = replace(GPT_OSS_120B, checkpoint_expert_precision="mxfp4")


def test_mxfp4_is_four_bits_and_one_byte_scale_per_32():
    assert weight_bytes_per_param("mxfp4") == 0.5 + 1 / 32 == 0.53125
    assert weight_bytes_per_param("nvfp4") == 0.5 + 1 / 16  # still NVFP4's own


def test_mxfp4_runs_w4a8_on_blackwell_and_weight_only_on_hopper():
    # TensorRT-LLM's GPT-OSS guide: B200 MXFP8 activations, H200 BF16 activations
    assert compute_precision(B200, "mxfp4") == "fp8"
    assert peak_flops(B200, "mxfp4") == 4500e12
    assert compute_precision(H100, "mxfp4") == "bf16"
    assert peak_flops(H200, "mxfp4") == 989.5e12  # not Hopper's fp8 1,979


def test_checkpoint_precision_from_config_json():
    gpt_oss = json.loads((CONFIGS / "openai--gpt-oss-120b.json").read_text())
    deepseek = json.loads((CONFIGS / "deepseek-ai--DeepSeek-R1.json").read_text())
    assert checkpoint_from_hf_config(gpt_oss) == {"checkpoint_expert_precision": "mxfp4"}
    assert checkpoint_from_hf_config(deepseek) == {}  # fp8 everywhere: one precision
    assert checkpoint_from_hf_config({}) == {}
    assert checkpoint_from_hf_config({"quantization_config": "mxfp4"}) == {}
    # experts-only needs the attention left out of the quantisation
    assert checkpoint_from_hf_config({"quantization_config": {"quant_method": "mxfp4"}}) == {}


def test_the_core_reads_a_blank_experts_precision_as_the_published_checkpoint():
    # given gpt-oss-120b (checkpoint: MXFP4 experts) at bf16 on an H100, its experts' precision
    # blank (None, '', the -1 code), named mxfp4, and named bf16
    blank = CandidateArrays.build(GPT_OSS, H100, "bf16")
    empty = CandidateArrays.build(GPT_OSS, H100, "bf16", expert_precision=[""])
    code = CandidateArrays.from_tables([GPT_OSS], [H100], [0], [0], PRECISIONS.index("bf16"), -1)
    mxfp4 = CandidateArrays.build(GPT_OSS, H100, "bf16", expert_precision="mxfp4")
    bf16 = CandidateArrays.build(GPT_OSS, H100, "bf16", expert_precision="bf16")
    # then blank is mxfp4: 0.53125 B per expert param, the same weight bytes as naming it,
    # (116.83e9 - 114.6617856e9) * 2 + 114.6617856e9 * 0.53125 = 65,250,502,400 B
    for c in (blank, empty, code, mxfp4):
        assert (c.expert_precision(0), c.expert_bytes_per_param[0]) == ("mxfp4", 0.53125)
        assert weights_bytes_total(c)[0] == 65_250_502_400.0
    # and a caller that names bf16 gets bf16 experts: 116.83e9 * 2 = 233,660,000,000 B
    assert (bf16.expert_precision(0), bf16.expert_bytes_per_param[0]) == ("bf16", 2.0)
    assert weights_bytes_total(bf16)[0] == 233_660_000_000.0
    # and a model stored at one precision keeps its experts at the weights' (rows of both)
    both = CandidateArrays.build([GPT_OSS, LLAMA_70B], H100, "fp8")
    assert [both.expert_precision(i) for i in range(2)] == ["mxfp4", "fp8"]
    assert both.expert_bytes_per_param.tolist() == [0.53125, 1.0]
    assert not both.mixed_precision(1)
    # and the rule is one function: the given precision, else the published one, else ''
    assert (expert_precision_of(GPT_OSS), expert_precision_of(GPT_OSS, "bf16")) == ("mxfp4", "bf16")
    assert expert_precision_of(LLAMA_70B) == ""


def test_a_plan_row_records_the_experts_precision_it_was_sized_at():
    # given gpt-oss-120b at bf16 with its experts blank and named bf16, and Llama 70B at fp8
    rows = plan(Traffic(5.0, 2.5, 1000, 200), Slo(2000, 50), Policy(), [
        Candidate(GPT_OSS, H100, "bf16", label="blank"),
        Candidate(GPT_OSS, H100, "bf16", expert_precision="bf16", label="bf16"),
        Candidate(LLAMA_70B, H100, "fp8", label="dense"),
    ]).rows  # fmt: skip
    # then each row says its experts' own precision: the checkpoint's, the named one, none
    by_label = {r.label: (r.expert_precision, r.fits) for r in rows}
    assert by_label == {"blank": ("mxfp4", True), "bf16": ("bf16", False), "dense": ("", False)}


def _row(model, gpu, **changes):
    fields = dict(
        model=model, gpu=gpu, num_gpus=1, tp=1, pp=1, ep=None, engine="TensorRT-LLM",
        engine_family="trtllm", weight_precision="fp8", kv_precision="fp8", isl=1024,
        osl=1024, concurrency=None, request_rate=None, metric="output_tok_s_per_gpu",
        value=1000.0, row_id="r", flags=frozenset(), offline=True, source_group="s",
        model_family="f", source_version="",
    )  # fmt: skip
    return SimpleNamespace(**{**fields, **changes})


def _points(*rows):
    specs = {"gpt-oss": GPT_OSS, "llama": LLAMA_70B, "h100": H100, "h200": H200, "b200": B200}
    return cal.points_from_measurements(
        rows, lambda name: (name, specs[name]), lambda name: (name, specs[name]), lambda _: ""
    )


def test_gpt_oss_rows_are_read_as_the_published_checkpoint():
    # given gpt-oss rows labelled after the table's column: "FP8" with the cache left at auto
    # on Hopper (the reader assumed fp8), "FP4" with an fp8 cache on B200
    served = dict(concurrency=64.0, offline=False)
    hopper = _row("gpt-oss", "h100", flags=frozenset({"kv_precision_assumed"}), **served)
    blackwell = _row("gpt-oss", "b200", weight_precision="fp4", **served)
    llama = _row("llama", "h100", **served)
    (h, b, plain), skipped = _points(hopper, blackwell, llama)
    # then both ran MXFP4 experts with bf16 attention; the auto cache is the model's bf16
    assert (h.weight_precision, h.kv_precision, h.expert_precision) == ("bf16", "bf16", "mxfp4")
    assert (b.weight_precision, b.kv_precision, b.expert_precision) == ("bf16", "fp8", "mxfp4")
    # and a checkpoint stored at one precision keeps its row's reading
    assert (plain.weight_precision, plain.kv_precision, plain.expert_precision) == (
        "fp8", "fp8", "",
    )  # fmt: skip
    assert skipped == []


def test_trtllm_bench_counts_mxfp4_at_two_bytes_and_refuses_what_does_not_fit():
    # given gpt-oss-120b offline on 2 H200 (DEP2) and on 1 H200: the tool reads an MXFP4
    # checkpoint at its default 2 B/param: 116.83e9 * 2 / 2^30 = 217.61 GiB
    auto = frozenset({"attention_dp", "kv_precision_assumed"})  # Hopper: cache at auto (bf16)
    two = _row("gpt-oss", "h200", num_gpus=2, ep=2, flags=auto)
    one = _row("gpt-oss", "h200")
    (point,), skipped = _points(two, one)
    # then 2 x 141e9 B = 262.63 GiB leaves (262.63 - 217.61) * 0.95 = 42.77 GiB of cache at
    # 2 * 36 * 8 * 64 * 2 B = 6.866e-5 GiB per token: 42.77 / (6.866e-5 * 2048) = 304 requests
    engine = cal.point_engine(point)
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (384, 2048)
    # and on one H200 the weights alone exceed its 131.32 GiB: the run had its own limits
    assert skipped == [(one, cal.BENCH_LIMITS_UNKNOWN)]


def test_gpt_oss_predicts_slower_on_hopper_as_served_than_as_labelled():
    # given the same H100 row read as labelled (fp8 everything) and as served
    labelled = cal.FitPoint(
        model=GPT_OSS_120B, gpu=H100, num_gpus=4, tp=1, pp=1, ep=4, weight_precision="fp8",
        kv_precision="fp8", isl=1024.0, osl=1024.0, concurrency=math.nan, engine="trtllm",
        metric="output_tok_s_per_gpu", value=1.0,
    )  # fmt: skip
    served = replace(labelled, weight_precision="bf16", kv_precision="bf16",
                     expert_precision="mxfp4")  # fmt: skip
    fast, slow = cal.predict_points([labelled, served])
    # then bf16 GEMMs and a bf16 cache make the served reading the slower one
    assert slow < fast
    assert slow == pytest.approx(cal.predict_points([served])[0])
