"""The API's ``shared_with``: usernames, set by the owner only; shared users read only."""

import pytest
from rest_framework.test import APIClient

from tests.factories import UserFactory, make_scenario


@pytest.fixture
def colleague(db):
    return UserFactory(username="colleague")


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_owner_sets_shared_with_and_the_colleague_reads(catalog, api, user, colleague):
    scenario = make_scenario(owner=user)
    url = f"/api/v1/scenarios/{scenario.pk}/"
    # when the owner shares with a colleague
    response = api.patch(url, {"shared_with": ["colleague"]}, format="json")
    # then the scenario lists them and the colleague reads it
    assert response.status_code == 200, response.json()
    assert response.json()["shared_with"] == ["colleague"]
    reader = client_for(colleague)
    assert reader.get(url).json()["shared_with"] == ["colleague"]
    assert scenario.pk in [s["id"] for s in reader.get("/api/v1/scenarios/").json()["results"]]
    # but cannot change it, nor who sees it, nor run it
    assert reader.patch(url, {"shared_with": []}, format="json").status_code == 403
    assert reader.patch(url, {"name": "mine"}, format="json").status_code == 403
    assert reader.post(f"{url}run/").status_code == 403
    assert list(scenario.shared_with.values_list("username", flat=True)) == ["colleague"]
    # when the owner revokes, the colleague gets 404
    assert api.patch(url, {"shared_with": []}, format="json").json()["shared_with"] == []
    assert reader.get(url).status_code == 404


def test_unknown_username_is_a_400_and_nothing_is_saved(catalog, api, user, colleague):
    from planner import scenario_io
    from planner.models import Scenario
    from tests.factories import scenario_data

    body = scenario_io.nest(scenario_data()) | {"shared_with": ["colleague", "ghost"]}
    response = api.post("/api/v1/scenarios/", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"shared_with": ["no user named ghost"]}
    assert not Scenario.objects.exists()
    body["shared_with"] = ["colleague", "finance"]  # the owner is dropped from the list
    created = api.post("/api/v1/scenarios/", body, format="json")
    assert created.status_code == 201 and created.json()["shared_with"] == ["colleague"]
