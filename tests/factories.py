"""factory-boy factories. Scenarios go through the service, as the UI and API do."""

import functools

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from planner.services import scenario_create


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"reviewer{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    # hashed once per password with the production hasher (PBKDF2, ~0.4 s a hash) and the
    # same encoded hash reused: every test user still holds a real hash that logins verify,
    # but creating the suite's hundreds of users no longer re-derives it each time
    password = factory.django.Password(
        "correct horse battery staple", transform=functools.cache(make_password)
    )


def scenario_data(**overrides) -> dict:
    """A chat-assistant scenario on the shipped catalog (3 models x 4 GPUs x 3 precisions)."""
    data = {
        "name": "Chat assistant",
        "tags": ["chat"],
        "peak_rps": 20.0,
        "mean_rps": 10.0,
        "prompt_tokens_mean": 1000,
        "prompt_tokens_p95": 3000,
        "output_tokens_mean": 300,
        "output_tokens_p95": 800,
        "ttft_ms": 2000,
        "tpot_ms": 50,
        "models": ["Llama-3.1-70B-Instruct", "Qwen3-32B", "llama-3.1-8b"],
        "gpus": ["H100", "H200", "B200", "L40S"],
        "precisions": ["bf16", "fp8", "int4"],
        "api_input_usd_per_mtok": 0.5,
        "api_output_usd_per_mtok": 1.5,
    }
    data.update(overrides)
    return data


def make_scenario(owner=None, **overrides):
    return scenario_create(owner=owner or UserFactory(), data=scenario_data(**overrides))
