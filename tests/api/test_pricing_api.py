"""The scenario's own prices through the API: pricing.gpu_prices, provider, reserved_discount."""

import copy
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db
BODY = json.loads(
    (Path(__file__).resolve().parents[2] / "examples" / "chat-llama70b.json").read_text()
)


def _body(**pricing):
    data = copy.deepcopy(BODY)
    data["pricing"] = {"tier": "on_demand"} | pricing
    return data


def test_custom_price_round_trips_and_reaches_the_run(catalog, api):
    # given a scenario with its own H100 price
    created = api.post("/api/v1/scenarios/", _body(gpu_prices={"H100": 2.5}), format="json")
    assert created.status_code == 201, created.json()
    pricing = created.json()["pricing"]
    # then the API answers it under the catalog slug, with the provider rule spelled out
    assert pricing["gpu_prices"] == {"h100_sxm": 2.5}
    assert pricing["provider"] == "cheapest" and pricing["reserved_discount"] is None
    # and a run prices every H100 row at $2.50/GPU-h, the source saying it is custom
    run_id = api.post(f"/api/v1/scenarios/{created.json()['id']}/run/").json()["id"]
    run = api.get(f"/api/v1/runs/{run_id}/").json()
    source = run["inputs"]["gpus"]["h100_sxm"]["price_source"]
    assert source["provider"] == "custom" and source["usd_per_gpu_hour"] == 2.5
    rows = api.get(run["results_url"], {"limit": 1000}).json()["results"]
    assert rows
    for row in rows:
        if row["gpu_slug"] == "h100_sxm" and row["usd_per_hour"]:
            assert row["usd_per_hour"] == pytest.approx(row["gpus"] * 2.5)
            assert row["price_source"]["provider"] == "custom"


@pytest.mark.parametrize(
    "pricing, path, fragment",
    [
        ({"gpu_prices": {"H100": -1}}, "pricing.gpu_prices", "is not a price between 0 and"),
        ({"gpu_prices": {"Z9": 1}}, "pricing.gpu_prices", "unknown GPU 'Z9'"),
        ({"provider": "Nimbus"}, "pricing.provider", "no GPU prices from 'Nimbus'"),
        ({"reserved_discount": 0.2}, "pricing.reserved_discount", "tier reserved only"),
    ],
)
def test_bad_pricing_is_a_400_naming_the_field(catalog, api, pricing, path, fragment):
    answer = api.post("/api/v1/scenarios/", _body(**pricing), format="json")
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert any(fragment in m for m in errors.get(path, [])), errors


def test_policy_spare_nodes_round_trips_and_is_bounded(catalog, api):
    data = _body()
    data["policy"] = {"spare_nodes": 2}
    created = api.post("/api/v1/scenarios/", data, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["policy"]["spare_nodes"] == 2
    data["policy"] = {"spare_nodes": -1}
    answer = api.post("/api/v1/scenarios/", data, format="json")
    assert answer.status_code == 400 and "policy.spare_nodes" in answer.json()["errors"]
