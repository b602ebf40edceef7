"""The calibration page: shared profiles with their error, and a user's own upload — one
file or a sweep of several — previewed point by point before it is saved."""

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from fleets.models import CalibrationProfile, GpuSku
from tests.factories import UserFactory
from tests.fleets.test_calibration import POINTS, measured_csv

pytestmark = pytest.mark.django_db


def vllm_result(isl, osl, concurrency, tok_s, ttft_ms, tpot_ms) -> bytes:
    """A ``vllm bench serve --save-result`` JSON for one load point (Llama 3.1 8B)."""
    completed = 20 * concurrency
    return json.dumps(
        {
            "date": "20260301-120000",
            "backend": "vllm",
            "model_id": "meta-llama/Llama-3.1-8B-Instruct",
            "request_rate": "inf",
            "max_concurrency": concurrency,
            "completed": completed,
            "total_input_tokens": isl * completed,
            "total_output_tokens": osl * completed,
            "output_throughput": tok_s,
            "median_ttft_ms": ttft_ms,
            "median_tpot_ms": tpot_ms,
        }
    ).encode()


def sweep_files():
    return [
        SimpleUploadedFile(f"c{p[2]}-{p[0]}x{p[1]}.json", vllm_result(*p), "application/json")
        for p in POINTS
    ]


def conditions(gpu, **extra):
    return {"gpu": gpu.pk, "engine_family": "vllm", "num_gpus": 1, "tp": 1} | {
        "weight_precision": "fp8",
        **extra,
    }


@pytest.fixture
def user_client(client):
    user = UserFactory()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def h100(catalog):
    return GpuSku.objects.get(slug="h100_sxm")  # shipped profiles are per generation


def test_calibration_page_states_the_limit_and_fits_a_csv_after_preview(
    user_client, h100, tmp_path
):
    page = user_client.get("/calibration/")
    html = page.content.decode()
    assert page.status_code == 200 and "Calibrate your fleet" in html
    assert "Up to 20 files at once, each at most 2 MB" in html
    assert "multiple" in re.search(r'<input type="file"[^>]*>', html).group(0)
    assert "Tensor-parallel degree (TP)" in html and "GPUs in the instance" in html
    assert page.content.count(b"<tr>") >= CalibrationProfile.objects.filter(owner=None).count()
    path = measured_csv(tmp_path / "lab.csv")
    with path.open("rb") as handle:
        preview = user_client.post(
            "/calibration/", {"file": handle, "gpu": h100.pk, "engine_family": "vllm"}
        )
    assert preview.status_code == 200 and b'id="preview-table"' in preview.content
    assert not CalibrationProfile.objects.filter(owner=user_client.user).exists()
    token = preview.context["preview"]["token"]
    done = user_client.post("/calibration/", {"action": "save", "token": token})
    assert done.status_code == 302
    assert CalibrationProfile.objects.filter(owner=user_client.user, gpu=h100).exists()
    assert b"yours" in user_client.get("/calibration/").content


def test_a_sweep_of_vllm_jsons_previews_each_point_then_saves_what_it_showed(user_client, h100):
    # given six vllm bench serve results (3 concurrencies x 2 shapes), uploaded at once
    response = user_client.post("/calibration/", conditions(h100) | {"file": sweep_files()})
    # then the preview lists measured vs predicted for every point and saves nothing
    assert response.status_code == 200, response.context["form"].errors
    preview = response.context["preview"]
    assert len(preview["names"]) == 6
    assert len(preview["points"]) == 18  # throughput, TTFT and TPOT of each file
    files = {p["file"] for p in preview["points"]}
    assert files == {f.name for f in sweep_files()}
    by_key = {(p["file"], p["metric"]): p for p in preview["points"]}
    tpot = by_key[("c64-128x1024.json", "TPOT (ms)")]
    assert tpot["measured"] == 11.0 and tpot["concurrency"] == "64"
    assert tpot["lengths"] == "128 / 1024"
    assert tpot["now"] > 0 and tpot["fitted"] > 0
    assert tpot["fitted_pct"] == pytest.approx(100 * (tpot["fitted"] - 11.0) / 11.0)
    assert not CalibrationProfile.objects.filter(owner=user_client.user).exists()
    html = response.content.decode()
    assert "c64-128x1024.json" in html and "Predicted with this fit" in html
    # when saved, the stored profile is the one previewed
    shown = preview["profiles"]
    user_client.post("/calibration/", {"action": "save", "token": preview["token"]})
    saved = CalibrationProfile.objects.filter(owner=user_client.user)
    assert [(p.name, p.n_points) for p in saved] == [(s["name"], s["n_points"]) for s in shown]
    assert saved[0].relative_error == pytest.approx(shown[0]["relative_error"])
    assert saved[0].source.startswith("user upload c1-1024x128.json, c16-1024x128.json")
    # and the token is spent: a second save does nothing
    again = user_client.post("/calibration/", {"action": "save", "token": preview["token"]})
    assert again.status_code == 302 and saved.count() == len(shown)


def test_discard_saves_nothing(user_client, h100):
    response = user_client.post("/calibration/", conditions(h100) | {"file": sweep_files()})
    user_client.post(
        "/calibration/", {"action": "discard", "token": response.context["preview"]["token"]}
    )
    assert not CalibrationProfile.objects.filter(owner=user_client.user).exists()


def test_one_bad_file_refuses_the_sweep_naming_it(user_client, h100):
    files = sweep_files()
    files[2] = SimpleUploadedFile("broken.json", b'{"completed": 3}')
    response = user_client.post("/calibration/", conditions(h100) | {"file": files})
    assert response.status_code == 400
    html = response.content.decode()
    assert "broken.json" in html and "refused, nothing saved" in html
    assert 'id="error-summary"' in html and 'href="#id_file"' in html
    assert response.context["preview"] is None


def test_too_many_files_and_missing_conditions_are_refused(user_client, h100):
    many = [SimpleUploadedFile(f"r{i}.json", b"{}") for i in range(21)]
    response = user_client.post("/calibration/", conditions(h100) | {"file": many})
    assert response.status_code == 400 and "upload at most 20 at once" in response.content.decode()
    response = user_client.post(
        "/calibration/", {"gpu": h100.pk, "engine_family": "vllm", "file": sweep_files()}
    )
    assert response.status_code == 400 and "num_gpus" in response.content.decode()


def test_calibration_upload_refusal_names_line_and_field(user_client, h100, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("source,model\nx,y\n")
    with bad.open("rb") as handle:
        page = user_client.post(
            "/calibration/", {"file": handle, "gpu": h100.pk, "engine_family": "vllm"}
        )
    assert page.status_code == 400 and b"refused" in page.content
    assert not CalibrationProfile.objects.filter(owner=user_client.user).exists()


def test_calibration_page_needs_sign_in(client, db):
    assert client.get("/calibration/").status_code == 302


def test_a_profile_without_points_of_its_own_is_marked_borrowed(user_client, catalog):
    # given the shipped profiles: some are composed for a generation x engine no run measured
    borrowed = CalibrationProfile.objects.filter(owner=None, n_points=0)
    measured = CalibrationProfile.objects.filter(owner=None, n_points__gt=0)
    assert borrowed.exists() and measured.exists()
    # when the page lists them, then each composed one says so and no measured one does
    html = user_client.get("/calibration/").content.decode()
    rows = re.findall(r"<tr><td>(.*?)</td>", html, flags=re.S)
    marked = [row.split(" <span", 1)[0] for row in rows if ">borrowed</span>" in row]
    assert sorted(marked) == sorted(p.name for p in borrowed)
