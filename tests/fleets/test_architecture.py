"""Parameter counts computed from config.json match published totals (pure, no database)."""

import csv
import json
from pathlib import Path

import pytest

from fleets.architecture import ConfigError, count_parameters, parse_hf_config

CATALOG = Path(__file__).resolve().parents[2] / "fleets" / "catalog"
ROWS = list(csv.DictReader((CATALOG / "models.csv").open()))


def _arch(config_file: str):
    return parse_hf_config(json.loads((CATALOG / "model_configs" / config_file).read_text()))


def _family(row) -> str:
    return row["slug"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["published_total_b"]], ids=_family)
def test_total_params_within_2_percent_of_published(row):
    # given the model's config.json, when we count, then we land within 2% of the headline
    total = count_parameters(_arch(row["config_file"]))["total"] / 1e9
    published = float(row["published_total_b"])
    assert abs(total - published) / published <= 0.02, (total, published)


@pytest.mark.parametrize("row", [r for r in ROWS if r["published_active_b"]], ids=_family)
def test_active_params_within_2_percent_of_published(row):
    active = count_parameters(_arch(row["config_file"]))["active"] / 1e9
    published = float(row["published_active_b"])
    assert abs(active - published) / published <= 0.02, (active, published)


def test_llama_70b_exact_count():
    # given Llama 3.1 70B: 80 layers of GQA (64 q heads, 8 kv heads, 128 dims) + SwiGLU 28672
    arch = _arch("meta-llama--Meta-Llama-3.1-70B.json")
    counts = count_parameters(arch)
    attention = 80 * (8192 * 8192 * 2 + 8192 * 1024 * 2)  # q, o square; k, v 8 heads x 128
    mlp = 80 * 3 * 8192 * 28672
    embeddings = 2 * 128256 * 8192  # untied: input table + LM head
    norms = (2 * 80 + 1) * 8192
    assert counts["total"] == attention + mlp + embeddings + norms == 70_553_706_496


def test_deepseek_v3_mla_and_moe_fields():
    arch = _arch("deepseek-ai--DeepSeek-V3.json")
    assert (arch.kv_lora_rank, arch.qk_rope_head_dim, arch.head_dim) == (512, 64, 192)
    assert (arch.num_experts, arch.experts_per_token, arch.shared_experts) == (256, 8, 1)
    assert arch.num_moe_layers == 61 - 3  # first_k_dense_replace = 3
    assert count_parameters(arch)["per_expert"] == 3 * 7168 * 2048


def test_layer_mixes():
    # gpt-oss alternates 128-token windows with full attention
    gpt = _arch("openai--gpt-oss-120b.json")
    assert (gpt.sliding_window, gpt.sliding_window_layers, gpt.full_attention_layers) == (
        128,
        18,
        18,
    )
    # Qwen3.5: 3 of every 4 layers are linear attention (constant state)
    qwen = _arch("Qwen--Qwen3.5-397B-A17B.json")
    assert (qwen.linear_attention_layers, qwen.full_attention_layers) == (45, 15)
    # Llama 4 Maverick: chunked local attention on 3 of 4 layers, experts every 2nd layer
    maverick = _arch("meta-llama--Llama-4-Maverick-17B-128E-Instruct.json")
    assert (maverick.sliding_window, maverick.sliding_window_layers) == (8192, 36)
    assert maverick.num_moe_layers == 24


def test_nested_text_config_is_read():
    arch = _arch("moonshotai--Kimi-K2.5.json")
    assert arch.num_layers == 61 and arch.kv_lora_rank == 512
    assert "text_config" in arch.notes[0]


@pytest.mark.parametrize(
    "config, message",
    [
        ({"hidden_size": 10}, "missing key 'num_hidden_layers'"),
        ({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2}, "'vocab_size'"),
        (
            {"num_hidden_layers": 0, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 5},
            "num_hidden_layers must be a positive integer",
        ),
        ([1, 2], "JSON object"),
    ],
)
def test_non_causal_lm_config_is_refused_naming_the_key(config, message):
    with pytest.raises(ConfigError, match=message):
        parse_hf_config(config)
