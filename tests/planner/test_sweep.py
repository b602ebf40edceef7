"""Beat's sweep has its own queue and re-sends only runs whose messages are really lost."""

from datetime import timedelta

import pytest
from django.conf import settings as live_settings
from django.utils import timezone

from planner import broker as run_messages
from planner import tasks
from planner.models import SizingRun
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = [pytest.mark.services]


def test_the_sweep_runs_on_a_queue_of_its_own_that_workers_consume():
    entry = live_settings.CELERY_BEAT_SCHEDULE["requeue-stuck-runs"]
    assert entry["options"]["queue"] == live_settings.CELERY_SWEEP_QUEUE
    assert live_settings.CELERY_SWEEP_QUEUE != live_settings.CELERY_TASK_DEFAULT_QUEUE
    consumed = {q.name for q in live_settings.CELERY_TASK_QUEUES}  # a worker without -Q
    assert consumed == {live_settings.CELERY_TASK_DEFAULT_QUEUE, live_settings.CELERY_SWEEP_QUEUE}
    assert entry["options"]["expires"] < entry["schedule"]  # sweeps never pile up


def _make_stale() -> None:
    SizingRun.objects.update(heartbeat_at=timezone.now() - timedelta(hours=1))


def test_a_run_waiting_behind_a_backlog_is_not_sent_twice(broker, settings, catalog):
    import redis

    # given queued runs whose messages wait in the queue (no worker), all "stale"
    runs = [
        sizing_run_start(scenario=make_scenario(models=["llama-3.1-8b"], gpus=["H100"]))
        for _ in range(3)
    ]
    client = redis.Redis.from_url(broker["redis_url"])
    try:
        assert client.llen(broker["queue"]) == 3
        assert run_messages.runs_with_messages([broker["queue"]]) == {r.pk for r in runs}
        # when beat sweeps, then nothing is re-sent: the backlog does not grow
        _make_stale()
        assert tasks.requeue_stuck_runs() == 0
        assert client.llen(broker["queue"]) == 3
        # when one run's message is lost, then the sweep re-sends that one only
        client.lpop(broker["queue"])
        _make_stale()
        assert tasks.requeue_stuck_runs() == 1
        assert client.llen(broker["queue"]) == 3
        assert sorted(SizingRun.objects.values_list("enqueue_count", flat=True)) == [1, 1, 2]
    finally:
        client.delete(broker["queue"])
