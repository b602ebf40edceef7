"""The sizing chain on real services: Celery workers (subprocesses) on Redis and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection

from planner.models import CandidateResult, SizingRun
from planner.services import sizing_run_start
from tests.factories import make_scenario
from tests.reliability.drills import stop  # noqa: F401 (re-exported to the fault tests)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def broker(redis_url, transactional_db, settings):
    """Point the producer at Redis on a queue of our own; skip unless on PostgreSQL."""
    if connection.vendor != "postgresql":
        pytest.skip("worker tests need PostgreSQL (a shared database across processes)")
    from config.celery import app

    queue = f"headroom-test-{uuid.uuid4().hex[:8]}"
    redis_url = private_redis_db(redis_url)
    old = {
        k: app.conf[k]
        for k in ("task_always_eager", "broker_url", "result_backend", "task_default_queue")
    }
    app.conf.update(
        task_always_eager=False,
        broker_url=redis_url,
        result_backend=redis_url,
        task_default_queue=queue,
    )
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    _forget_connections(app)  # pools made before (eager tests) would keep the old broker
    yield {"queue": queue, "redis_url": redis_url}
    app.conf.update(old)
    _forget_connections(app)


def private_redis_db(url: str) -> str:
    """``url`` on a Redis database of this test process's own (1 + the xdist worker's index):
    the broker's unacknowledged-message hash is one per database, so tests in parallel
    processes would otherwise read each other's messages (their run ids collide: each
    process has its own test database)."""
    from urllib.parse import urlsplit, urlunsplit

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{1 + index % 15}"))


def _forget_connections(app) -> None:
    app._pool = None
    app.amqp._producer_pool = None
    app.__dict__.pop("backend", None)


def _database_url() -> str:
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def start_worker(broker, name: str, **env) -> subprocess.Popen:
    environment = (
        os.environ
        | {
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": broker["redis_url"],
            "CELERY_TASK_DEFAULT_QUEUE": broker["queue"],
            "PYTHONUNBUFFERED": "1",
        }
        | {k: str(v) for k, v in env.items()}
    )
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        "--pool=prefork",
        "--concurrency=1",
        "-Q",
        broker["queue"],
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=WARNING",
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=environment,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(run_id: int, condition, timeout_s: float) -> SizingRun:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = SizingRun.objects.get(pk=run_id)
        if condition(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"timed out: run {run_id} is {run.status} at {run.progress}%")


def test_worker_runs_a_multi_candidate_scenario_end_to_end(broker, settings):
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
    worker = start_worker(broker, "solo")
    try:
        # given a saved scenario; when it is started, a worker on Redis picks the chain up
        run = sizing_run_start(scenario=make_scenario())
        assert run.status == SizingRun.Status.QUEUED
        done = wait_for(run.pk, lambda r: r.is_finished, 120)
    finally:
        stop(worker)
    # then the results are PostgreSQL rows, one per candidate, ranked, with recommendations
    assert done.status == SizingRun.Status.SUCCEEDED, done.error
    assert done.results.count() == done.candidate_count > 100
    assert done.results.filter(recommended=True).count() == 4
    assert done.progress == 100 and done.batch_count == len(done.batches_done)


def test_killed_worker_run_completes_on_another_without_duplicates(broker, settings):
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
    slow = {
        "SIZING_BATCH_DELAY_S": "0.5",
        "CELERY_VISIBILITY_TIMEOUT": "6",
        "CELERY_UNACKED_RESTORE_INTERVAL": "1",
        "CELERY_UNACKED_RESTORE_THROTTLE": "1",
    }
    settings.SIZING_BATCH_SIZE = 8  # more batches: the kill lands mid-run
    first = start_worker(broker, "doomed", **slow)
    second = None
    try:
        run = sizing_run_start(scenario=make_scenario())
        # when the first worker has saved some batches, kill it with SIGKILL mid-run
        wait_for(run.pk, lambda r: len(r.batches_done) >= 2, 120)
        stop(first, signal.SIGKILL)
        killed_at = SizingRun.objects.get(pk=run.pk)
        assert not killed_at.is_finished
        second = start_worker(broker, "survivor", **slow)
        done = wait_for(run.pk, lambda r: r.is_finished, 240)
    finally:
        stop(first, signal.SIGKILL)
        if second is not None:
            stop(second)
    # then the run finished on the other worker, with exactly one row per candidate
    assert done.status == SizingRun.Status.SUCCEEDED, done.error
    keys = list(CandidateResult.objects.filter(run=done).values_list("candidate_key", flat=True))
    assert len(keys) == len(set(keys)) == done.candidate_count
