"""Staff catalog writes are validated like user input: a bad alias, a non-object config or
non-numeric constants is a 400 naming the field; a GPU or model in use cannot be deleted."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from fleets.models import CalibrationProfile, GpuSku, ModelArchitecture
from tests.factories import UserFactory, make_scenario, scenario_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(catalog):
    api = APIClient()
    api.force_authenticate(UserFactory(username="catalog-staff", is_staff=True))
    return api


@pytest.mark.parametrize("route", ["models", "gpus"])
@pytest.mark.parametrize("aliases", [True, "x", [1], [""], {"a": 1}, ["ok", None]])
def test_aliases_must_be_a_list_of_names(staff, route, aliases):
    row = (ModelArchitecture if route == "models" else GpuSku).objects.first()
    before = list(row.aliases)
    answer = staff.patch(f"/api/v1/{route}/{row.pk}/", {"aliases": aliases}, format="json")
    assert answer.status_code == 400, answer.content
    assert "aliases" in answer.json()["errors"]
    row.refresh_from_db()
    assert row.aliases == before


def test_after_a_refused_alias_users_still_create_scenarios(staff):
    row = ModelArchitecture.objects.get(slug="llama-3.1-8b")
    staff.patch(f"/api/v1/models/{row.pk}/", {"aliases": True}, format="json")
    user = APIClient()
    user.force_authenticate(UserFactory(username="planner-user"))
    from tests.api.test_api import body

    assert user.post("/api/v1/scenarios/", body(), format="json").status_code == 201


@pytest.mark.parametrize(
    "field, value",
    [
        ("constants", True),
        ("constants", {"eta_mem": "fast"}),
        ("constants", None),
        ("free_constants", "eta_mem"),
        ("free_constants", None),
        ("cv_error", [1]),
        ("fitted_sources", None),
    ],
)
def test_calibration_profile_json_columns_are_checked(staff, field, value):
    profile = CalibrationProfile.objects.filter(owner__isnull=True).first()
    answer = staff.patch(
        f"/api/v1/calibration-profiles/{profile.pk}/", {field: value}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]


def test_a_gpu_used_by_scenarios_cannot_be_deleted(staff):
    # given a scenario with H100 among its candidate GPUs
    scenario = make_scenario(**scenario_data(gpus=["H100", "L40S"]))
    h100 = GpuSku.objects.get(slug="h100_sxm")
    # when staff delete the GPU, then the API refuses with 409 naming the scenarios
    answer = staff.delete(f"/api/v1/gpus/{h100.pk}/")
    assert answer.status_code == 409
    assert "1 scenario" in answer.json()["message"]
    assert set(scenario.candidate_gpus.values_list("slug", flat=True)) == {"h100_sxm", "l40s"}
    model = scenario.candidate_models.first()
    assert staff.delete(f"/api/v1/models/{model.pk}/").status_code == 409
    # and a GPU no scenario uses is deleted as before
    unused = GpuSku.objects.exclude(scenarios__isnull=False).first()
    assert staff.delete(f"/api/v1/gpus/{unused.pk}/").status_code == 204


def test_the_admin_refuses_to_delete_a_gpu_in_use(catalog):
    make_scenario(**scenario_data(gpus=["H100"]))
    h100 = GpuSku.objects.get(slug="h100_sxm")
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = admin.post(f"/admin/fleets/gpusku/{h100.pk}/delete/", {"post": "yes"})
    assert page.status_code == 200 and b"is a candidate in 1 scenario" in page.content
    assert GpuSku.objects.filter(pk=h100.pk).exists()
