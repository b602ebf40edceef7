"""The run summary's model x GPU cells say whether disaggregated prefill/decode would pay."""

import csv
import io

import pytest

from planner import snapshot as snap
from planner.services import sizing_run_start
from sizing.cost import HOURS_PER_MONTH
from sizing.disagg import compare_with_aggregated
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["fp8"]}


def _signed_in_run(client, username: str):
    """A finished run of SMALL with 4k prompts (its candidates include a disaggregated
    layout), its owner signed in on ``client``."""
    from tests.factories import UserFactory

    owner = UserFactory(username=username)
    run = sizing_run_start(scenario=make_scenario(owner, **SMALL, prompt_tokens_mean=4000,
                                                  prompt_tokens_p95=6000))  # fmt: skip
    assert run.status == "succeeded", run.error
    client.force_login(owner)
    return run


def _api_rows(client, run) -> list[dict]:
    return client.get(f"/api/v1/runs/{run.pk}/results/", {"limit": 1000}).json()["results"]


def test_each_answered_cell_compares_disaggregation_with_its_aggregated_layout(catalog):
    # given a finished run (one model on one GPU)
    run = sizing_run_start(
        scenario=make_scenario(**SMALL, prompt_tokens_mean=4000, prompt_tokens_p95=6000)
    )
    assert run.status == "succeeded", run.error
    [entry] = run.summary["per_model"]
    [cell] = entry["per_gpu"]
    d = cell["disaggregation"]
    # then the cell carries the cheapest xPyD layout meeting the SLOs, its cost against the
    # aggregated one, P:D, the KV transfer and the prompt/output break-even
    assert set(d) >= {"cheaper", "saving_usd_per_month", "prefill", "decode", "pd_ratio",
                      "kv_transfer_ms", "link", "breakeven_prompt_ratio", "steps"}  # fmt: skip
    assert d["prefill_gpus"] == d["prefill"]["workers"] * d["prefill"]["tp"]
    assert d["cheaper"] == (d["saving_usd_per_month"] > 0)
    # and the numbers are the core's, computed once (same inputs -> same answer)
    keys = [c["key"] for c in run.inputs["candidates"]]
    (cand,) = snap.candidates(run.inputs, [keys.index(cell["recommended"])])
    traffic, slo, policy = snap.traffic(run.inputs), snap.slo(run.inputs), snap.policy(run.inputs)
    par = cand.parallelism
    core = compare_with_aggregated(
        cand.model, cand.gpu, cand.weight_precision, cand.kv_precision,
        {"tp": par.tp, "pp": par.pp, "ep": par.ep, "dp": par.dp},
        traffic.prompt_tokens_mean, traffic.output_tokens_mean,
        traffic.peak_rps * policy.burst_factor, slo.ttft_ms / 1e3, slo.tpot_ms / 1e3,
        engine=cand.engine, calibration=cand.calibration,
        target_utilization=policy.target_utilization,
    )  # fmt: skip
    assert d["saving_usd_per_month"] == pytest.approx(core["saving_usd_per_hour"] * HOURS_PER_MONTH)
    assert d["kv_transfer_ms"] == core["kv_transfer_ms"]
    names = {s["name"] for s in d["steps"]}
    assert names >= {"kv_transfer_ms", "decode_workers", "prefill_workers", "saving_usd_per_hour"}


def test_the_run_page_shows_the_pools_in_each_cell(client, catalog):
    run = _signed_in_run(client, "pools")
    page = client.get(f"/runs/{run.pk}/").content.decode()
    [cell] = run.summary["per_model"][0]["per_gpu"]
    d = cell["disaggregation"]
    label = f"Disaggregated {d['prefill']['workers']}P×TP{d['prefill']['tp']}"
    assert label in page and f"({d['prefill_gpus']}:{d['decode_gpus']} GPUs)" in page
    # the pools' own cost is shown beside the aggregated cost of the same (mean-value) method
    assert "aggregated, both mean-value" in page


def test_disaggregated_candidates_are_ranked_rows_with_their_pools(client, catalog):
    # given a run of one model on one GPU (its candidates include a disaggregated layout)
    run = _signed_in_run(client, "ranked")
    rows = _api_rows(client, run)
    # then each API row says its mode; the disaggregated one carries its pools and transfer
    [disagg] = [r for r in rows if r["mode"] == "disagg"]
    assert {r["mode"] for r in rows} == {"agg", "disagg"}
    assert disagg["fits"] and disagg["evaluated"]
    for pool in ("prefill", "decode"):
        per_worker = disagg[f"{pool}_tp"] * disagg[f"{pool}_pp"] * disagg[f"{pool}_dp"]
        assert disagg[f"{pool}_gpus"] == disagg[f"{pool}_workers"] * per_worker
    assert disagg["gpus"] == disagg["prefill_gpus"] + disagg["decode_gpus"]
    assert disagg["replicas"] == disagg["prefill_workers"] + disagg["decode_workers"]
    assert disagg["kv_transfer_ms"] > 0
    for row in rows:
        if row["mode"] == "agg":
            assert row["prefill_workers"] is None and row["kv_transfer_ms"] is None
    # and the summary's answer names its mode (and its pools when it is disaggregated)
    [entry] = run.summary["per_gpu"]
    assert entry["mode"] in {"agg", "disagg"}
    if entry["mode"] == "disagg":
        assert entry["pools"]["prefill"]["workers"] >= 1 and entry["kv_transfer_ms"] > 0
        page = client.get(f"/runs/{run.pk}/").content.decode()
        assert "disaggregated:" in page


def test_serving_disaggregation_false_leaves_them_out(catalog):
    scenario = make_scenario(**SMALL, serving={"disaggregation": False})
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded", run.error
    assert not [c for c in run.inputs["candidates"] if c.get("mode") == "disagg"]
    assert set(run.results.values_list("mode", flat=True)) == {"agg"}


def test_a_disaggregated_row_shows_the_quote_it_was_priced_at_on_every_door(client, catalog):
    # given a run on H100, where a 1-GPU replica and a whole node are quoted differently
    from planner.exports import run_csv
    from pricing.quotes import label as quote_label

    run = _signed_in_run(client, "quotes")
    rows = _api_rows(client, run)
    [disagg] = [r for r in rows if r["mode"] == "disagg"]
    (candidate,) = [c for c in run.inputs["candidates"] if c["key"] == disagg["candidate_key"]]
    node, worker = candidate["tp"], disagg["tp"]
    _, node_quote = snap.gpu_price(run.inputs, disagg["gpu_slug"], node)
    _, worker_quote = snap.gpu_price(run.inputs, disagg["gpu_slug"], worker)
    assert node != worker and node_quote != worker_quote  # the case this test is about
    # then the API row names the node-size quote, the one its $/hour was computed from
    quote = disagg["price_source"]
    assert quote == node_quote
    assert quote["usd_per_gpu_hour"] * disagg["gpus"] == pytest.approx(disagg["usd_per_hour"])
    # and so does the CSV export's price_source column
    [line] = [r for r in csv.DictReader(io.StringIO(run_csv(run)))
              if r["mode"] == "disagg"]  # fmt: skip
    assert line["price_source"] == quote_label(node_quote) != quote_label(worker_quote)
