"""Run again (the run's own snapshot), clone, archive and delete: services, API and UI."""

import pytest
from rest_framework.test import APIClient

from planner import services
from planner.models import Scenario, SizingRun
from pricing.models import GpuHourPrice
from tests.factories import UserFactory, make_scenario

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100", "L40S"], "precisions": ["fp8"]}


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def owner(db):
    return UserFactory(username="owner")


@pytest.fixture
def colleague(db):
    return UserFactory(username="colleague")


@pytest.fixture
def scenario(catalog, owner, colleague):
    scenario = make_scenario(owner=owner, **SMALL)
    scenario.shared_with.add(colleague)
    return scenario


def test_rerun_sizes_the_original_snapshot_even_after_edits_and_price_changes(scenario):
    # given a finished run
    first = services.sizing_run_start(scenario=scenario)
    assert first.status == SizingRun.Status.SUCCEEDED
    # when the scenario and the price sheet change afterwards
    services.scenario_update(scenario=scenario, data={"peak_rps": 99.0, "gpus": ["H200"]})
    GpuHourPrice.objects.filter(sheet=first.price_sheet).update(usd_per_gpu_hour=123.0)
    rerun = services.sizing_run_rerun(run=first)
    # then the rerun's snapshot equals the original's inputs, and so do its answers
    assert rerun.pk != first.pk and rerun.scenario_id == first.scenario_id
    assert rerun.inputs == first.inputs
    assert rerun.price_sheet_id == first.price_sheet_id
    assert rerun.status == SizingRun.Status.SUCCEEDED
    assert rerun.summary["best"] == first.summary["best"]
    costs = lambda run: list(run.results.order_by("candidate_key").values_list("usd_per_month"))  # noqa: E731
    assert costs(rerun) == costs(first)
    # while running the scenario sizes what it says now
    fresh = services.sizing_run_start(scenario=scenario)
    assert fresh.inputs["traffic"]["peak_rps"] == 99.0 and set(fresh.inputs["gpus"]) == {"h200_sxm"}


def test_rerun_api_is_202_for_the_owner_and_403_for_a_colleague(scenario, owner, colleague):
    first = services.sizing_run_start(scenario=scenario)
    response = client_for(owner).post(f"/api/v1/runs/{first.pk}/rerun/")
    assert response.status_code == 202, response.json()
    rerun = SizingRun.objects.get(pk=response.json()["id"])
    assert rerun.inputs == first.inputs and response.json()["status"] == "succeeded"
    assert client_for(colleague).post(f"/api/v1/runs/{first.pk}/rerun/").status_code == 403
    stranger = client_for(UserFactory(username="stranger"))
    assert stranger.post(f"/api/v1/runs/{first.pk}/rerun/").status_code == 404
    assert SizingRun.objects.count() == 2


def test_run_again_button_reruns_the_snapshot(client, scenario, owner, colleague):
    first = services.sizing_run_start(scenario=scenario)
    client.force_login(owner)
    page = client.get(f"/runs/{first.pk}/").content.decode()
    assert f'action="/runs/{first.pk}/rerun/"' in page
    response = client.post(f"/runs/{first.pk}/rerun/")
    rerun = SizingRun.objects.exclude(pk=first.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{rerun.pk}/"
    assert rerun.inputs == first.inputs
    client.force_login(colleague)
    assert "/rerun/" not in client.get(f"/runs/{first.pk}/").content.decode()
    assert client.post(f"/runs/{first.pk}/rerun/").status_code == 404


def test_clone_copies_the_inputs_into_a_new_scenario_of_whoever_clones(scenario, owner, colleague):
    services.sizing_run_start(scenario=scenario)
    # when the colleague it is shared with clones it through the API
    response = client_for(colleague).post(f"/api/v1/scenarios/{scenario.pk}/clone/")
    # then a copy they own, with the same inputs, no runs, shared with nobody
    assert response.status_code == 201, response.json()
    body = response.json()
    copy = Scenario.objects.get(pk=body["id"])
    assert body["name"] == "Copy of Chat assistant" and body["owner"] == "colleague"
    assert body["shared_with"] == [] and body["latest_run"] is None
    original = services.scenario_flat(scenario)
    assert services.scenario_flat(copy) == original | {"name": "Copy of Chat assistant"}
    # the copy is theirs to change; the original is untouched
    assert (
        client_for(colleague)
        .patch(f"/api/v1/scenarios/{copy.pk}/", {"name": "mine"}, format="json")
        .status_code
        == 200
    )
    scenario.refresh_from_db()
    assert scenario.name == "Chat assistant" and scenario.runs.count() == 1


def test_clone_in_the_ui_opens_the_copy_for_editing(client, scenario, owner):
    client.force_login(owner)
    response = client.post(f"/scenarios/{scenario.pk}/clone/")
    copy = Scenario.objects.exclude(pk=scenario.pk).get()
    assert response["Location"] == f"/scenarios/{copy.pk}/edit/"
    assert copy.owner == owner and copy.name == "Copy of Chat assistant"


def test_archive_hides_from_the_lists_and_unarchive_brings_back(client, scenario, owner):
    api = client_for(owner)
    listed = lambda q="": [s["id"] for s in api.get(f"/api/v1/scenarios/{q}").json()["results"]]  # noqa: E731
    assert api.post(f"/api/v1/scenarios/{scenario.pk}/archive/").json()["archived_at"]
    assert listed() == [] and listed("?archived=true") == [scenario.pk]
    assert listed("?archived=any") == [scenario.pk]
    assert api.get("/api/v1/scenarios/?archived=maybe").status_code == 400
    assert api.get(f"/api/v1/scenarios/{scenario.pk}/").status_code == 200  # still readable
    client.force_login(owner)
    assert scenario.name not in client.get("/scenarios/").content.decode()
    assert scenario.name in client.get("/scenarios/?archived=1").content.decode()
    client.post(f"/scenarios/{scenario.pk}/archive/", {"archived": "0"})
    assert listed() == [scenario.pk]
    assert scenario.name in client.get("/scenarios/").content.decode()


def test_only_the_owner_archives_or_deletes(scenario, colleague):
    reader = client_for(colleague)
    assert reader.post(f"/api/v1/scenarios/{scenario.pk}/archive/").status_code == 403
    assert reader.delete(f"/api/v1/scenarios/{scenario.pk}/").status_code == 403
    assert Scenario.objects.filter(pk=scenario.pk, archived_at__isnull=True).exists()


def test_delete_removes_the_scenario_and_its_runs(client, scenario, owner):
    services.sizing_run_start(scenario=scenario)
    other = make_scenario(owner=owner, **SMALL)
    services.sizing_run_start(scenario=other)
    # API
    assert client_for(owner).delete(f"/api/v1/scenarios/{other.pk}/").status_code == 204
    assert not SizingRun.objects.filter(scenario_id=other.pk).exists()
    # UI: a confirmation page, then the POST
    client.force_login(owner)
    confirm = client.get(f"/scenarios/{scenario.pk}/delete/")
    assert confirm.status_code == 200 and "1 run" in confirm.content.decode()
    assert Scenario.objects.filter(pk=scenario.pk).exists()
    response = client.post(f"/scenarios/{scenario.pk}/delete/")
    assert response["Location"] == "/scenarios/"
    assert not Scenario.objects.exists() and not SizingRun.objects.exists()
