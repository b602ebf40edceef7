"""The fleet over time and over its life, through a run: scenario blocks, the per-GPU summary,
bad input refused by field."""

import pytest
from django.core.exceptions import ValidationError

from planner import services, tails
from sizing import burst_check
from sizing.derivation import evaluate
from tests.factories import make_scenario

SMALL = {"models": ["llama-3.1-8b"], "gpus": ["H100"], "precisions": ["fp8"]}


@pytest.fixture
def run(catalog):
    scenario = make_scenario(
        **SMALL,
        cold_start={"weights_source": "nvme", "weights_gb_s": 5.0},
        # a ramp steep enough to outrun a cold start without the warm pool (at 0.5 req/s per
        # s the replicas' own headroom absorbs it since the MoE-term refit)
        autoscaling={"min_replicas": 1, "burst_ramp_rps_per_s": 2.0},
        ownership={"capex_usd_per_node": 300_000},
    )
    return services.sizing_run_start(scenario=scenario)


def test_summary_per_gpu_carries_the_fleet_life(run):
    entry = run.summary["per_gpu"][0]
    assert entry["recommended"]
    cold = entry["cold_start_s"]
    # the weight link is the row's own weights per GPU x GPUs over the given 5 GB/s
    result = run.results.get(candidate_key=entry["recommended"])
    weights = result.derivation["weights_gb_per_gpu"] * result.gpus_per_replica
    assert cold["links"]["weight_load_s"] == pytest.approx(weights / 5.0)
    assert cold["total"] == pytest.approx(sum(cold["links"].values()))
    assert "weights_gb_s" not in cold["defaults"] and "image_gb" in cold["defaults"]
    policy = entry["autoscaling"]
    assert policy["scale_up_cooldown_s"] >= cold["total"]
    assert policy["scale_down_cooldown_s"] >= 300
    assert policy["min_replicas"] == 1 and policy["max_replicas"] >= 1
    assert entry["warm_pool_replicas"] == policy["warm_pool_replicas"] >= 1
    # the day's cost is the step that computed it (the warm pool the ramp needs included)
    (cost,) = [s for s in entry["lifecycle_steps"] if s["name"] == "autoscaled_usd_per_month"]
    assert cost["value"] == pytest.approx(entry["autoscaled_usd_per_month"])
    assert entry["autoscaling"]["burst"]["late_requests_without_warm_pool"] > 0
    assert entry["autoscaling"]["burst"]["late_requests"] == 0
    tco = entry["tco"]
    assert set(tco) >= {
        "owned_usd_per_gpu_hour",
        "breakeven_utilization",
        "owned_usd_per_month",
        "rented_usd_per_month",
        "months_to_breakeven",
    }
    assert tco["rented_usd_per_month"] == pytest.approx(entry["autoscaled_usd_per_month"])
    assert len(entry["day"]["ready"]) == 144
    for step in entry["lifecycle_steps"]:
        if step["kind"] == "formula":
            assert evaluate(step["formula"], step["inputs"]) == pytest.approx(step["value"])


def test_defaults_apply_and_say_so(catalog):
    run = services.sizing_run_start(scenario=make_scenario(**SMALL, burst_factor=1.5))
    entry = run.summary["per_gpu"][0]
    assert "weights_source" in entry["cold_start_s"]["defaults"]
    assert "pue" in entry["tco"]["defaults"]
    assert entry["autoscaling"]["defaults"]
    # each default says where its figure comes from, in the summary and the derivation
    for block in (entry["cold_start_s"], entry["autoscaling"], entry["tco"]):
        assert set(block["default_sources"]) == set(block["defaults"])
    assert "Uptime Institute" in entry["tco"]["default_sources"]["pue"]
    assert "PM9A3" in entry["cold_start_s"]["default_sources"]["weights_gb_s"]
    assert "60-91%" in entry["autoscaling"]["default_sources"]["spot_discount"]
    (total,) = [s for s in entry["lifecycle_steps"] if s["name"] == "cold_start_s"]
    assert "image_gb = 12 GB" in total["note"]
    # the default ramp is the burst factor reached within the burst: 20 * 0.5 / 60 req/s/s
    assert entry["autoscaling"]["ramp_rps_per_s"] == pytest.approx(20 * 0.5 / 60)
    # one answer, one self-host-only cost: the hybrid split sizes with the burst factor too
    hybrid = entry["breakeven"]["hybrid"]
    assert hybrid["selfhost_only_usd_per_month"] == pytest.approx(entry["usd_per_month"])


def test_no_burst_no_warm_pool_and_the_day_costs_no_more(catalog):
    run = services.sizing_run_start(scenario=make_scenario(**SMALL))
    entry = run.summary["per_gpu"][0]
    assert entry["warm_pool_replicas"] == 0
    assert entry["autoscaled_usd_per_month"] <= entry["usd_per_month"] * (1 + 1e-9)


@pytest.mark.parametrize(
    "block, value, field, text",
    [
        ("cold_start", {"registry_gb_s": -1}, "cold_start.registry_gb_s", "at least 0.01"),
        ("cold_start", {"weights_gb_s": 0}, "cold_start.weights_gb_s", "at least 0.01"),
        ("cold_start", {"weights_source": "floppy"}, "cold_start.weights_source", "one of"),
        ("ownership", {"depreciation_years": 0}, "ownership.depreciation_years", "greater"),
        ("ownership", {"pue": 0.9}, "ownership.pue", "at least 1"),
        ("autoscaling", {"spot_share": 2}, "autoscaling.spot_share", "at most 1"),
        ("autoscaling", {"min_replicas": 1.5}, "autoscaling.min_replicas", "whole number"),
        ("ownership", {"watts": 3}, "ownership", "unknown keys"),
        ("cold_start", [1], "cold_start", "must be an object"),
    ],
)
def test_bad_blocks_refused_naming_the_field(catalog, block, value, field, text):
    from planner.models import Scenario

    with pytest.raises(ValidationError) as exc:
        make_scenario(**SMALL, **{block: value})
    messages = exc.value.message_dict
    assert field in messages and text in " ".join(messages[field])
    assert not Scenario.objects.exists()


def test_profile_mean_must_match_the_declared_mean(catalog):
    with pytest.raises(ValidationError) as exc:
        make_scenario(**SMALL, hourly_rps=[5.0] * 12 + [20.0] * 12, mean_rps=10.0)
    assert "average 12.5" in " ".join(exc.value.message_dict["hourly_rps"])


def test_exports_carry_the_fleet_life_columns(run):
    import csv
    import io

    from openpyxl import load_workbook

    from planner import exports

    entry = run.summary["per_gpu"][0]
    rows = list(csv.DictReader(io.StringIO(exports.run_csv(run))))
    (mine,) = [r for r in rows if r["recommended"] == "true"]
    assert float(mine["cold_start_s"]) == pytest.approx(entry["cold_start_s"]["total"], 1e-3)
    assert int(mine["warm_pool_replicas"]) == entry["warm_pool_replicas"]
    assert float(mine["autoscaled_usd_per_month"]) == pytest.approx(
        entry["autoscaled_usd_per_month"], abs=0.01
    )
    tco = entry["tco"]
    assert float(mine["owned_usd_per_gpu_hour"]) == pytest.approx(
        tco["owned_usd_per_gpu_hour"], 1e-3
    )
    assert float(mine["breakeven_utilization"]) == pytest.approx(tco["breakeven_utilization"], 1e-2)
    others = [r for r in rows if r["recommended"] != "true"]
    assert all(r["cold_start_s"] == "" for r in others)
    book = load_workbook(io.BytesIO(exports.run_xlsx(run)))
    sheet = book["summary"]
    header = [c.value for c in sheet[1]]
    line = [c.value for c in sheet[2]]
    values = dict(zip(header, line, strict=False))
    for name in ("rented_usd_per_month", "owned_usd_per_month", "months_to_breakeven"):
        assert values[name] == pytest.approx(tco[name], rel=1e-3)
    assert values["scale_up_cooldown_s"] == entry["autoscaling"]["scale_up_cooldown_s"]
    inputs = {r[0].value: r[1].value for r in book["inputs"].iter_rows() if r[0].value}
    assert inputs["cold_start.weights_gb_s (given)"] == 5.0


def test_worst_burst_checked_with_the_simulator(run):
    # given a run whose autoscaling block states a 0.5 req/s per s ramp
    entry = run.summary["per_gpu"][0]
    burst = entry["autoscaling"]["burst"]
    sim = burst["simulated"]
    # then the simulator's share of the worst window sits beside the fluid model's
    assert sim["fluid_slo_share"] == burst["slo_share"]
    assert 0.0 <= sim["slo_share"] <= 1.0
    assert 0 < sim["requests"] <= 2 * burst_check.MAX_REQUESTS
    assert sim["percentile"] == 95.0
    assert sim["ttft_ms_at_percentile"] > 0 and sim["tpot_ms_at_percentile"] > 0
    # the derivation carries the simulation step with the same number
    (step,) = [s for s in entry["lifecycle_steps"] if s["name"] == "burst_simulated_slo_share"]
    assert step["value"] == sim["slo_share"] and step["kind"] == "simulation"
    assert step["stage"] == "Autoscaling"
    # seeded from the candidate's inputs (as its tail search is): a rerun replays the trace
    index = [c["key"] for c in run.inputs["candidates"]].index(entry["recommended"])
    assert sim["seed"] == tails.seed_for(tails.cache_key(run.inputs, index))


def test_no_burst_no_simulated_check(catalog):
    run = services.sizing_run_start(scenario=make_scenario(**SMALL))
    assert run.summary["per_gpu"][0]["autoscaling"]["burst"]["simulated"] is None


def test_fixed_fleet_cost_uses_the_burst_warm_pool_everywhere(run, client):
    import csv
    import io

    from openpyxl import load_workbook

    from planner import exports
    from planner.templatetags.headroom import usd

    # given a run whose autoscaling block states a ramp (0.5 req/s per s)
    entry = run.summary["per_gpu"][0]
    result = run.results.get(candidate_key=entry["recommended"])
    d = result.derivation
    policy = run.inputs["policy"]
    # then the fixed fleet holds the warm pool the ramp needs (not the typed 0): the row,
    # the summary and the autoscaling policy carry one number
    warm = d["warm_pool_replicas"]
    assert warm == entry["warm_pool_replicas"] == entry["autoscaling"]["warm_pool_replicas"] >= 1
    assert policy["warm_pool_replicas"] == 0
    assert result.replicas == d["serving_replicas"] + policy["spare_replicas"] + warm
    (step,) = [s for s in d["steps"] if s["name"] == "warm_pool_replicas"]
    assert step["stage"] and step["value"] == warm
    price = result.usd_per_hour / (result.replicas * result.gpus_per_replica)
    assert entry["usd_per_month"] == pytest.approx(
        result.replicas * result.gpus_per_replica * price * 730
    )
    saving = entry["autoscaled_saving_usd_per_month"]
    assert saving == pytest.approx(entry["usd_per_month"] - entry["autoscaled_usd_per_month"])
    # the break-even's fixed replicas and the hybrid's spares are the same spares + warm pool
    (crossing,) = [s for s in d["steps"] if s["name"] == "crossing_tokens_per_month"]
    fixed = {i["name"]: i["value"] for i in crossing["inputs"]}["s (spare + warm)"]
    assert fixed == policy["spare_replicas"] + warm
    # CSV and XLSX: the same $/month, autoscaled $/month and saving
    rows = list(csv.DictReader(io.StringIO(exports.run_csv(run))))
    (mine,) = [r for r in rows if r["recommended"] == "true"]
    for name in ("usd_per_month", "autoscaled_usd_per_month", "autoscaled_saving_usd_per_month"):
        value = entry[name] if name in entry else getattr(result, name)
        assert float(mine[name]) == pytest.approx(value, abs=0.01), name
    book = load_workbook(io.BytesIO(exports.run_xlsx(run)))
    header = [c.value for c in book["summary"][1]]
    values = dict(zip(header, [c.value for c in book["summary"][2]], strict=False))
    for name in ("usd_per_month", "autoscaled_usd_per_month", "autoscaled_saving_usd_per_month"):
        assert values[name] == pytest.approx(entry[name], abs=0.01), name
    # the UI: the same three numbers on the run page
    client.force_login(run.scenario.owner)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"Autoscaled day {usd(entry['autoscaled_usd_per_month'])}/month" in html
    assert f"the fixed fleet {usd(entry['usd_per_month'])}/month" in html
    if saving > 0:
        assert f"saves {usd(saving)}/month" in html
