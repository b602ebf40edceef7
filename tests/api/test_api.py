"""REST API v1: the finance uses, the error shape, access control, exports, the schema."""

import copy
import io
import json
from pathlib import Path

import pytest
from openpyxl import load_workbook

from planner.models import Scenario, SizingRun
from planner.services import share_link_create
from tests.factories import UserFactory, make_scenario

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
BODY = json.loads((ROOT / "examples" / "chat-llama70b.json").read_text())


def body(**changes):
    data = copy.deepcopy(BODY)
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return data


DELETE = object()


def create(api, data=None):
    return api.post("/api/v1/scenarios/", data or body(), format="json")


def test_create_run_poll_and_export(catalog, api):
    # given a scenario created through the API
    created = create(api)
    assert created.status_code == 201, created.json()
    scenario = created.json()
    assert scenario["traffic"]["prompt_tokens"] == {"mean": 1000, "p95": 3000}
    assert scenario["candidates"]["gpus"] == ["b200", "h100_sxm", "h200_sxm", "l40s"] or set(
        scenario["candidates"]["gpus"]
    ) == {"b200", "h100_sxm", "h200_sxm", "l40s"}
    # when it is run
    started = api.post(f"/api/v1/scenarios/{scenario['id']}/run/")
    assert started.status_code == 202
    run_id = started.json()["id"]
    # then polling shows it finished with a summary per GPU and the break-even
    run = api.get(f"/api/v1/runs/{run_id}/").json()
    assert run["status"] == "succeeded" and run["progress"] == 100
    assert "results" not in run  # the detail is light; the results are paged
    results = api.get(run["results_url"], {"limit": 1000}).json()
    assert results["count"] == len(results["results"]) == run["candidate_count"] > 0
    per_gpu = {e["gpu"]: e for e in run["summary"]["per_gpu"]}
    h100 = per_gpu["h100_sxm"]
    assert h100["gpus"] >= h100["replicas"] >= 1 and h100["usd_per_month"] > 0
    breakeven = h100["breakeven"]
    assert breakeven["utilization_to_win"] > 0
    # self-hosting wins above a finite volume, or (None) never at the planned utilization:
    # then the self-hosted fleet costs more than the API at this traffic
    crossing = breakeven["crossing_tokens_per_month"]
    if crossing is None:
        assert breakeven["selfhost_usd_per_month"] > breakeven["api_usd_per_month"]
    else:
        assert crossing > 0
    history = api.get(f"/api/v1/scenarios/{scenario['id']}/runs/").json()
    assert history["count"] == 1 and history["results"][0]["id"] == run_id
    # and the exports carry stable columns with units
    csv_text = api.get(f"/api/v1/runs/{run_id}/export.csv").getvalue().decode()
    header = csv_text.splitlines()[0].split(",")
    assert {"usd_per_month", "ttft_ms", "tpot_ms", "usd_per_mtok_output"} <= set(header)
    assert len(csv_text.splitlines()) == run["candidate_count"] + 1
    xlsx = api.get(f"/api/v1/runs/{run_id}/export.xlsx")
    assert xlsx["Content-Type"].startswith("application/vnd.openxmlformats")
    sheet = load_workbook(io.BytesIO(xlsx.getvalue()))["results"]
    assert [c.value for c in sheet[1]] == header


def test_list_filters_and_pagination(catalog, api, user):
    first = create(api, body(name="alpha", tags=["chat", "q4"])).json()
    create(api, body(name="beta", tags=["rag"]))
    api.post(f"/api/v1/scenarios/{first['id']}/run/")
    listing = api.get("/api/v1/scenarios/", {"limit": 1}).json()
    assert listing["count"] == 2 and len(listing["results"]) == 1 and listing["next"]
    assert [s["name"] for s in api.get("/api/v1/scenarios/", {"tag": "rag"}).json()["results"]] == [
        "beta"
    ]
    ok = api.get("/api/v1/scenarios/", {"status": "succeeded"}).json()["results"]
    assert [s["name"] for s in ok] == ["alpha"]
    assert ok[0]["latest_run"]["best_usd_per_month"] > 0
    assert api.get("/api/v1/scenarios/", {"owner": "nobody"}).json()["count"] == 0
    assert api.get("/api/v1/scenarios/", {"updated_since": "2999-01-01"}).json()["count"] == 0
    assert api.get("/api/v1/scenarios/", {"updated_since": "2000-01-01"}).json()["count"] == 2
    names = [
        s["name"] for s in api.get("/api/v1/scenarios/", {"ordering": "name"}).json()["results"]
    ]
    assert names == ["alpha", "beta"]
    bad = api.get("/api/v1/scenarios/", {"updated_since": "yesterday"})
    assert bad.status_code == 400 and "updated_since" in bad.json()["errors"]


def test_update_and_delete(catalog, api):
    scenario = create(api).json()
    patched = api.patch(
        f"/api/v1/scenarios/{scenario['id']}/", {"traffic": {"peak_rps": 40}}, format="json"
    )
    assert patched.status_code == 200, patched.json()
    assert patched.json()["traffic"]["peak_rps"] == 40
    assert patched.json()["traffic"]["mean_rps"] == 8  # untouched
    assert api.delete(f"/api/v1/scenarios/{scenario['id']}/").status_code == 204
    assert not Scenario.objects.exists()


@pytest.mark.parametrize(
    "data, field, fragment",
    [
        (body(name=DELETE), "name", "required"),
        (body(traffic__peak_rps=DELETE), "traffic.peak_rps", "required"),
        (body(traffic__peak_rps="fast"), "traffic.peak_rps", "valid number"),
        (body(candidates__models="llama"), "candidates.models", "list"),
        (body(traffic__peak_rps=0), "traffic.peak_rps", "greater than 0"),
        (body(traffic__mean_rps=-3), "traffic.mean_rps", "greater than 0"),
        (body(traffic__output_tokens={"mean": 0}), "traffic.output_tokens.mean", "greater than 0"),
        (
            body(traffic__prompt_tokens={"mean": 1000, "p95": 10}),
            "traffic.prompt_tokens.p95",
            "at least the mean",
        ),
        (
            body(traffic__output_tokens={"mean": 300, "p95": 3000}),
            "traffic.output_tokens.p95",
            "at most 3.87x the mean (300), i.e. 1160.44",
        ),
        (body(candidates__gpus=["H100", "TPU v9"]), "candidates.gpus", "unknown GPU"),
        (body(candidates__models=["gpt-17"]), "candidates.models", "unknown model"),
        (body(candidates__tp=[3]), "candidates.tp", "does not divide"),
        (body(pricing={"price_sheet": 424242}), "pricing.price_sheet", "does not exist"),
        ([1, 2, 3], "non_field_errors", "dictionary"),
    ],
)
def test_bad_input_answers_400_in_one_shape(catalog, api, data, field, fragment):
    response = create(api, data)
    assert response.status_code == 400
    payload = response.json()
    assert set(payload) == {"message", "errors"} and payload["message"]
    assert field in payload["errors"], payload
    assert any(fragment in m for m in payload["errors"][field]), payload["errors"][field]
    assert not Scenario.objects.exists()


def test_malformed_json_is_a_400_not_a_500(catalog, api):
    response = api.generic(
        "POST", "/api/v1/scenarios/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400 and "message" in response.json()


def test_another_users_ids_answer_404(catalog, api, other_api, user):
    scenario = create(api).json()
    run_id = api.post(f"/api/v1/scenarios/{scenario['id']}/run/").json()["id"]
    sid = scenario["id"]
    for method, url in [
        ("get", f"/api/v1/scenarios/{sid}/"),
        ("patch", f"/api/v1/scenarios/{sid}/"),
        ("delete", f"/api/v1/scenarios/{sid}/"),
        ("post", f"/api/v1/scenarios/{sid}/run/"),
        ("get", f"/api/v1/scenarios/{sid}/runs/"),
        ("get", f"/api/v1/runs/{run_id}/"),
        ("get", f"/api/v1/runs/{run_id}/export.csv"),
        ("get", f"/api/v1/runs/{run_id}/export.xlsx"),
    ]:
        response = getattr(other_api, method)(url, {}, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
    assert other_api.get("/api/v1/scenarios/").json()["count"] == 0
    share = other_api.post("/api/v1/share-links/", {"scenario": sid}, format="json")
    assert share.status_code == 404


def test_shared_with_user_reads_but_cannot_write(catalog, api, user):
    reader = UserFactory(username="reader")
    scenario = Scenario.objects.get(pk=create(api).json()["id"])
    scenario.shared_with.add(reader)
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(reader)
    assert client.get(f"/api/v1/scenarios/{scenario.pk}/").status_code == 200
    assert (
        client.patch(f"/api/v1/scenarios/{scenario.pk}/", {"name": "x"}, format="json").status_code
        == 403
    )
    assert client.post(f"/api/v1/scenarios/{scenario.pk}/run/").status_code == 403


def test_authentication_required(db):
    from rest_framework.test import APIClient

    response = APIClient().get("/api/v1/scenarios/")
    assert response.status_code == 401
    assert set(response.json()) == {"message", "errors"}


def test_catalog_reads_for_users_writes_for_staff(catalog, api, user):
    gpus = api.get("/api/v1/gpus/").json()
    assert gpus["count"] >= 10
    assert any(g["slug"] == "h100_sxm" for g in gpus["results"])
    assert api.get("/api/v1/models/", {"limit": 100}).json()["count"] >= 20
    sheets = api.get("/api/v1/price-sheets/").json()["results"]
    assert sheets[0]["gpu_prices"] and sheets[0]["api_prices"]
    h100 = next(g for g in gpus["results"] if g["slug"] == "h100_sxm")
    assert api.patch(f"/api/v1/gpus/{h100['id']}/", {"tdp_w": 1}, format="json").status_code == 403
    user.is_staff = True
    user.save()
    changed = api.patch(f"/api/v1/gpus/{h100['id']}/", {"tdp_w": 710}, format="json")
    assert changed.status_code == 200 and changed.json()["tdp_w"] == 710
    refused = api.patch(f"/api/v1/gpus/{h100['id']}/", {"hbm_bandwidth_tb_s": 1e9}, format="json")
    assert refused.status_code == 400 and "hbm_bandwidth_tb_s" in refused.json()["errors"]


def test_share_links_create_list_revoke(catalog, api, user):
    scenario = create(api).json()
    run_id = api.post(f"/api/v1/scenarios/{scenario['id']}/run/").json()["id"]
    created = api.post("/api/v1/share-links/", {"scenario": scenario["id"]}, format="json")
    assert created.status_code == 201, created.json()
    link = created.json()
    assert {"id", "url", "expires_at"} <= set(link) and link["run"] == run_id
    token = link["url"].rstrip("/").rsplit("/", 1)[-1]
    assert len(token) >= 43  # 256 bits, base64url
    listed = api.get("/api/v1/share-links/").json()
    assert [item["id"] for item in listed["results"]] == [link["id"]]
    assert listed["results"][0]["url"] is None  # the raw token is never shown again
    assert api.delete(f"/api/v1/share-links/{link['id']}/").status_code == 204
    from planner.selectors import share_link_for_token

    assert share_link_for_token(token) is None
    assert api.get("/api/v1/share-links/").json()["count"] == 0
    past = api.post(
        "/api/v1/share-links/",
        {"scenario": scenario["id"], "expires_at": "2001-01-01T00:00:00Z"},
        format="json",
    )
    assert past.status_code == 400 and "expires_at" in past.json()["errors"]


def test_schema_and_local_docs(db, client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    spec = json.loads(schema.content)
    assert "/api/v1/scenarios/{id}/run/" in spec["paths"]
    docs = client.get("/api/docs/").content.decode()
    assert "cdn" not in docs.lower() and "unpkg" not in docs.lower()
    assert "/static/drf_spectacular_sidecar/" in docs


def test_run_row_counts_match(catalog, user):
    scenario = make_scenario(owner=user)
    from planner.services import sizing_run_start

    run = sizing_run_start(scenario=scenario)
    assert run.status == SizingRun.Status.SUCCEEDED
    link, token = share_link_create(user=user, scenario=scenario, run=run)
    assert link.run == run


def test_calibration_profiles_read_and_upload(catalog, api, user, tmp_path):
    from fleets.models import CalibrationProfile
    from tests.fleets.test_calibration import measured_csv

    shipped = api.get("/api/v1/calibration-profiles/", {"limit": 200}).json()
    assert shipped["count"] == CalibrationProfile.objects.filter(owner=None).count() > 0
    first = shipped["results"][0]
    assert {"constants", "relative_error", "cv_error", "n_points", "source"} <= set(first)
    assert api.delete(f"/api/v1/calibration-profiles/{first['id']}/").status_code == 403
    # a user calibrates their own fleet from a measured CSV
    path = measured_csv(tmp_path / "lab.csv")
    with path.open("rb") as handle:
        fitted = api.post(
            "/api/v1/calibration-profiles/upload/",
            {"file": handle, "gpu": "H100", "engine_family": "vllm"},
            format="multipart",
        )
    assert fitted.status_code == 201, fitted.json()
    assert fitted.json()[0]["owner"] == user.username and fitted.json()[0]["n_points"] > 0
    # a bad file is refused naming the line and field, and nothing is saved
    bad = tmp_path / "bad.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    row = lines[1].split(",")
    row[header.index("value")] = "fast"
    bad.write_text("\n".join([lines[0], ",".join(row)]) + "\n")
    before = CalibrationProfile.objects.count()
    with bad.open("rb") as handle:
        refused = api.post(
            "/api/v1/calibration-profiles/upload/",
            {"file": handle, "gpu": "H100", "engine_family": "vllm"},
            format="multipart",
        )
    assert refused.status_code == 400
    assert "line 2" in refused.json()["errors"]["file"][0]
    assert CalibrationProfile.objects.count() == before
