"""Backpressure: run results are paged, the run detail stays light, each user has a quota of
runs waiting for the workers (429), and paging bounds are 400s."""

import pytest
from django.db import connection

from planner.models import SizingRun
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(catalog, user):
    scenario = make_scenario(owner=user, models=["llama-3.1-8b", "Qwen3-32B"])
    return sizing_run_start(scenario=scenario)


def test_the_run_detail_carries_the_summary_not_the_results(api, run):
    detail = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert detail["status"] == "succeeded" and detail["summary"]["per_gpu"]
    assert "results" not in detail
    assert detail["results_url"].endswith(f"/api/v1/runs/{run.pk}/results/")


def test_results_come_in_pages_best_rank_first(api, run):
    # given a run of more candidates than a small page
    total = run.candidate_count
    assert total > 10
    # when its results are read 10 at a time, then the pages cover every row once, in rank order
    seen, url = [], f"/api/v1/runs/{run.pk}/results/?limit=10"
    while url:
        page = api.get(url).json()
        assert page["count"] == total and len(page["results"]) <= 10
        seen += page["results"]
        url = page["next"]
    assert [r["rank"] for r in seen] == list(range(1, total + 1))
    assert len({r["candidate_key"] for r in seen}) == total
    # and a page is at most 1,000 rows, 100 by default
    assert len(api.get(f"/api/v1/runs/{run.pk}/results/").json()["results"]) == min(100, total)


def test_another_users_results_are_404(other_api, run):
    assert other_api.get(f"/api/v1/runs/{run.pk}/results/").status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/scenarios/", "/api/v1/gpus/", "/api/v1/runs/"])
def test_offsets_and_limits_past_what_a_database_counts_are_handled(api, path):
    huge = str(2**64)
    answer = api.get(path, {"offset": huge})
    assert answer.status_code == 400 and "offset" in answer.json()["errors"]
    assert api.get(path, {"limit": huge}).status_code == 200


def test_a_user_past_the_run_quota_gets_a_429(api, user, catalog, settings):
    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL")
    # given the user already has 2 runs waiting (the workers are busy), and a quota of 2
    settings.RUNS_ACTIVE_PER_USER = 2
    scenario = make_scenario(owner=user, models=["llama-3.1-8b"], gpus=["H100"])
    for _ in range(2):
        SizingRun.objects.create(scenario=scenario, inputs={}, status=SizingRun.Status.QUEUED)
    # when they start another, then it is refused with a clear 429 and nothing is saved
    answer = api.post(f"/api/v1/scenarios/{scenario.pk}/run/")
    assert answer.status_code == 429
    assert int(answer["Retry-After"]) > 0
    assert "the limit is 2" in answer.json()["message"]
    assert scenario.runs.count() == 2
    # and once one has finished, the next run starts
    scenario.runs.filter(pk=scenario.runs.first().pk).update(status=SizingRun.Status.SUCCEEDED)
    assert api.post(f"/api/v1/scenarios/{scenario.pk}/run/").status_code == 202


def test_the_web_page_explains_the_quota(client, user, catalog, settings):
    settings.RUNS_ACTIVE_PER_USER = 1
    scenario = make_scenario(owner=user, models=["llama-3.1-8b"], gpus=["H100"])
    SizingRun.objects.create(scenario=scenario, inputs={}, status=SizingRun.Status.RUNNING)
    client.force_login(user)
    page = client.post(f"/scenarios/{scenario.pk}/run/", follow=True)
    assert b"the limit is 1" in page.content
    assert scenario.runs.count() == 1


def test_a_scenario_saved_with_an_unreachable_p95_answers_400_at_run_start(api, user, catalog):
    # given a scenario saved before a p95 beyond 3.87x the mean was refused at input
    scenario = make_scenario(owner=user, models=["llama-3.1-8b"], gpus=["H100"])
    type(scenario).objects.filter(pk=scenario.pk).update(output_tokens_p95=1200.0)  # mean 300
    # when its run starts, then a 400 names the field and the limit, and no run is saved
    answer = api.post(f"/api/v1/scenarios/{scenario.pk}/run/")
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    assert any("at most 3.87x the mean (300)" in m for m in errors["traffic.output_tokens.p95"])
    assert scenario.runs.count() == 0


def test_the_web_page_explains_an_unreachable_p95(client, user, catalog):
    scenario = make_scenario(owner=user, models=["llama-3.1-8b"], gpus=["H100"])
    type(scenario).objects.filter(pk=scenario.pk).update(output_tokens_p95=1200.0)  # mean 300
    client.force_login(user)
    page = client.post(f"/scenarios/{scenario.pk}/run/", follow=True)
    assert b"The run did not start" in page.content
    assert b"at most 3.87x the mean (300)" in page.content
    assert scenario.runs.count() == 0
