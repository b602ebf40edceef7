"""Embedded default (no broker, in-process tasks): a run started from the browser sizes in a
background thread, so "Save and run" answers at once with the same progress page as the full
stack, instead of holding the request for the whole run.

The thread starts when the transaction that saved the run commits (the run row must be
visible to it) and closes its database connections when done. With a broker configured the
workers do this and nothing here runs.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

log = logging.getLogger(__name__)


def wanted() -> bool:
    """Whether runs started from the browser go to a background thread."""
    return settings.CELERY_TASK_ALWAYS_EAGER and settings.SIZING_RUN_IN_BACKGROUND


def _work(run_id: int) -> None:
    from planner import tasks
    from planner.models import SizingRun

    close_old_connections()
    try:
        tasks.enqueue_run(run_id)  # eager: the whole chain runs here, in this thread
    except Exception as exc:  # never a silent thread death: the run page must say so
        log.exception("background sizing of run %s failed", run_id)
        SizingRun.objects.filter(pk=run_id).exclude(status=SizingRun.Status.SUCCEEDED).update(
            status=SizingRun.Status.FAILED, error=str(exc)[:4000], finished_at=timezone.now()
        )
    finally:
        connections.close_all()


def start_after_commit(run_id: int) -> None:
    """Size run ``run_id`` in a daemon thread once the current transaction commits."""

    def start() -> None:
        threading.Thread(target=_work, args=(run_id,), name=f"run-{run_id}", daemon=True).start()

    transaction.on_commit(start)
