"""The calibration page: shared profiles with their error, and a user's own upload."""

import pytest

from fleets.models import CalibrationProfile, GpuSku
from tests.factories import UserFactory
from tests.fleets.test_calibration import measured_csv

pytestmark = pytest.mark.django_db


def test_calibration_page_lists_profiles_and_fits_an_upload(client, catalog, tmp_path):
    user = UserFactory()
    client.force_login(user)
    page = client.get("/calibration/")
    assert page.status_code == 200 and b"Calibrate your fleet" in page.content
    assert page.content.count(b"<tr>") >= CalibrationProfile.objects.filter(owner=None).count()
    gpu = GpuSku.objects.get(slug="h100_sxm")  # shipped profiles are per generation
    path = measured_csv(tmp_path / "lab.csv")
    with path.open("rb") as handle:
        done = client.post(
            "/calibration/", {"file": handle, "gpu": gpu.pk, "engine_family": "vllm"}
        )
    assert done.status_code == 302
    assert CalibrationProfile.objects.filter(owner=user, gpu=gpu).exists()
    assert b"yours" in client.get("/calibration/").content


def test_calibration_upload_refusal_names_line_and_field(client, catalog, tmp_path):
    user = UserFactory()
    client.force_login(user)
    bad = tmp_path / "bad.csv"
    bad.write_text("source,model\nx,y\n")
    gpu = GpuSku.objects.get(slug="h100_sxm")
    with bad.open("rb") as handle:
        page = client.post(
            "/calibration/", {"file": handle, "gpu": gpu.pk, "engine_family": "vllm"}
        )
    assert page.status_code == 200 and b"refused" in page.content
    assert not CalibrationProfile.objects.filter(owner=user).exists()


def test_calibration_page_needs_sign_in(client, db):
    assert client.get("/calibration/").status_code == 302
