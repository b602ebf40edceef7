"""Inputs inside the validated limits produce results that fit their columns; a chord part that
meets a non-transient database error fails its run at once with a readable reason."""

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from planner import tasks
from planner.models import SizingRun
from planner.services import MAX_PROVISIONED_RPS, sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db


def test_the_issues_inputs_are_refused_naming_the_fields(catalog):
    # peak 1e7 req/s, burst 100, utilization 0.01: each inside its own limit, 1e11 together
    with pytest.raises(ValidationError) as refused:
        make_scenario(peak_rps=1e7, mean_rps=1e6, burst_factor=100, target_utilization=0.01)
    errors = refused.value.message_dict
    assert set(errors) == {"peak_rps", "burst_factor", "target_utilization"}
    assert "1e+11 requests/s exceeds the limit of 1e+08" in errors["peak_rps"][0]


def test_the_largest_accepted_fleet_fits_its_columns(catalog):
    # given the provisioned rate at its limit with long requests (the most GPUs per request/s)
    scenario = make_scenario(
        peak_rps=1e7,
        mean_rps=1e6,
        burst_factor=10,
        target_utilization=1,
        prompt_tokens_mean=100_000,
        prompt_tokens_p95=120_000,
        output_tokens_mean=2000,
        output_tokens_p95=4000,
    )
    assert scenario.peak_rps * scenario.burst_factor / scenario.target_utilization == (
        MAX_PROVISIONED_RPS
    )
    # when it runs, then it succeeds: every replica and GPU count was saved
    run = sizing_run_start(scenario=scenario)
    run.refresh_from_db()
    assert run.status == SizingRun.Status.SUCCEEDED, run.error
    assert max(run.results.values_list("gpus", flat=True)) > 2**31  # past the old int column


def test_a_value_outside_its_column_fails_the_run_at_once(catalog):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite does not enforce column sizes")
    # given a run whose frozen inputs (edited past validation) hold a GPU name too long for
    # its column: neither a calculation error nor a transient one
    scenario = make_scenario(models=["llama-3.1-8b"], gpus=["H100"], precisions=["fp8"])
    run = sizing_run_start(scenario=scenario)
    run.inputs["gpu_names"] = {slug: "H" * 101 for slug in run.inputs["gpu_names"]}
    SizingRun.objects.filter(pk=run.pk).update(
        inputs=run.inputs, status=SizingRun.Status.RUNNING, batches_done=[], summary={}
    )
    run.results.all().delete()
    # when a chord part sizes and saves the batch, then the run fails now with the reason
    assert tasks.size_batch(run.pk, 0) == 0
    run.refresh_from_db()
    assert run.status == SizingRun.Status.FAILED
    assert run.error.startswith("batch 0's results could not be saved: ")
    assert "value too long" in run.error and "\n" not in run.error
    assert run.results.count() == 0  # nothing half-saved
