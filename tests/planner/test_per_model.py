"""The model x GPU grid (``summary.per_model``), each model's own API price, the plain
break-even sentence and the hybrid plan: through the API, on the card, in the XLSX.

Prices are the shipped reference sheet's: with no API price in the scenario, Llama 3.1 8B is
compared with DeepInfra's meta-llama/Meta-Llama-3.1-8B-Instruct ($0.03 in / $0.05 out per M
tokens, the cheapest of its three rows) and Qwen3 32B with DeepInfra's Qwen/Qwen3-32B
($0.08 / $0.28). At 1,000 prompt + 300 output tokens the blended prices are
(1000 x 0.03 + 300 x 0.05) / 1300 = $0.034615/M and (1000 x 0.08 + 300 x 0.28) / 1300 =
$0.126154/M; at 10 req/s mean that is 10 x 1300 x 730 x 3600 = 34.164 B tokens/month, so
$1,182.60 and $4,309.92 a month.
"""

import io

import pytest
from openpyxl import load_workbook
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from planner import exports, pipeline
from planner.services import api_name_key, sizing_run_start
from tests.factories import UserFactory, make_scenario

pytestmark = pytest.mark.django_db

NO_API = {"api_input_usd_per_mtok": None, "api_output_usd_per_mtok": None}
TWO_MODELS = {"models": ["llama-3.1-8b", "Qwen3-32B"], "gpus": ["H100"], "precisions": ["fp8"]}


def _api_client(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def _by_model(summary: dict) -> dict:
    return {entry["model"]: entry for entry in summary["per_model"]}


def test_sheet_and_catalog_spellings_of_a_model_compare_equal():
    assert api_name_key("meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo") == "llama-3.1-8b"
    assert api_name_key("Llama 3.1 8B") == "llama-3.1-8b"
    assert api_name_key("Qwen/Qwen3-32B") == api_name_key("qwen3-32b") == "qwen3-32b"
    assert api_name_key("Qwen/Qwen3-30B-A3B") != api_name_key("Qwen3-32B")


@pytest.mark.tails
def test_the_grid_through_the_api_has_simulated_cells_and_each_models_api(catalog):
    # given two models on one GPU, no API price in the scenario, tails simulated
    owner = UserFactory()
    run = sizing_run_start(scenario=make_scenario(owner, **TWO_MODELS, **NO_API))
    assert run.status == "succeeded", run.error

    # when finance tooling reads the run
    body = _api_client(owner).get(f"/api/v1/runs/{run.pk}/").json()
    grid = _by_model(body["summary"])

    # then there is one grid row per model, and the per-GPU summary is unchanged in shape
    assert set(grid) == {"llama-3.1-8b", "qwen3-32b"}
    assert [e["gpu"] for e in body["summary"]["per_gpu"]] == ["h100_sxm"]
    results = {r.candidate_key: r for r in run.results.all()}
    for slug, entry in grid.items():
        [cell] = entry["per_gpu"]
        # each cell is its model's cheapest simulated row meeting the SLO on that GPU
        row = results[cell["recommended"]]
        assert row.latency_source == "simulated" and row.meets_slo
        assert row.candidate_key.startswith(f"{slug}|h100_sxm|")
        rivals = [
            r
            for r in results.values()
            if r.model_name == row.model_name and r.latency_source == "simulated" and r.meets_slo
        ]
        assert row.usd_per_month == min(r.usd_per_month for r in rivals)
        assert cell["usd_per_month"] == row.usd_per_month
        assert entry["best"]["recommended"] == cell["recommended"]
    # and the per-GPU answer is the cheaper of the two cells
    cheapest = min((e["per_gpu"][0] for e in grid.values()), key=lambda c: c["usd_per_month"])
    assert body["summary"]["per_gpu"][0]["recommended"] == cheapest["recommended"]

    # and each model's break-even uses its own sheet price, named
    llama, qwen = grid["llama-3.1-8b"]["api"], grid["qwen3-32b"]["api"]
    assert llama["label"] == "DeepInfra meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert qwen["label"] == "DeepInfra Qwen/Qwen3-32B"
    assert llama["from"] == qwen["from"] == "price sheet"
    assert llama["usd_per_mtok"] == pytest.approx(45 / 1300)
    assert qwen["usd_per_mtok"] == pytest.approx(164 / 1300)
    assert llama["breakeven"]["api_usd_per_month"] == pytest.approx(1182.60)
    assert qwen["breakeven"]["api_usd_per_month"] == pytest.approx(4309.92)
    text = grid["qwen3-32b"]["per_gpu"][0]["api_alternative"]["text"]
    assert text == "vs DeepInfra Qwen/Qwen3-32B at $0.13/M tokens (blended in/out)"


def test_a_model_without_a_sheet_price_says_so_and_borrows_none(catalog):
    # given Mistral 7B v0.1 (no API row on the sheet) next to Llama 3.1 8B (three rows)
    scenario = make_scenario(
        models=["Mistral-7B-v0.1", "llama-3.1-8b"], gpus=["H100"], precisions=["fp8"], **NO_API
    )
    run = sizing_run_start(scenario=scenario)
    grid = _by_model(run.summary)
    # then Mistral has no break-even and a note, Llama keeps its own price
    mistral = grid["mistral-7b-v0.1"]
    assert mistral["api"]["label"] is None
    assert mistral["api"]["note"] == (
        "no API price for Mistral 7B v0.1 on Reference public prices v1: no break-even "
        "(another model's is not used)"
    )
    [cell] = mistral["per_gpu"]
    assert cell["breakeven"] is None and cell["api_verdict"] is None
    assert cell["api_alternative"]["text"] == mistral["api"]["note"]
    assert grid["llama-3.1-8b"]["api"]["usd_per_mtok"] == pytest.approx(45 / 1300)
    # and the XLSX lists the API price each model was compared with, and the note
    book = load_workbook(io.BytesIO(exports.run_xlsx(run)))
    inputs = {r[0]: r[1:4] for r in book["inputs"].iter_rows(values_only=True) if r[0]}
    assert inputs["api_price llama-3.1-8b"] == (
        "DeepInfra meta-llama/Meta-Llama-3.1-8B-Instruct",
        0.03,
        0.05,
    )
    assert inputs["api_price mistral-7b-v0.1"][0] == "none on the sheet"
    summary = list(book["summary"].iter_rows(values_only=True))
    column = summary[0].index("api_alternative")
    line = next(r for r in summary if str(r[1]).startswith("Mistral 7B v0.1 on H100 SXM"))
    assert line[0] == "per model" and line[column] == mistral["api"]["note"]


def _sentence_run(**overrides):
    owner = UserFactory()
    scenario = make_scenario(owner, models=["llama-3.1-8b"], gpus=["H100"], **overrides)
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded", run.error
    return owner, run


def test_when_the_api_is_cheaper_the_card_says_so_with_the_volume_self_hosting_needs(
    catalog, client
):
    # given a small fleet (2 req/s peak) and an API at $0.5 in / $1.5 out per M tokens
    owner, run = _sentence_run(peak_rps=2.0, mean_rps=1.0)
    [entry] = run.summary["per_gpu"]
    bev = entry["breakeven"]
    assert bev["api_usd_per_month"] < bev["selfhost_usd_per_month"]
    # the API's month: 1 req/s x 1300 tokens x 730 h x 3600 s x $950/1300 per M tokens
    assert bev["api_usd_per_month"] == pytest.approx(2496.60)
    # and the volume it names is above this traffic's 1 x 1300 x 730 x 3600 = 3.4164 B tokens
    assert bev["traffic_tokens_per_month"] == pytest.approx(3.4164e9)
    crossing_b = bev["crossing_tokens_per_month"] / 1e9
    assert 3.4164 < crossing_b < 10  # two significant digits below 10 B
    expected = (
        f"the API costs $2,497/month here: self-hosting wins above {crossing_b:.2g} B tokens/month"
    )
    assert entry["api_verdict"] == expected
    # when the reviewer opens the run
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    # then the card carries the sentence, the API it compares with, and the hybrid plan
    assert expected[0].upper() + expected[1:] in page
    assert "vs explicit API price at $0.73/M tokens" in page
    hybrid = entry["hybrid"]
    assert hybrid["text"] in page and hybrid == {**bev["hybrid"], **hybrid}
    assert f"Hybrid plan: {hybrid['text']}." in page


def test_when_self_hosting_is_cheaper_the_card_says_that_and_the_xlsx_carries_it(catalog):
    # given the chat scenario's traffic (20 req/s peak) at the same API price
    owner, run = _sentence_run()
    [entry] = run.summary["per_gpu"]
    bev = entry["breakeven"]
    assert bev["selfhost_usd_per_month"] < bev["api_usd_per_month"] == pytest.approx(24966.0)
    assert entry["api_verdict"].startswith(
        f"self-hosting costs ${bev['selfhost_usd_per_month']:,.0f}/month here, less than the "
        "API's $24,966/month: it stays cheaper from "
    )
    # when finance downloads the XLSX
    response = _api_client(owner).get(f"/api/v1/runs/{run.pk}/export.xlsx")
    sheet = load_workbook(io.BytesIO(response.getvalue()))["summary"]
    rows = [list(r) for r in sheet.iter_rows(values_only=True)]
    head, lines = rows[0], {(r[0], r[1]): dict(zip(rows[0], r, strict=False)) for r in rows[1:]}
    assert head[-3:] == ["api_alternative", "api_verdict", "hybrid_plan"]
    # then the per-GPU line and the model's grid line carry the sentence and the hybrid plan
    cell = ("per model", "Llama 3.1 8B on H100 SXM (best for the model)")
    for key in [("best overall", "H100 SXM"), cell]:
        line = lines[key]
        assert line["api_verdict"] == entry["api_verdict"]
        assert line["hybrid_plan"] == entry["hybrid"]["text"]
        assert line["hybrid_usd_per_month"] == round(bev["hybrid"]["usd_per_month"], 2)
        assert line["api_alternative"] == "vs explicit API price at $0.73/M tokens (blended in/out)"


def test_the_hybrid_sentence_names_base_spares_share_and_cost():
    bev = {
        "hybrid": {
            "selfhost_replicas": 3,
            "api_token_share": 0.083,
            "usd_per_month": 12345.6,
            "selfhost_only_usd_per_month": 15000.0,
            "api_only_usd_per_month": 30000.0,
        }
    }
    plan = pipeline.hybrid_plan(bev, spare_replicas=1)
    assert plan["text"] == (
        "self-host 3 replicas (+1 spare), 8.3% of tokens to the API: $12,346/month"
    )
    one = {"hybrid": {**bev["hybrid"], "selfhost_replicas": 1, "api_token_share": 0.999}}
    assert pipeline.hybrid_plan(one, spare_replicas=2)["text"] == (
        "self-host 1 replica (+2 spares), 100% of tokens to the API: $12,346/month"
    )
    everything = {"hybrid": {**bev["hybrid"], "selfhost_replicas": 0, "api_token_share": 1.0}}
    assert pipeline.hybrid_plan(everything, 1)["text"] == "everything to the API: $12,346/month"
    assert pipeline.hybrid_plan(everything, 1)["spare_replicas"] == 0
