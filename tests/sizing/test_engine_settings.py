"""Engine settings as inputs: checks, which setting binds, and the chunk-budget frontier."""

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan, predict_rows
from sizing.chunking import chunk_frontier
from sizing.engine_settings import (
    SettingError,
    binding_setting,
    engine_overrides,
    min_gpu_memory_utilization,
)
from sizing.memory import R_MODEL_LEN, R_MODEL_LEN_KV, fit_memory
from sizing.operating import kv_sequences_live
from sizing.specs import EngineSettings, Parallelism, Policy, Slo, Traffic


def test_defaults_are_the_fixed_values_they_replace():
    e = EngineSettings()
    assert (e.gpu_memory_utilization, e.max_num_seqs, e.max_num_batched_tokens) == (0.9, 1024, 8192)
    assert e.max_model_len == 0  # the model's maximum
    assert engine_overrides({}, e) == {} and engine_overrides(None, e) == {}


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.01}, "gpu_memory_utilization"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": 8}, "max_num_batched_tokens"),  # below the 16-token block
        ({"max_model_len": -1}, "max_model_len"),
        ({"max_num_seqs": 1.5}, "max_num_seqs"),
        ({"gpu_memory_utilization": "lots"}, "gpu_memory_utilization"),
        ({"max_batch": 4}, "engine"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(block, field):
    with pytest.raises(SettingError) as err:
        engine_overrides(block, EngineSettings())
    assert err.value.field == field


def test_good_settings_pass_through():
    block = {"gpu_memory_utilization": 1, "max_num_seqs": 256, "max_num_batched_tokens": 16}
    assert engine_overrides(block | {"max_model_len": ""}, EngineSettings()) == {
        "gpu_memory_utilization": 1.0,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 16,
    }


def test_max_model_len_refuses_longer_requests_and_must_fit_one_sequence():
    # given Llama 3.1 70B fp8 on two H100s (TP2)
    e = EngineSettings(max_model_len=4096)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2, engine=e)
    # a 5,000-token request is longer than max_model_len
    assert fit_memory(c, 5000).reason_code[0] == R_MODEL_LEN
    assert "max_model_len 4,096" in fit_memory(c, 5000).reason(c, 0)
    # at 0.75 utilization a 131,072-token sequence (21.5 GB per GPU) does not fit the KV
    # budget: the engine would not start
    tight = EngineSettings(max_model_len=131072, gpu_memory_utilization=0.75)
    big = CandidateArrays.build(LLAMA_70B, H100, "fp8", "bf16", tp=2, engine=tight)
    fit = fit_memory(big, 2000)
    assert fit.reason_code[0] == R_MODEL_LEN_KV
    text = binding_setting(big, fit, kv_sequences_live(big, fit, 1000, 1000), 0)
    assert text.startswith("max_model_len 131,072 binds: at most ~")


def test_min_utilization_is_the_one_at_which_one_sequence_just_fits():
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    u = float(min_gpu_memory_utilization(c, fit_memory(c, 2000))[0])
    lo, hi = (EngineSettings(gpu_memory_utilization=x) for x in (u - 1e-4, u + 1e-4))
    below = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2, engine=lo)
    above = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2, engine=hi)
    assert not fit_memory(below, 2000).fits[0]
    assert fit_memory(above, 2000).fits[0]


def test_which_setting_caps_the_batch():
    # 8B bf16 on H100: the KV budget holds more than 32 sequences, so max_num_seqs 32 binds
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=EngineSettings(max_num_seqs=32))
    fit = fit_memory(c, 2000)
    live = kv_sequences_live(c, fit, 1000, 1000)
    assert binding_setting(c, fit, live, 0).startswith("max_num_seqs binds")
    big = CandidateArrays.build(LLAMA_8B, H100, "bf16")
    fit = fit_memory(big, 2000)
    live = kv_sequences_live(big, fit, 1000, 1000)
    assert binding_setting(big, fit, live, 0).startswith("gpu_memory_utilization binds")


def test_predict_uses_the_settings():
    e = EngineSettings(gpu_memory_utilization=0.80)
    base = predict_rows(LLAMA_8B, H100, 1, 1, 1, 1, "bf16", None, 1000, 1000, np.nan)
    less = predict_rows(LLAMA_8B, H100, 1, 1, 1, 1, "bf16", None, 1000, 1000, np.nan, engine=e)
    # 8 GB less usable: exactly 8e9 B / 131,072 B per token fewer tokens cached
    assert base.kv_capacity_tokens[0] - less.kv_capacity_tokens[0] == pytest.approx(61035, abs=1)


def test_chunk_frontier_trades_long_prompt_ttft_against_running_tpot():
    # given 70B fp8 TP4 on H100 with 32 sequences decoding and a 20,000-token prompt arriving
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    f = chunk_frontier(c, 32.0, 1500.0, 20_000)
    stall = [s[0] for s in f.stall_s]
    ttft = [t[0] for t in f.ttft_long_s]
    # then a bigger budget stalls running streams longer and prefills the long prompt sooner
    assert all(a < b for a, b in zip(stall, stall[1:], strict=False))
    assert all(a >= b for a, b in zip(ttft, ttft[1:], strict=False))
    # one unchunked 20k step freezes every stream for a large part of a second
    assert f.stall_s[-1][0] > 0.3 and f.n_chunks[-1][0] == 1
    # the recommendation is the largest budget whose stall meets the TPOT SLO
    rec = f.recommended(0.100)[0]
    ok = [b for b, s in zip(f.budgets, stall, strict=True) if s <= 0.100]
    assert rec == max(ok)


def test_plan_shows_the_frontier_and_the_binding_setting_without_changing_numbers():
    traffic = Traffic(5, 5, 1000, 300, prompt_tokens_p95=8000)
    slo, policy = Slo(3000, 60), Policy()
    cand = Candidate(LLAMA_70B, H100, "fp8", Parallelism(tp=4))
    row = plan(traffic, slo, policy, [cand], tails=None).rows[0]
    names = [s.name for s in row.derivation]
    assert {"min_gpu_memory_utilization", "engine_setting_binding", "chunk_budget_frontier"} <= set(
        names
    )
    frontier = {r["max_num_batched_tokens"] for r in row.chunk_frontier}
    assert 8192 in frontier and 512 in frontier
    assert row.engine_binding
    # a different chunk budget is a different answer
    small = Candidate(
        LLAMA_70B,
        H100,
        "fp8",
        Parallelism(tp=4),
        engine=EngineSettings(max_num_batched_tokens=1024),
    )
    other = plan(traffic, slo, policy, [small], tails=None).rows[0]
    assert other.mean_value_ttft_ms != row.mean_value_ttft_ms
