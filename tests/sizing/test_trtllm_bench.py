"""trtllm-bench's batch limits: the tool's heuristic, numbers derived by hand."""

import math
from dataclasses import replace

import pytest
from specs_catalog import B200, LLAMA_70B

from sizing import calibrate as cal
from sizing.trtllm_bench import bench_limits, kv_max_requests

B200_BYTES = replace(B200, memory_gb=192.265846784)  # 179.06 GiB, the catalog's byte count


def test_llama_70b_fp4_on_one_b200_at_128_128():
    # given engine 70.55e9 * 0.5 / 2^30 = 32.852 GiB, HBM 192,265,846,784 / 2^30 = 179.062 GiB
    # cache (179.062 - 32.852) * 0.95 = 138.900 GiB; KV 2 * 80 * 8 * 128 * 1 B = 163,840 B
    # per token = 1.52588e-4 GiB; requests = 138.900 / (1.52588e-4 * 256) = 3,555.8
    requests = kv_max_requests(LLAMA_70B, B200_BYTES, 1, 1, "fp4", "fp8", 128, 128)
    assert requests == pytest.approx(3555.8, abs=0.1)
    # then batch 256 * ceil(3555.8 / 256) = 3,584; tokens 512 * ceil(7,111.6 / 512) = 7,168
    assert bench_limits(requests, 128, 128, 1) == (3584, 7168)


def test_tp_counts_at_least_one_kv_head_per_gpu_and_more_gpus_hold_more():
    one = kv_max_requests(LLAMA_70B, B200_BYTES, 1, 1, "fp4", "fp8", 1000, 1000)
    eight = kv_max_requests(LLAMA_70B, B200_BYTES, 8, 8, "fp4", "fp8", 1000, 1000)
    # 8 GPUs: (8 * 179.062 - 32.852) * 0.95 / (same per-token bytes, max(8, 8) heads)
    assert eight / one == pytest.approx((8 * 179.062 - 32.852) / (179.062 - 32.852), rel=1e-4)
    sixteen = kv_max_requests(LLAMA_70B, B200_BYTES, 16, 16, "fp4", "fp8", 1000, 1000)
    # 16 GPUs count 16 KV heads per token: twice the bytes of 8
    per_token_ratio = (16 * 179.062 - 32.852) / (8 * 179.062 - 32.852) / (sixteen / eight)
    assert per_token_ratio == pytest.approx(2.0, rel=1e-4)


@pytest.mark.parametrize(
    ("requests", "isl", "osl", "pp", "expected"),
    [
        (40.0, 128, 128, 1, (64, 2048)),  # batch floor 64; tokens floor 2048
        (200.0, 128, 128, 1, (224, 2048)),  # 32 * ceil(6.25); 400 tokens -> 2048
        (700.0, 1000, 1000, 1, (768, 2048)),  # 128 * 6; 1,400 tokens -> 2048 >= 1000 + 768
        (9000.0, 128, 128, 1, (4096, 8192)),  # capped at 4,096 sequences
        (9000.0, 2048, 128, 1, (4096, 32768)),  # 4,096 * 17 capped at 32,768
        (9000.0, 128, 128, 2, (2048, 4096)),  # PP halves the batch per stage
        (38.0, 20000, 2000, 1, (64, 20064)),  # a whole 20,000-token prompt per step
    ],
)
def test_finetune_rounding(requests, isl, osl, pp, expected):
    assert bench_limits(requests, isl, osl, pp) == expected


def test_offline_tensorrt_llm_points_run_at_the_bench_limits_others_at_defaults():
    # given the same B200 row measured offline (trtllm-bench) and closed loop
    fields = dict(
        model=LLAMA_70B, gpu=B200_BYTES, num_gpus=1, tp=1, pp=1, ep=1,
        weight_precision="fp4", kv_precision="fp8", isl=128.0, osl=128.0,
        engine="trtllm", metric="output_tok_s_per_gpu", value=1.0,
    )  # fmt: skip
    offline = cal.point_engine(cal.FitPoint(**fields, concurrency=math.nan))
    served = cal.point_engine(cal.FitPoint(**fields, concurrency=64.0))
    vllm = cal.point_engine(cal.FitPoint(**{**fields, "engine": "vllm"}, concurrency=math.nan))
    # then only the offline TensorRT-LLM row takes the tool's limits
    assert (offline.max_num_seqs, offline.max_num_batched_tokens) == (3584, 7168)
    assert (served.max_num_seqs, served.max_num_batched_tokens) == (1024, 8192)
    assert (vllm.max_num_seqs, vllm.max_num_batched_tokens) == (1024, 8192)
    assert offline.reserves_output and offline.engine == "trtllm"
