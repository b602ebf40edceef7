"""The model x GPU grid in a real browser (Debian's Chromium): one answer per cell, each
model's own API alternative, the plain break-even sentence and the hybrid plan."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tests.factories import UserFactory, make_scenario
from tests.web.test_browser import PASSWORD, TIMEOUT_MS, _no_horizontal_scroll, _shot, browser

__all__ = ["browser"]  # the module-scoped Chromium fixture
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_the_grid_shows_each_model_on_each_gpu_against_its_own_api(browser, live_server):
    from planner.services import sizing_run_start

    # given two models on two GPUs, no API price in the scenario (the sheet's per model)
    call_command("load_catalog", verbosity=0)
    owner = UserFactory(username="grid", password=PASSWORD)
    scenario = make_scenario(
        owner,
        models=["llama-3.1-8b", "Qwen3-32B"],
        gpus=["H100", "L40S"],
        precisions=["fp8"],
        api_input_usd_per_mtok=None,
        api_output_usd_per_mtok=None,
    )
    run = sizing_run_start(scenario=scenario)
    assert run.status == "succeeded", run.error
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # when the reviewer opens the run
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("grid")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/scenarios/")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    grid = page.locator("#per-model-grid")
    grid.wait_for()

    # then the grid has a row per model and a column per GPU, each cell with its own answer
    heads = grid.locator("thead th").all_inner_texts()
    assert heads[0] == "Model" and heads[-1] == "Against the API"
    assert sorted(heads[1:-1]) == ["H100 SXM", "L40S"]
    by_model = {e["model"]: e for e in run.summary["per_model"]}
    for slug, entry in by_model.items():
        row = grid.locator(f'tr[data-model="{slug}"]')
        assert row.locator("th").inner_text() == entry["model_name"]
        for cell in entry["per_gpu"]:
            text = row.locator(f'td[data-gpu="{cell["gpu"]}"]').inner_text()
            assert ("/month" in text) if cell["recommended"] else text.startswith("none:")
        # and each model names its own API alternative from the sheet
        api = row.locator("td.grid-api").inner_text()
        assert f"vs {entry['api']['label']}" in api and "Reference public prices v1" in api
        assert entry["api"]["verdict"][1:] in api and "Hybrid:" in api
    labels = {e["api"]["label"] for e in by_model.values()}
    assert labels == {"DeepInfra meta-llama/Meta-Llama-3.1-8B-Instruct", "DeepInfra Qwen/Qwen3-32B"}
    # and each model's cheapest SKU is starred once
    assert grid.locator("td.grid-cell.best").count() == 2
    # and the per-GPU cards say plainly who is cheaper, with the hybrid plan
    assert page.locator("#recommendations .api-verdict").count() == 2
    assert page.locator("#recommendations .card-hybrid").count() == 2
    _no_horizontal_scroll(page)
    _shot(page, "results-per-model")
    context.close()
    assert not errors, errors
