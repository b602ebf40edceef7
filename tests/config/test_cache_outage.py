"""The cache (throttles) in front of every request survives a Redis outage: no 500s."""

import logging

import pytest
from rest_framework.test import APIClient

from tests.config.test_settings_and_services import _settings_in_subprocess
from tests.factories import UserFactory
from tests.reliability.private_services import free_port

pytestmark = pytest.mark.django_db


def test_the_settings_put_the_cache_on_the_resilient_backend():
    out = _settings_in_subprocess(
        {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}, "settings.CACHES['default']['BACKEND']"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "config.cache.ResilientRedisCache"


def test_api_and_sign_in_answer_while_the_cache_redis_is_down(settings, caplog):
    # given the cache points at a Redis that refuses connections
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.ResilientRedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    user = UserFactory(username="during-outage")
    api = APIClient()
    api.force_authenticate(user)
    # when the API and the sign-in page are used, then they answer as usual
    with caplog.at_level(logging.WARNING, logger="config.cache"):
        assert [api.get("/api/v1/gpus/").status_code for _ in range(3)] == [200, 200, 200]
        answer = APIClient().post(
            "/accounts/login/",
            {"username": "during-outage", "password": "correct horse battery staple"},
        )
    assert answer.status_code == 302
    # and the outage is logged once, not once per request
    warnings = [r for r in caplog.records if "cache Redis unavailable" in r.getMessage()]
    assert len(warnings) == 1


def test_throttles_still_count_in_process_memory_meanwhile(settings):
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.ResilientRedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        }
    }
    from django.core.cache import cache

    cache.set("k", 1)
    assert cache.incr("k") == 2 and cache.get("k") == 2
