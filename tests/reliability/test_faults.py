"""Faults with the real services: Redis down, a worker killed, PostgreSQL restarted mid-run.

(The SIGKILL case lives in tests/planner/test_celery_worker.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from planner import tasks
from planner.models import CandidateResult, SizingRun
from planner.services import sizing_run_start
from tests.factories import UserFactory, make_scenario
from tests.planner.test_celery_worker import _forget_connections, start_worker, stop, wait_for
from tests.plugin_services import services_required
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


def _pg_restart_command() -> list[str] | None:
    if not shutil.which("pg_ctlcluster") or os.geteuid() != 0:
        return None
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        return None
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"]


def test_postgresql_restart_mid_run_retries_and_finishes(broker, settings):
    command = _pg_restart_command()
    if command is None:
        if services_required():
            pytest.fail("cannot restart PostgreSQL here (needs root and pg_ctlcluster)")
        pytest.skip("cannot restart PostgreSQL here")
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
    settings.SIZING_BATCH_SIZE = 8
    worker = start_worker(broker, "survives-pg", SIZING_BATCH_DELAY_S="0.3")
    try:
        run = sizing_run_start(scenario=make_scenario())
        wait_for(run.pk, lambda r: len(r.batches_done) >= 2, 120)
        # when PostgreSQL restarts under the running chain
        subprocess.run(command, check=True, capture_output=True, timeout=60)
        connection.close()  # this test's own connection died with the server
        # then the tasks retry on the transient errors and the run finishes
        done = wait_for(run.pk, lambda r: r.is_finished, 240)
    finally:
        stop(worker)
        connection.close()
    assert done.status == SizingRun.Status.SUCCEEDED, done.error
    keys = list(CandidateResult.objects.filter(run=done).values_list("candidate_key", flat=True))
    assert len(keys) == len(set(keys)) == done.candidate_count
