"""The run page says when nothing fits and warns on absurd results (planner.verdicts)."""

import io

import pytest
from openpyxl import load_workbook

from planner import exports
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db


def test_nothing_fits_shows_the_binding_reason_not_a_green_success(owner_client, owner, catalog):
    # given Llama 3.1 405B in bf16 on one L4 (24 GB): the weights cannot fit
    scenario = make_scenario(
        owner,
        models=["Llama-3.1-405B-Instruct"],
        gpus=["L4"],
        precisions=["bf16"],
        tp_options=[1],
    )
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded" and run.summary["fitting"] == 0
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    # then the page names the reason with its numbers
    assert 'id="nothing-fits"' in page
    assert "Nothing fits: weights" in page and "GB usable on one L4" in page
    assert "Finished without an answer" in page
    sheet = load_workbook(io.BytesIO(exports.run_xlsx(run)))["summary"]
    assert any(r[0] == "nothing fits" for r in sheet.iter_rows(values_only=True))


def test_a_million_requests_per_second_gets_a_plausibility_warning(owner_client, owner, catalog):
    scenario = make_scenario(
        owner,
        models=["Llama-3.1-8B-Instruct"],
        gpus=["H100"],
        precisions=["fp8"],
        peak_rps=1e6,
        mean_rps=5e5,
    )
    run = sizing_run_start(scenario=scenario)
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert "Check this result: peak 1,000,000 requests/s is above 100,000" in page
    assert "/month is above $10 M/month for one service" in page
