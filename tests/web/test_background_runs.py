"""Embedded default (in-process tasks, no broker): "Save and run" answers at once with the
progress page, the run sizes in a background thread, and the page shows its results."""

import time

import pytest

from planner.models import Scenario, SizingRun
from tests.factories import UserFactory
from tests.web.conftest import form_post

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.background]


def wait_finished(run_id: int, seconds: float = 120) -> SizingRun:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run = SizingRun.objects.get(pk=run_id)
        if run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish in {seconds} s")


def test_save_and_run_answers_before_the_run_finishes(client, catalog, settings):
    # given the embedded default and a run slow enough to see (1 s per batch, 4+ batches)
    assert settings.CELERY_TASK_ALWAYS_EAGER and settings.SIZING_RUN_IN_BACKGROUND
    settings.SIZING_BATCH_SIZE = 4
    settings.SIZING_BATCH_DELAY_S = 1.0
    client.force_login(UserFactory(username="owner"))
    # when the reviewer saves and runs
    started = time.monotonic()
    response = client.post("/scenarios/new/", form_post(action="run"))
    answered_s = time.monotonic() - started
    # then the browser gets the run page at once, while the run is still unfinished
    run = SizingRun.objects.get(scenario=Scenario.objects.get())
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert run.batch_count >= 4
    assert answered_s < run.batch_count * settings.SIZING_BATCH_DELAY_S
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-progress-bar"' in page and "hx-get" in page  # the polled progress page
    # and the thread finishes the run, which the polled partial then shows
    run = wait_finished(run.pk)
    assert run.status == SizingRun.Status.SUCCEEDED, run.error
    assert run.results.count() == run.candidate_count
    body = client.get(f"/runs/{run.pk}/progress/", HTTP_HX_REQUEST="true").content.decode()
    assert "run-status done" in body  # the results partial, no longer the polled bar


def test_run_again_also_runs_in_the_background(client, catalog, settings):
    owner = UserFactory(username="owner")
    client.force_login(owner)
    client.post("/scenarios/new/", form_post(action="run"))
    first = wait_finished(SizingRun.objects.get().pk)
    settings.SIZING_BATCH_SIZE = 4
    settings.SIZING_BATCH_DELAY_S = 1.0
    started = time.monotonic()
    response = client.post(f"/runs/{first.pk}/rerun/")
    assert time.monotonic() - started < 2.0
    rerun = SizingRun.objects.exclude(pk=first.pk).get()
    assert response["Location"] == f"/runs/{rerun.pk}/"
    assert wait_finished(rerun.pk).status == SizingRun.Status.SUCCEEDED
    assert rerun.inputs == first.inputs


def test_a_crash_in_the_thread_fails_the_run_readably(client, catalog, monkeypatch):
    from planner import tasks

    def broken(run_id):
        raise RuntimeError("boom in the chain")

    monkeypatch.setattr(tasks, "enqueue_run", broken)
    client.force_login(UserFactory(username="owner"))
    client.post("/scenarios/new/", form_post(action="run"))
    run = wait_finished(SizingRun.objects.get().pk, seconds=30)
    assert run.status == SizingRun.Status.FAILED and "boom in the chain" in run.error
