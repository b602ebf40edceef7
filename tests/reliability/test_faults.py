"""Faults with the real services: Redis down, a worker killed, PostgreSQL restarted mid-run.

(The SIGKILL case lives in tests/planner/test_celery_worker.py.)
"""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from planner import tasks
from planner.models import SizingRun
from tests.factories import UserFactory
from tests.planner.test_celery_worker import _forget_connections, start_worker, stop, wait_for
from tests.plugin_services import services_required
from tests.reliability import drills
from tests.reliability.drills import Stack
from tests.reliability.private_services import PrivateRedis

pytestmark = [pytest.mark.services, pytest.mark.slow]
PASSWORD = "correct horse battery staple"


@pytest.fixture
def private_redis():
    redis = PrivateRedis()
    if not redis.available:
        if services_required():
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    redis.start()
    yield redis
    redis.close()


def _use_redis(url: str, settings) -> None:
    """Broker, chord backend and cache on ``url``, as the settings derive them in production."""
    from config.celery import app

    app.conf.broker_url = url
    app.conf.result_backend = url
    _forget_connections(app)
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.ResilientRedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "headroom",
            "OPTIONS": {"retry_after_s": 0.5},
        }
    }


DOCUMENT = {
    "name": "while redis is down",
    "traffic": {
        "peak_rps": 10,
        "mean_rps": 5,
        "prompt_tokens": {"mean": 500},
        "output_tokens": {"mean": 200},
    },
    "slo": {"ttft_ms": 2000, "tpot_ms": 60},
    "candidates": {"models": ["llama-3.1-8b"], "gpus": ["H100", "L40S"], "precisions": ["fp8"]},
}


def test_redis_down_keeps_the_site_answering_and_beat_enqueues_when_back(
    broker, private_redis, settings
):
    from django.core.cache import cache
    from django.core.management import call_command
    from django.test import Client

    call_command("load_catalog", verbosity=0)
    user = UserFactory(username="finance")
    settings.LOGIN_FAILURES_ALLOWED = 3
    _use_redis(private_redis.url, settings)
    broker = broker | {"redis_url": private_redis.url}
    api, browser = APIClient(), Client()
    assert browser.login(username="finance", password=PASSWORD)
    api.force_authenticate(user)
    assert api.get("/api/v1/scenarios/").status_code == 200
    assert cache._cache.get_client().keys("headroom:*")  # the throttles really count in Redis
    # given the one Redis (broker, chord backend, cache) stops
    private_redis.stop()
    try:
        started = time.monotonic()
        # then the API still answers: reads, writes, and a run saved with workers_available=false
        assert api.get("/api/v1/scenarios/").status_code == 200
        created = api.post("/api/v1/scenarios/", DOCUMENT, format="json")
        assert created.status_code == 201, created.content
        answer = api.post(f"/api/v1/scenarios/{created.json()['id']}/run/")
        assert answer.status_code == 202 and answer.json()["workers_available"] is False
        assert "unavailable" in answer.json()["message"]
        # and signing in works, with failures still throttled (in process memory meanwhile)
        signed_in = Client().post("/accounts/login/", {"username": "finance", "password": PASSWORD})
        assert signed_in.status_code == 302
        guesser = Client()
        codes = [
            guesser.post("/accounts/login/", {"username": "finance", "password": "x"}).status_code
            for _ in range(4)
        ]
        assert codes == [200, 200, 200, 429]
        assert time.monotonic() - started < 30  # no hang on a dead Redis
        run = SizingRun.objects.get(pk=answer.json()["id"])
        assert run.status == SizingRun.Status.QUEUED and run.candidate_count > 0
        # and beat, still without Redis, keeps the run without losing it
        settings.RUN_STALE_SECONDS = 0
        tasks.requeue_stuck_runs()
        assert SizingRun.objects.get(pk=run.pk).status == SizingRun.Status.QUEUED
    finally:
        private_redis.start()
        _use_redis(private_redis.url, settings)
    # when Redis is back and beat runs, then a worker finishes the run: nothing lost
    worker = start_worker(broker, "after-outage")
    try:
        SizingRun.objects.filter(pk=run.pk).update(heartbeat_at=None)
        assert tasks.requeue_stuck_runs() == 1
        done = wait_for(run.pk, lambda r: r.is_finished, 120)
    finally:
        stop(worker)
    assert done.status == SizingRun.Status.SUCCEEDED, done.error
    assert done.results.count() == done.candidate_count


@pytest.fixture
def private_stack():
    """A PostgreSQL cluster and a Redis of this test's own (never the shared servers)."""
    stack = Stack()
    if not stack.available:
        if services_required():
            pytest.fail("needs PostgreSQL server binaries (initdb, pg_ctl) and redis-server")
        pytest.skip("needs PostgreSQL server binaries (initdb, pg_ctl) and redis-server")
    with stack:
        yield stack


def test_postgresql_restart_mid_run_loses_nothing_and_the_web_never_500s(private_stack):
    # given runs being sized by a worker and a web process holding a database connection,
    # when the private PostgreSQL restarts
    result = drills.postgres_restart(private_stack)
    # then the web's next requests answer (stale connections are health-checked, not used)
    assert result["web_after"] == [200, 200, 200, 200], result
    # and the tasks retry on the transient errors: every run finishes, nothing duplicated
    assert result["lost"] == 0 and result["duplicate_rows"] == 0, result
    assert result["incomplete"] == 0, result
