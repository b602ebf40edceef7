"""The finance flow in a real browser (Debian's Chromium): a custom price, a run, the XLSX.

The download buttons wait for the run; the XLSX downloaded by the browser is read back with
openpyxl and carries the reviewer's price and its source.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from openpyxl import load_workbook

from tests.factories import UserFactory
from tests.web.test_browser import PASSWORD, TIMEOUT_MS, _no_horizontal_scroll, _shot, browser

__all__ = ["browser"]  # the module-scoped Chromium fixture
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_custom_price_run_and_xlsx_read_back(browser, live_server, monkeypatch, tmp_path):
    from planner import tasks
    from planner.models import SizingRun

    # given the shipped catalog, a reviewer, and workers that wait until told
    call_command("load_catalog", verbosity=0)
    UserFactory(username="finance", password=PASSWORD)
    send_to_workers = tasks.enqueue_run
    monkeypatch.setattr(tasks, "enqueue_run", lambda run_id: None)
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("finance")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/scenarios/")

    # when they fill a preset, enter their own H100 price and one spare node, and run
    page.goto(f"{live_server.url}/scenarios/new/")
    page.get_by_label("Fill the form from a preset").select_option("chat-llama70b")
    page.locator("#apply-preset").click()
    page.wait_for_url("**preset=chat-llama70b")
    page.get_by_label("Your GPU prices").fill("H100 = 2.50")
    assert page.get_by_label("GPU provider").input_value() == ""  # cheapest
    page.get_by_label("Spare nodes (N+k by failure domain)").fill("1")
    _shot(page, "scenario-form-prices")
    page.locator("#save-and-run").focus()
    page.keyboard.press("Enter")  # from the keyboard, as a reviewer may
    page.wait_for_url("**/runs/*/")
    run = SizingRun.objects.get()
    assert run.inputs["gpus"]["h100_sxm"]["price_source"]["provider"] == "custom"
    assert run.inputs["policy"]["spare_nodes"] == 1

    # then the downloads wait for the run
    waiting = page.locator("#export-actions")
    assert "when the run finishes" in waiting.inner_text()
    assert page.locator("#export-actions a").count() == 0
    send_to_workers(run.pk)
    page.locator("#results-table").wait_for()
    page.locator("#export-actions a", has_text="Download XLSX").wait_for()

    # and the page lists the prices with their sources, the H100 rows priced from custom
    prices = page.locator("#prices-table").inner_text()
    assert "custom" in prices and "$2.50" in prices
    assert "custom $2.5/GPU-h" in page.locator("#results-table").inner_text()
    _no_horizontal_scroll(page)
    _shot(page, "results-prices")

    # when they download the XLSX
    with page.expect_download() as info:
        page.locator("#export-actions a", has_text="Download XLSX").click()
    path = tmp_path / "run.xlsx"
    info.value.save_as(path)

    # then it reads back with the summary, the results at $2.50/GPU-h for H100, and the inputs
    book = load_workbook(path)
    assert book.sheetnames == ["summary", "results", "inputs"]
    results = book["results"]
    header = [c.value for c in results[1]]
    col = {name: i for i, name in enumerate(header)}
    h100 = [
        r
        for r in results.iter_rows(min_row=2, values_only=True)
        if r[col["gpu_slug"]] == "h100_sxm" and r[col["usd_per_hour"]] is not None
    ]
    assert h100 and all(r[col["usd_per_gpu_hour"]] == 2.5 for r in h100)
    assert all(r[col["usd_per_hour"]] == round(r[col["gpus_total"]] * 2.5, 2) for r in h100)
    assert all(isinstance(r[col["meets_slo"]], bool) for r in h100)
    inputs = {r[0]: r[1] for r in book["inputs"].iter_rows(values_only=True) if r and r[0]}
    assert inputs["spare_nodes (N+k nodes)"] == 1
    assert any(r[0] == "best overall" for r in book["summary"].iter_rows(values_only=True))
    context.close()
    assert not errors, errors
