"""The run summary's model x GPU cells say whether disaggregated prefill/decode would pay."""

import pytest

from planner import snapshot as snap
from planner.services import sizing_run_start
from sizing.cost import HOURS_PER_MONTH
from sizing.disagg import compare_with_aggregated
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["fp8"]}


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
    from tests.factories import UserFactory

    owner = UserFactory(username="pools")
    run = sizing_run_start(scenario=make_scenario(owner, **SMALL, prompt_tokens_mean=4000,
                                                  prompt_tokens_p95=6000))  # fmt: skip
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    [cell] = run.summary["per_model"][0]["per_gpu"]
    d = cell["disaggregation"]
    label = f"Disaggregated {d['prefill']['workers']}P×TP{d['prefill']['tp']}"
    assert label in page and f"({d['prefill_gpus']}:{d['decode_gpus']} GPUs)" in page
    # the pools' own cost is shown beside the aggregated cost of the same (mean-value) method
    assert "aggregated, both mean-value" in page
