"""Contract: a candidate's sized result depends on that candidate and the scenario only.

Sized alone or among others, through a run, ``plan``, the API or an export, an evaluated
candidate gets identical values; a candidate left "not evaluated" in a crowd has a bound that
really is a lower bound of what it costs alone, and that could not beat the crowd's pick.
Hypothesis draws scenarios (traffic, lengths, SLOs, policy) and candidate subsets.
"""

import copy
import csv
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.planning import plan_inputs
from planner.services import build_inputs_snapshot, sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db

COMPARED = [
    "fits", "reason", "replicas", "gpus", "usd_per_hour", "usd_per_month", "usd_per_mtok",
    "tokens_per_usd", "ttft_ms", "tpot_ms", "ttft_ms_p50", "ttft_ms_p95", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_p95", "tpot_ms_p99", "meets_slo", "binding_constraint",
    "latency_source", "latency_statistic", "profile", "evaluated",
]  # fmt: skip


class DictCache(dict):
    """A private cache per sizing, so "alone" really simulates again."""

    def put(self, key, value):
        self[key] = copy.deepcopy(value)


def _subset(inputs: dict, keys: list[str]) -> dict:
    chosen = copy.deepcopy(inputs)
    chosen["candidates"] = [c for c in inputs["candidates"] if c["key"] in keys]
    return chosen


def _sized(inputs: dict, tails_on: bool) -> dict[str, dict]:
    result = plan_inputs(inputs, tails_on=tails_on, cache=DictCache())
    return {row["candidate_key"]: row for row in result["rows"]}


def _values(row: dict) -> dict:
    return {f: row[f] for f in COMPARED}


def check_one_answer(inputs: dict, keys: list[str], tails_on: bool) -> None:
    crowd = _sized(_subset(inputs, keys), tails_on)
    for key in keys:
        alone = _sized(_subset(inputs, [key]), tails_on)[key]
        row = crowd[key]
        if row["evaluated"]:
            assert _values(row) == _values(alone), key
            continue
        # pruned in the crowd: its bound is a true lower bound, and it could not win
        bound = row["derivation"]["bound"]
        if alone["meets_slo"] and alone["usd_per_month"] is not None:
            assert bound["usd_per_month"] <= alone["usd_per_month"] + 1e-6, key
        # the prune group is (GPU, model): its best simulated option is what the bound lost to
        group = [
            r
            for r in crowd.values()
            if (r["gpu_slug"], r["model_name"]) == (row["gpu_slug"], row["model_name"])
            and r["latency_source"] == "simulated"
            and r["meets_slo"]
        ]
        assert group and bound["usd_per_month"] >= min(r["usd_per_month"] for r in group), key


@pytest.fixture
def base_inputs(catalog):
    scenario = make_scenario(
        models=["llama-3.1-8b", "Qwen3-8B", "Llama-3.1-70B"],
        gpus=["H100", "L40S"],
        precisions=["bf16", "fp8"],
    )
    return build_inputs_snapshot(scenario, scenario.price_sheet or _sheet())


def _sheet():
    from planner.selectors import latest_price_sheet

    return latest_price_sheet()


def _scenario_draw(inputs: dict, peak, ratio, isl, osl, tpot, ttft, utilization) -> dict:
    drawn = copy.deepcopy(inputs)
    drawn["traffic"].update(
        peak_rps=peak,
        mean_rps=peak * ratio,
        prompt_tokens_mean=isl,
        prompt_tokens_p95=None,
        output_tokens_mean=osl,
        output_tokens_p95=None,
    )
    drawn["slo"].update(tpot_ms=tpot, ttft_ms=ttft)
    drawn["policy"].update(target_utilization=utilization)
    return drawn


SCENARIOS = dict(
    peak=st.sampled_from([2.0, 20.0, 200.0]),
    ratio=st.sampled_from([0.3, 0.6]),
    isl=st.sampled_from([256, 1000, 4000]),
    osl=st.sampled_from([64, 300]),
    tpot=st.sampled_from([30.0, 60.0]),
    ttft=st.sampled_from([1000.0, 5000.0]),
    utilization=st.sampled_from([0.5, 0.8]),
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), **SCENARIOS)
def test_analytic_sizing_of_a_candidate_ignores_its_neighbours(base_inputs, data, **draw):
    # given a drawn scenario and a drawn subset of its candidates
    inputs = _scenario_draw(base_inputs, **draw)
    keys = [c["key"] for c in inputs["candidates"]]
    subset = data.draw(st.lists(st.sampled_from(keys), min_size=2, max_size=8, unique=True))
    # then each candidate's row is the same alone as in the subset
    check_one_answer(inputs, subset, tails_on=False)


@pytest.mark.tails
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), **SCENARIOS)
def test_simulated_sizing_of_a_candidate_ignores_its_neighbours(base_inputs, data, **draw):
    # given a drawn scenario and a small subset on one GPU, simulated as production does
    inputs = _scenario_draw(base_inputs, **draw)
    keys = [c["key"] for c in inputs["candidates"] if c["gpu"] == "h100_sxm"]
    subset = data.draw(st.lists(st.sampled_from(keys), min_size=2, max_size=3, unique=True))
    # then evaluated rows match their solo sizing; pruned rows' bounds hold
    check_one_answer(inputs, subset, tails_on=True)


def test_a_row_among_1000_candidates_is_the_row_alone(catalog):
    # given a ~1,000-candidate sweep sized analytically
    scenario = make_scenario(
        models=["llama-3.1-8b", "Qwen3-8B", "Llama-3.1-70B", "Qwen3-32B", "Mixtral-8x7B",
                "Qwen3-30B-A3B", "gpt-oss-120b", "Llama-3.1-405B", "Mistral-7B-v0.3"],
        gpus=["H100", "H100 PCIe", "H200", "B200", "B300", "L40S", "L4", "A100", "MI300X"],
        precisions=["bf16", "fp8", "int4"],
        tp_options=[1, 2, 4, 8],
    )  # fmt: skip
    inputs = build_inputs_snapshot(scenario, _sheet())
    assert len(inputs["candidates"]) >= 900
    crowd = _sized(inputs, tails_on=False)
    # then a spread of rows are identical when sized alone
    keys = [c["key"] for c in inputs["candidates"]][::97]
    for key in keys:
        assert _values(crowd[key]) == _values(_sized(_subset(inputs, [key]), False)[key]), key


def test_an_identical_imported_config_gets_the_same_numbers(catalog):
    # given a copy of a catalog model under another name
    from fleets.models import ModelArchitecture

    original = ModelArchitecture.objects.get(slug="mistral-7b-v0.3")
    original.pk, original.slug, original.name, original.hf_id = None, "my-7b", "My 7B", "me/my-7b"
    original.aliases = []
    original.save()
    scenario = make_scenario(models=["Mistral-7B-v0.3", "My 7B"], gpus=["L40S"], precisions=["fp8"])
    inputs = build_inputs_snapshot(scenario, _sheet())
    rows = _sized(inputs, tails_on=False)
    # then each layout of the copy sizes exactly as the original's
    by_layout: dict[tuple, list] = {}
    for row in rows.values():
        layout = (row["mode"], row["tp"], row["pp"], row["ep"])
        by_layout.setdefault(layout, []).append(_values(row))
    assert by_layout
    for pair in by_layout.values():
        a, b = ({k: v for k, v in values.items() if k != "reason"} for values in pair)
        assert a == b


def test_every_door_shows_the_same_row(catalog, client):
    # given one run, read through the API, the CSV export and plan's pipeline
    from tests.factories import UserFactory

    user = UserFactory()
    scenario = make_scenario(
        owner=user, models=["llama-3.1-8b"], gpus=["H100", "L40S"], precisions=["fp8"]
    )
    run = sizing_run_start(scenario=scenario)
    client.force_login(user)
    api_rows = {
        r["candidate_key"]: r
        for r in client.get(f"/api/v1/runs/{run.pk}/results/", {"limit": 1000}).json()["results"]
    }
    planned = {r["candidate_key"]: r for r in plan_inputs(run.inputs, tails_on=False)["rows"]}
    text = client.get(f"/api/v1/runs/{run.pk}/export.csv").getvalue().decode()
    exported = list(csv.DictReader(io.StringIO(text)))
    for key, row in api_rows.items():
        assert _values(row) == _values(planned[key]), key
        assert row["profile"] and row["latency_source"] in {"simulated", "analytic"}
    for line in exported:
        match = next(
            r for r in api_rows.values()
            if r["model_name"] == line["model"] and r["gpu_name"] == line["gpu"]
            and r["precision"] == line["weight_precision"] and str(r["tp"]) == line["tp"]
            and r["mode"] == line["mode"]
        )  # fmt: skip
        if match["mode"] == "disagg":  # the pools' layout and transfer travel with the row
            assert line["prefill_workers"] == str(match["prefill_workers"] or "")
            assert line["decode_tp"] == str(match["decode_tp"] or "")
        assert line["profile"] == match["profile"]
        assert line["latency_source"] == match["latency_source"]
        if match["usd_per_month"] is not None:
            assert float(line["usd_per_month"]) == round(match["usd_per_month"], 2)  # cents


@pytest.mark.django_db
def test_a_scenario_just_created_and_read_back_snapshots_identically(catalog):
    # given a scenario created from whole numbers (1000-token prompts, a 2000 ms TTFT, a burst)
    from planner.models import Scenario

    scenario = make_scenario(autoscaling={"burst_ramp_rps_per_s": 0.5})
    # when its snapshot is taken from the object just saved and from the row read back
    fresh = build_inputs_snapshot(scenario, None)
    stored = build_inputs_snapshot(Scenario.objects.get(pk=scenario.pk), None)
    # then their JSON is the same text (1000 against 1000.0 would give another cache key and
    # so another seed), and so is every candidate's simulation cache key
    import json

    from planner.tails import cache_key

    assert json.dumps(fresh, sort_keys=True, default=str) == json.dumps(
        stored, sort_keys=True, default=str
    )
    n = len(fresh["candidates"])
    assert [cache_key(fresh, i) for i in range(n)] == [cache_key(stored, i) for i in range(n)]
