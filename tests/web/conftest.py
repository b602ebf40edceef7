"""Fixtures for the web UI tests."""

import pytest

from tests.factories import UserFactory


@pytest.fixture
def owner(db):
    return UserFactory(username="owner")


@pytest.fixture
def stranger(db):
    return UserFactory(username="stranger")


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


def form_post(**overrides) -> dict:
    """A valid scenario form body (what a browser posts); override or drop (None) fields."""
    data = {
        "name": "Chat assistant",
        "description": "",
        "tags": "chat, prod",
        "peak_rps": "20",
        "mean_rps": "10",
        "prompt_tokens_mean": "1000",
        "prompt_tokens_p95": "3000",
        "output_tokens_mean": "300",
        "output_tokens_p95": "800",
        "shared_prefix_tokens": "0",
        "prefix_hit_rate": "0",
        "hourly_rps": "",
        "ttft_ms": "2000",
        "tpot_ms": "50",
        "slo_percentile": "95",
        "goodput_target": "0.99",
        "models": ["llama-3.1-70b", "llama-3.1-8b"],
        "gpus": ["h100_sxm", "l40s"],
        "precisions": ["bf16", "fp8"],
        "tp_options": "",
        "pp_options": "",
        "ep_options": "",
        "engine": "vllm",
        "calibration_profile": "",
        "tier": "on_demand",
        "price_sheet": "",
        "api_provider": "",
        "api_model": "",
        "api_input_usd_per_mtok": "0.5",
        "api_output_usd_per_mtok": "1.5",
        "target_utilization": "0.7",
        "spare_replicas": "1",
        "burst_factor": "1.0",
        "warm_pool_replicas": "0",
    }
    for key, value in overrides.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data
