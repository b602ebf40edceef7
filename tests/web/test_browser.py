"""The capacity review in a real browser: Playwright driving Debian's Chromium.

Never a downloaded browser: ``apt-get install -y chromium``. Skipped when Chromium or
Playwright is missing, unless REQUIRE_SERVICES=1 (then it fails). Screenshots of the main
pages go to test-artifacts/; the results page's charts also to docs/screenshots/results.png
when UPDATE_SCREENSHOTS=1 (the README's picture is refreshed on purpose, not by every run).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.factories import UserFactory
from tests.plugin_services import services_required

# Playwright's sync API runs an event loop in this thread; the ORM calls made here between
# browser steps are plain synchronous calls, so Django's async-context guard is lifted.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
README_SHOT = (
    ROOT / "docs" / "screenshots" / "results.png"
    if os.environ.get("UPDATE_SCREENSHOTS") == "1"
    else ARTIFACTS / "readme-results.png"
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "correct horse battery staple"
TIMEOUT_MS = 15_000
# A function, not an expression: Playwright evaluates expressions with eval, which the
# Content-Security-Policy (script-src 'self') forbids, as it should.
CHARTS_DRAWN = (
    "() => document.querySelectorAll('[data-figure]').length >= 3 && "
    "[...document.querySelectorAll('[data-figure]')].every(d => d.data && d.data.length)"
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _unavailable(reason: str):
    if services_required():
        pytest.fail(f"REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium")
    if executable is None:
        _unavailable("Debian's chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


def _shot(page, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def _no_horizontal_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"page is {width}px wide at a 1280px window"


def test_capacity_review_end_to_end(browser, live_server, monkeypatch):
    from planner import tasks
    from planner.models import SizingRun

    # given the shipped catalog and a reviewer
    call_command("load_catalog", verbosity=0)
    UserFactory(username="reviewer", password=PASSWORD)
    # the broker "accepts" the run but no worker picks it up until we say so, so the
    # progress bar is watched against a run that really is in flight
    send_to_workers = tasks.enqueue_run
    monkeypatch.setattr(tasks, "enqueue_run", lambda run_id: None)

    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # when the reviewer signs in
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("reviewer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/scenarios/")

    # and fills a scenario from a preset (keyboard-reachable select + button)
    page.goto(f"{live_server.url}/scenarios/new/")
    page.get_by_label("Fill the form from a preset").select_option("chat-llama70b")
    page.locator("#apply-preset").click()
    page.wait_for_url("**preset=chat-llama70b")
    assert page.locator("#id_name").input_value() == "Chat assistant on Llama 3.1 70B"
    assert page.locator("#id_peak_rps").input_value() == "20"
    _no_horizontal_scroll(page)
    _shot(page, "scenario-form")

    # and runs it
    page.locator("#save-and-run").click()
    page.wait_for_url("**/runs/*/")
    run = SizingRun.objects.get()
    progress = page.locator("#run-progress-bar")
    assert progress.get_attribute("value") == "0"
    page.evaluate("window.__sameDocument = true")

    # then the progress bar follows the workers (HTMX polls every second)
    SizingRun.objects.filter(pk=run.pk).update(status="running", progress=50)
    page.locator("#run-progress-text", has_text="50%").wait_for()
    _shot(page, "run-progress", full_page=False)
    send_to_workers(run.pk)  # eager: the chain runs to completion here
    page.locator("#results-table").wait_for()
    assert progress.get_attribute("value") == "100"
    assert page.locator("#run-progress-text").inner_text() == "100%"
    assert page.evaluate("window.__sameDocument") is True, "results arrived without a reload"

    # and the comparison table and charts are rendered, plotly divs holding data traces
    assert page.locator("#results-table tbody tr").count() == run.results.count()
    page.wait_for_function(CHARTS_DRAWN)
    traces = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('[data-figure]')]"
        ".map(d => [d.id, d.data.length]))"
    )
    assert {"chart-cost-by-sku", "chart-throughput-latency", "chart-memory"} <= set(traces)
    assert all(count > 0 for count in traces.values())
    _no_horizontal_scroll(page)

    # and the table sorts by a column from the keyboard
    month = page.locator("#results-table thead button", has_text="$/month")
    month.focus()
    page.keyboard.press("Enter")
    assert month.locator("xpath=..").get_attribute("aria-sort") == "ascending"

    # and the chain opens for the recommended option
    page.locator("#show-chain").click()
    chain = page.locator("#chain-panel")
    assert chain.get_attribute("open") is not None
    # (a disaggregated answer shows one memory fit per worker: the first is the decode one)
    assert chain.locator("code", has_text="kv_budget_gb_per_gpu").first.is_visible()
    README_SHOT.parent.mkdir(parents=True, exist_ok=True)
    page.locator("#charts-section").screenshot(path=str(README_SHOT))
    _shot(page, "results")

    # when the owner creates a read-only link
    page.locator("#create-share").click()
    share_url = page.locator("#share-url").input_value()
    assert "/s/" in share_url

    # then it opens in a fresh context without sign-in, read-only, without owner details
    guest_context = browser.new_context(viewport={"width": 1280, "height": 1000})
    guest_context.set_default_timeout(TIMEOUT_MS)
    guest = guest_context.new_page()
    response = guest.goto(share_url)
    assert response.status == 200
    guest.locator("#results-table").wait_for()
    body = guest.locator("body").inner_text()
    for hidden in ("Edit scenario", "Run again", "reviewer", "Sign out", "Create read-only link"):
        assert hidden not in body
    guest.wait_for_function("() => document.querySelector('[data-figure]').data !== undefined")
    _shot(guest, "shared")

    # when the owner revokes it / then the guest is refused
    page.locator(".revoke-link").first.click()
    page.wait_for_load_state()
    refused = guest.goto(share_url)
    assert refused.status == 404
    assert guest.locator("#not-found").is_visible()

    # and the scenario list shows the run's status and cost
    page.goto(f"{live_server.url}/scenarios/")
    assert "succeeded" in page.locator("#scenario-table").inner_text()
    _no_horizontal_scroll(page)
    _shot(page, "scenario-list")

    guest_context.close()
    context.close()
    assert not errors, errors
