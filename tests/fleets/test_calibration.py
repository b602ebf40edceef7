"""Calibration profiles: commands, storage, fallback selection, admin uploads, bad input."""

import csv
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fleets import calibration
from fleets.models import CalibrationProfile

DATA = Path(__file__).parent / "data"
COLUMNS = ("source", "source_date_or_version", "model", "gpu", "num_gpus", "tp", "pp", "ep",
           "engine", "weight_precision", "kv_precision", "isl", "osl", "concurrency_or_rate",
           "metric", "value", "notes")  # fmt: skip

# Llama 3.1 8B FP8 on one H100 with vLLM, measured at three loads and two shapes (plausible
# numbers: about 70 % of HBM bandwidth, a few ms of step overhead).
POINTS = [
    # isl, osl, concurrency, output tok/s, ttft ms, tpot ms
    (1024, 128, 1, 118.0, 28.0, 8.1),
    (1024, 128, 16, 1500.0, 95.0, 9.6),
    (1024, 128, 64, 4000.0, 260.0, 13.5),
    (128, 1024, 1, 122.0, 12.0, 8.0),
    (128, 1024, 16, 1800.0, 30.0, 8.7),
    (128, 1024, 64, 5600.0, 60.0, 11.0),
]


METRICS = ("output_tok_s_per_gpu", "ttft_ms_median", "tpot_ms_median")


def measured_csv(path: Path, points=POINTS, metrics=METRICS, **override) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for isl, osl, conc, tput, ttft, tpot in points:
            for metric, value in zip(METRICS, (tput, ttft, tpot), strict=True):
                if metric not in metrics:
                    continue
                row = dict(
                    source="our lab", source_date_or_version="2026-03-01",
                    model="Llama-3.1-8B", gpu="H100", num_gpus="1", tp="1", pp="1", ep="",
                    engine="vLLM 0.11", weight_precision="FP8", kv_precision="FP8",
                    isl=str(isl), osl=str(osl), concurrency_or_rate=f"concurrency={conc}",
                    metric=metric, value=str(value), notes="",
                )  # fmt: skip
                writer.writerow({**row, **override})
    return path


def UPLOADED():  # noqa: N802 - reads like the queryset it is
    """Profiles other than the shipped fit (which the catalog fixture loads)."""
    return CalibrationProfile.objects.exclude(source="shipped fit")


@pytest.fixture
def lab_csv(tmp_path, request):
    """A small measured CSV; with the catalog loaded, the shipped profiles are removed so
    each test sees only what it fits."""
    if "catalog" in request.fixturenames:
        CalibrationProfile.objects.all().delete()
    return measured_csv(tmp_path / "lab.csv")


def test_calibrate_fits_and_saves_a_profile_with_its_cv_error(catalog, lab_csv):
    # given a small measured CSV for H100 x vLLM
    # when calibrating
    out = io.StringIO()
    call_command("calibrate", str(lab_csv), stdout=out, stderr=io.StringIO())
    # then an H100 x vLLM profile is saved with constants, rows, CV error and source, and
    # named with the engine release the file states ("vLLM 0.11")
    profile = UPLOADED().get(
        gpu__slug="h100_sxm", engine_family="vllm", precision="", engine_version=""
    )
    assert profile.name == "h100_sxm / vllm 0.11 (newest)"
    assert UPLOADED().filter(gpu__slug="h100_sxm", engine_version="0.11").exists()
    assert profile.quality["n_points"] == 18 and "bound_hits" in profile.quality
    assert profile.source == "user upload lab.csv"
    assert profile.n_points == 18 and len(profile.fitted_row_ids) == 18
    assert set(profile.constants) >= {"eta_mem", "step_overhead_s"}
    assert 0 < profile.relative_error < 1
    assert profile.cv_error["tpot_ms"]["n"] > 0
    assert profile.fitted_sources == ["our lab"]
    assert "h100_sxm / vllm 0.11" in out.getvalue()


def test_calibrate_dry_run_saves_nothing(catalog, lab_csv):
    call_command("calibrate", str(lab_csv), "--dry-run", stdout=io.StringIO(), stderr=io.StringIO())
    assert not UPLOADED().exists()


def test_calibrate_again_replaces_the_profiles_of_that_source(catalog, lab_csv):
    # given a calibration already saved from this file
    for _ in range(2):
        call_command("calibrate", str(lab_csv), stdout=io.StringIO(), stderr=io.StringIO())
    # then the second run replaced, not duplicated, them
    names = list(UPLOADED().values_list("name", flat=True))
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"metric": "tokens_per_joule"}, "metric"),
        ({"value": "fast"}, "value"),
        ({"isl": ""}, "isl"),
        ({"gpu": ""}, "gpu"),
        ({"concurrency_or_rate": ""}, "concurrency_or_rate"),
    ],
)
def test_bad_rows_are_refused_naming_line_and_field_and_nothing_is_saved(
    catalog, tmp_path, override, field
):
    # given a CSV whose rows have an unknown metric, a non-number or a missing condition
    path = measured_csv(tmp_path / "bad.csv", **override)
    # when calibrating, then the file is refused naming the first line and the field
    with pytest.raises(CommandError, match=rf"line 2, field '{field}'"):
        call_command("calibrate", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert not UPLOADED().exists()


def test_too_few_points_for_the_constants_is_refused_with_the_reason(catalog, tmp_path):
    # given TTFT and TPOT at one condition: 2 points (the priors would be all a profile says)
    path = measured_csv(tmp_path / "thin.csv", points=POINTS[:1], metrics=METRICS[1:])
    # when calibrating, then the fit is refused with that reason and nothing is saved
    with pytest.raises(CommandError, match="a fit needs at least 3 measured points"):
        call_command("calibrate", str(path), stdout=io.StringIO(), stderr=io.StringIO())
    assert not UPLOADED().exists()


def test_calibration_for_walks_the_fallback_chain(catalog, lab_csv):
    # given an H100 x vLLM profile (and its Hopper generation profile) from an upload
    call_command("calibrate", str(lab_csv), stdout=io.StringIO(), stderr=io.StringIO())
    # when selecting for several deployments, then each says which profile it used
    cal, label = calibration.calibration_for("h100_sxm", "vllm", "fp8")
    assert label == cal.name == "h100_sxm / vllm 0.11 (newest) / fp8"
    assert calibration.calibration_for("h100_sxm", "vllm", "", engine_version="0.11")[1] == (
        "h100_sxm / vllm 0.11"
    )
    assert calibration.calibration_for("h100_sxm", "sglang")[1] == (
        "h100_sxm / vllm 0.11 (newest) (other engine)"
    )
    # H200 has no profile of its own: its generation's (same silicon), not physics
    assert calibration.calibration_for("h200_sxm", "vllm")[1] == "hopper / vllm 0.11 (newest)"
    physics, label = calibration.calibration_for("mi300x", "sglang")
    assert label == "physics defaults" and physics.relative_error == 0.25


def test_validate_json_reports_errors_per_metric_group_and_worst_rows(catalog, lab_csv):
    # given a fitted profile
    call_command("calibrate", str(lab_csv), stdout=io.StringIO(), stderr=io.StringIO())
    # when validating the same file as JSON
    out = io.StringIO()
    call_command("validate", str(lab_csv), "--json", stdout=out)
    summary = json.loads(out.getvalue())
    # then the keys a dashboard needs are there
    assert {"overall", "by_gpu", "by_model_family", "by_engine", "worst", "points"} <= set(summary)
    assert summary["points"] == 18
    assert {row["metric"] for row in summary["overall"]} == {
        "output_tok_s_per_gpu",
        "ttft_ms",
        "tpot_ms",
    }
    assert len(summary["worst"]) == 10
    assert summary["profiles_used"] == ["h100_sxm / vllm 0.11 / fp8"]


def test_validate_prints_a_table(catalog, lab_csv):
    out = io.StringIO()
    call_command("validate", str(lab_csv), "--physics", stdout=out)
    text = out.getvalue()
    assert "median APE" in text and "worst rows" in text and "h100_sxm" in text


def test_shipped_profiles_load_idempotently(catalog):
    # given the shipped fixture, when loaded twice
    first = calibration.load_shipped_profiles()
    second = calibration.load_shipped_profiles()
    # then the same profiles are there once, each with its error band
    assert first == second == CalibrationProfile.objects.filter(source="shipped fit").count()
    assert first > 5
    assert not CalibrationProfile.objects.filter(relative_error__lte=0).exists()
    # every band is a finite number (a profile no held-out point reached gets the fallback)
    bands = CalibrationProfile.objects.values_list("relative_error", "ttft_relative_error")
    assert all(0 < band < 10 for pair in bands for band in pair)


def test_predict_uses_the_stored_profile(catalog, lab_csv, tmp_path):
    # given an H100 x vLLM profile and a predict input for that deployment
    call_command("calibrate", str(lab_csv), stdout=io.StringIO(), stderr=io.StringIO())
    source = tmp_path / "in.csv"
    source.write_text(
        "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency\n"
        "Llama-3.1-8B,H100,1,1,1,1,fp8,fp8,1024,128,16\n"
    )
    # when predicting with and without profiles
    calibrated = tmp_path / "cal.csv"
    call_command("predict", str(source), "-o", str(calibrated), stderr=io.StringIO())
    CalibrationProfile.objects.all().delete()
    physics = tmp_path / "phys.csv"
    call_command("predict", str(source), "-o", str(physics), stderr=io.StringIO())
    # then the stored profile changed the prediction, and each output names its profile
    first = [next(csv.DictReader(p.open())) for p in (calibrated, physics)]
    assert first[0]["tpot_ms"] != first[1]["tpot_ms"]
    assert first[0]["profile"] == "h100_sxm / vllm 0.11 (newest) / fp8"
    assert first[1]["profile"] == "physics defaults"


def test_predict_uses_precision_and_release_specific_profiles(catalog, tmp_path):
    # given shipped-style profiles for hopper x vLLM: any precision, fp8, and release 0.18
    from fleets.calibration import save_profiles

    CalibrationProfile.objects.all().delete()
    base = dict(gpu_slug=None, generation="hopper", engine_family="vllm", free_constants=[],
                relative_error=0.2, n_points=10)  # fmt: skip
    save_profiles(
        [
            {**base, "name": "hopper / vllm", "precision": "", "constants": {"eta_mem": 0.5}},
            {
                **base,
                "name": "hopper / vllm / fp8",
                "precision": "fp8",
                "constants": {"eta_mem": 0.7},
            },
            {
                **base,
                "name": "hopper / vllm 0.18",
                "precision": "",
                "engine_version": "0.18",
                "constants": {"eta_mem": 0.6},
            },
        ],  # fmt: skip
        "shipped fit",
    )
    source = tmp_path / "in.csv"
    source.write_text(
        "model,gpu,num_gpus,tp,pp,ep,weight_precision,kv_precision,isl,osl,concurrency,engine\n"
        "Llama-3.1-8B,H200,1,1,1,1,fp8,fp8,1024,128,16,vllm\n"
        "Llama-3.1-8B,H200,1,1,1,1,bf16,bf16,1024,128,16,vllm\n"
        "Llama-3.1-8B,H200,1,1,1,1,bf16,bf16,1024,128,16,vLLM v0.18.1\n"
    )
    out = tmp_path / "out.csv"
    # when predicting
    call_command("predict", str(source), "-o", str(out), stderr=io.StringIO())
    # then each row used the most specific profile: precision, release, or the family's
    profiles = [row["profile"] for row in csv.DictReader(out.open())]
    assert profiles == ["hopper / vllm / fp8", "hopper / vllm", "hopper / vllm 0.18"]


# ---------------------------------------------------------------- admin upload


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client, user


def _upload(client, name, content, **fields):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from fleets.models import GpuSku

    data = {
        "gpu": GpuSku.objects.get(slug="h100_sxm").pk,
        "engine_family": "vllm",
        "file": SimpleUploadedFile(name, content),
        **fields,
    }
    return client.post("/admin/fleets/calibrationprofile/upload/", data, follow=True)


def test_admin_upload_of_a_csv_fits_a_profile_owned_by_the_user(catalog, staff_client, lab_csv):
    client, user = staff_client
    response = _upload(client, "lab.csv", lab_csv.read_bytes())
    assert response.status_code == 200
    profile = UPLOADED().get(gpu__slug="h100_sxm", engine_family="vllm", precision="",
                             engine_version="")  # fmt: skip
    assert profile.owner == user and profile.source == "user upload lab.csv"


def test_admin_upload_refuses_bad_rows_and_thin_json_saving_nothing(
    catalog, staff_client, tmp_path
):
    client, _ = staff_client
    # an unknown metric in a CSV names the line and the field
    bad = measured_csv(tmp_path / "bad.csv", metric="joules")
    response = _upload(client, "bad.csv", bad.read_bytes())
    assert "line 2, field &#x27;metric&#x27;" in response.content.decode()
    # a single vLLM result is one condition: it cannot tell the terms apart
    content = (DATA / "vllm_bench_serve_llama8b_h100_c16.json").read_bytes()
    response = _upload(
        client, "run.json", content, num_gpus=1, tp=1, weight_precision="fp8", isl=1024, osl=128
    )
    assert "one condition cannot tell the terms apart" in response.content.decode()
    # a JSON upload without its conditions is refused naming the field
    response = _upload(client, "run.json", content)
    assert "num_gpus" in response.content.decode()
    assert not UPLOADED().exists()


def test_a_signed_in_user_gets_the_shipped_profiles_like_everyone_else(catalog):
    # given the shipped profiles and a user who has uploaded none
    from tests.factories import UserFactory

    user = UserFactory()
    # when selecting for a GPU x engine with and without the owner
    anonymous = calibration.calibration_for("h100_sxm", "vllm")
    owned = calibration.calibration_for("h100_sxm", "vllm", owner=user)
    # then both doors use the same shipped profile (never physics defaults)
    assert anonymous[1] != "physics defaults"
    assert owned == anonymous
