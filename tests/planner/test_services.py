"""Scenario services and the sizing run, in-process (the embedded default) on PostgreSQL."""

import pytest
from django.core.exceptions import ValidationError

from planner import runner, tasks
from planner.models import CandidateResult, Scenario, SizingRun
from planner.services import (
    scenario_update,
    share_link_create,
    sizing_run_rerun,
    sizing_run_start,
)
from pricing.models import GpuHourPrice, PriceSheet
from pricing.services import price_sheet_new_version
from tests.factories import UserFactory, make_scenario, scenario_data

pytestmark = pytest.mark.django_db


def _errors(**overrides) -> dict:
    with pytest.raises(ValidationError) as error:
        make_scenario(**overrides)
    assert Scenario.objects.count() == 0  # nothing half-saved
    return error.value.message_dict


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        ({"peak_rps": 0}, "peak_rps", "greater than 0"),
        ({"mean_rps": -1}, "mean_rps", "greater than 0"),
        ({"output_tokens_mean": 0}, "output_tokens_mean", "greater than 0"),
        ({"prompt_tokens_p95": 500}, "prompt_tokens_p95", "at least the mean"),
        ({"output_tokens_p95": 100}, "output_tokens_p95", "at least the mean"),
        ({"prompt_tokens_p95": 3870}, "prompt_tokens_p95", "at most 3.87x the mean (1000)"),
        ({"output_tokens_p95": 1200}, "output_tokens_p95", "at most 3.87x the mean (300)"),
        ({"gpus": ["H100", "TPU v9"]}, "gpus", "unknown GPU 'TPU v9'"),
        ({"models": ["llama-9-1t"]}, "models", "unknown model 'llama-9-1t'"),
        ({"tp_options": [3]}, "tp_options", "TP 3 does not divide the 64 attention heads"),
        ({"price_sheet": 999999}, "price_sheet", "does not exist"),
        ({"precisions": ["fp3"]}, "precisions", "unknown"),
        ({"mean_rps": 50}, "mean_rps", "cannot exceed the peak"),
        ({"hourly_rps": [1, 2]}, "hourly_rps", "24 hourly values"),
        ({"peak_rps": "lots"}, "peak_rps", "must be a float"),
    ],
)
def test_bad_input_names_the_field(catalog, overrides, field, fragment):
    errors = _errors(**overrides)
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors[field]


def test_run_sizes_every_candidate_and_recommends_per_gpu(catalog):
    # given the typical scenario: 3 models x 4 GPUs x 3 precisions x valid TPs
    scenario = make_scenario()
    # when it runs in-process
    run = sizing_run_start(scenario=scenario)
    # then every candidate has one row, the run succeeded, and each GPU has its recommendation
    assert run.status == SizingRun.Status.SUCCEEDED and run.progress == 100, run.error
    assert run.results.count() == run.candidate_count == len(run.inputs["candidates"]) > 100
    recommended = run.results.filter(recommended=True)
    assert {r.gpu_slug for r in recommended} == {"h100_sxm", "h200_sxm", "b200", "l40s"}
    for result in recommended:
        assert result.meets_slo and result.usd_per_month > 0 and result.gpus >= result.replicas
        assert result.derivation["steps"], "every result carries its derivation"
    assert run.summary["best"] == run.results.get(rank=1).candidate_key
    # misfits (70B bf16 on one L40S) are rows with a reason, never a failed run
    misfit = run.results.get(candidate_key="llama-3.1-70b|l40s|bf16|tp1|pp1|ep1")
    assert not misfit.fits and "GB" in misfit.reason
    assert run.price_sheet.locked


def test_redelivered_batch_never_duplicates_rows(catalog):
    run = sizing_run_start(scenario=make_scenario())
    before = CandidateResult.objects.filter(run=run).count()
    # a re-delivered task of a saved batch, and a forced re-save of the same batch
    tasks.size_batch(run.pk, 0)
    values = runner.size_candidates(run.inputs, range(0, 5))
    run.batches_done = []
    run.save()
    tasks._save_batch(run.pk, 0, values)
    assert CandidateResult.objects.filter(run=run).count() == before


def test_calculation_bug_fails_the_run_with_a_message(catalog, monkeypatch):
    def broken(inputs, indices):
        raise ZeroDivisionError("division by zero in step time")

    monkeypatch.setattr(runner, "size_candidates", broken)
    run = sizing_run_start(scenario=make_scenario())
    assert run.status == SizingRun.Status.FAILED
    assert "division by zero in step time" in run.error
    assert run.finished_at is not None


def test_a_scenario_saved_with_an_unreachable_p95_is_refused_at_run_start(catalog):
    # given a scenario saved before p95 > 3.87x the mean was refused at input (written as
    # the row was then, past the service), and a run of it saved before as well
    scenario = make_scenario()
    good = sizing_run_start(scenario=scenario)
    Scenario.objects.filter(pk=scenario.pk).update(output_tokens_p95=1200.0)  # mean 300
    SizingRun.objects.filter(pk=good.pk).update(
        inputs={**good.inputs, "traffic": {**good.inputs["traffic"], "output_tokens_p95": 1200.0}}
    )
    scenario.refresh_from_db()
    runs_before = SizingRun.objects.count()
    # when a run starts, or the old run is run again
    with pytest.raises(ValidationError) as started:
        sizing_run_start(scenario=scenario)
    with pytest.raises(ValidationError) as rerun:
        sizing_run_rerun(run=SizingRun.objects.get(pk=good.pk))
    # then both are refused naming the field and the limit, and no run is saved to fail later
    for error in (started, rerun):
        messages = error.value.message_dict["output_tokens_p95"]
        assert any("at most 3.87x the mean (300)" in m for m in messages), messages
    assert SizingRun.objects.count() == runs_before


def test_rerun_after_price_change_shows_what_moved(catalog):
    scenario = make_scenario(gpus=["H100"], models=["llama-3.1-8b"], precisions=["fp8"])
    first = sizing_run_start(scenario=scenario)
    sheet = PriceSheet.objects.get()
    newer = price_sheet_new_version(sheet)
    GpuHourPrice.objects.filter(sheet=newer, gpu_slug="h100_sxm").update(usd_per_gpu_hour=9.99)
    second = sizing_run_start(scenario=scenario)
    assert second.price_sheet == newer and first.price_sheet == sheet
    a = first.results.get(recommended=True)
    b = second.results.get(candidate_key=a.candidate_key)
    assert b.usd_per_hour / b.gpus == pytest.approx(9.99)
    assert b.usd_per_month > a.usd_per_month
    assert scenario.runs.count() == 2


def test_update_keeps_candidates_unless_given(catalog):
    scenario = make_scenario()
    scenario_update(scenario=scenario, data={"peak_rps": 40.0, "mean_rps": 20.0})
    scenario.refresh_from_db()
    assert scenario.peak_rps == 40 and scenario.candidate_gpus.count() == 4
    with pytest.raises(ValidationError):
        scenario_update(scenario=scenario, data={"mean_rps": 80.0})
    scenario.refresh_from_db()
    assert scenario.mean_rps == 20


def test_share_link_token_is_long_and_stored_hashed(catalog):
    user = UserFactory()
    scenario = make_scenario(owner=user)
    link, token = share_link_create(user=user, scenario=scenario)
    assert len(token) >= 43  # 32 random bytes in base64url: 256 bits
    assert token not in link.token_sha256 and len(link.token_sha256) == 64


def test_scenario_data_is_the_documented_typical_case():
    data = scenario_data()
    assert len(data["models"]) * len(data["gpus"]) * len(data["precisions"]) == 36
