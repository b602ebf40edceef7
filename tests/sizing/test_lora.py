"""LoRA: adapter memory, the batched-adapter step term, swap-ins, and one base vs N deployments."""

from dataclasses import replace

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B

from sizing import lora
from sizing.candidates import CandidateArrays
from sizing.chain import Candidate, plan
from sizing.engine_settings import SettingError
from sizing.memory import fit_memory
from sizing.serving import serving_overrides
from sizing.specs import EngineSettings, GpuSpec, Policy, Slo, Traffic
from sizing.steptime import decode_step

#: A100 80GB SXM as the catalog has it (fleets/catalog/gpus.csv: 2.039 TB/s, 312 TFLOP/s bf16)
A100 = GpuSpec("A100 80GB SXM", 80, 2.039, {"bf16": 312, "int8": 624}, "nvlink", 600, 8, 8)
#: Llama 2 7B (meta-llama/Llama-2-7b-hf config.json: 32 layers, hidden 4096, 32 heads, MHA,
#: MLP 11,008, vocab 32,000, 6.74e9 params)
LLAMA2_7B = replace(
    LLAMA_8B,
    name="Llama 2 7B",
    num_kv_heads=32,
    vocab_size=32000,
    total_params=6.74e9,
    active_params=6.74e9,
    embedding_params=32000 * 4096,
)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_engine(adapters=300, rank=16, active=32, modules=ALL, **kw) -> EngineSettings:
    block = {"adapters": adapters, "rank": rank, "target_modules": modules,
             "active_per_batch": active, **kw}  # fmt: skip
    return EngineSettings(**(vars(EngineSettings()) | serving_overrides({"lora": block})))


def test_adapter_bytes_from_module_shapes():
    # Llama 3.1 8B, rank 16 on q, k, v, o: (4096+4096) + 2 (4096+1024) + (4096+4096) = 26,624
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=lora_engine(modules=ALL[:4]))
    assert lora.module_dims_per_layer(c)[0] == 26624
    assert lora.adapter_bytes(c)[0] == 16 * 26624 * 32 * 2  # 27.3 MB
    # the MLP width from the params: 14,336 for Llama 3.1 8B
    assert lora.mlp_width(c)[0] == pytest.approx(14336, rel=0.002)


def test_resident_adapters_come_out_of_the_kv_budget():
    base = fit_memory(CandidateArrays.build(LLAMA_8B, H100, "bf16"), 2000)
    e = lora_engine(modules=ALL[:4], resident_slots=64)
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=e)
    shrink = base.kv_budget_bytes_per_gpu[0] - fit_memory(c, 2000).kv_budget_bytes_per_gpu[0]
    assert shrink == pytest.approx(64 * 16 * 26624 * 32 * 2)


def test_batched_adapter_overhead_against_punica():
    # Punica (MLSys 2024, arXiv 2310.18547): "only adding 2ms latency per token", Llama 2 7B
    # on A100, rank 16 on every linear layer, a batch of 32 requests on 32 distinct adapters.
    plain = CandidateArrays.build(LLAMA2_7B, A100, "bf16")
    c = CandidateArrays.build(LLAMA2_7B, A100, "bf16", engine=lora_engine(active=32))
    added = decode_step(c, 32.0, 1000.0).step_s[0] - decode_step(plain, 32.0, 1000.0).step_s[0]
    assert added == pytest.approx(2e-3, rel=0.25)  # 1.63 ms: -18 %


def test_swap_in_only_for_non_resident_adapters():
    all_in = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=lora_engine(resident_slots=300))
    few = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=lora_engine(resident_slots=30))
    assert lora.swap_in_s(all_in)[0] == 0.0
    one = lora.adapter_bytes(few)[0] / (64e9 * 0.7)
    assert lora.swap_in_s(few)[0] == pytest.approx(0.9 * one)


def test_three_hundred_fine_tunes_on_one_base_need_far_fewer_gpus():
    cand = Candidate(LLAMA_8B, H100, "bf16", engine=lora_engine(modules=ALL[:4]))
    row = plan(Traffic(20, 20, 1000, 200), Slo(2000, 50), Policy(), [cand], tails=None).rows[0]
    steps = {s.name: s for s in row.derivation}
    assert steps["gpus_one_deployment_per_fine_tune"].value == 300
    assert row.meets_slo and row.gpus < 10
    assert 0 < steps["lora_step_overhead"].value < 0.5
    assert steps["lora_adapters_fit_per_gpu"].value > 300


def test_bad_lora_input_is_refused():
    for block, field in (
        ({"adapters": 3, "rank": 0}, "serving.lora.rank"),
        ({"adapters": 0, "rank": 8}, "serving.lora.adapters"),
        ({"adapters": 3, "rank": 8, "active_per_batch": 4}, "serving.lora.active_per_batch"),
        ({"adapters": 3, "rank": 8, "target_modules": ["lm_head"]}, "serving.lora.target_modules"),
    ):
        with pytest.raises(SettingError) as err:
            serving_overrides({"lora": block})
        assert err.value.field == field


def test_no_lora_costs_nothing():
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16")
    assert lora.lora_step_s(c, np.array([64.0]))[0] == 0.0
    assert lora.resident_bytes_per_gpu(c)[0] == 0.0
