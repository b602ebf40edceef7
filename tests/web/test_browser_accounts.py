"""A newcomer's capacity review in a real browser (Playwright driving Debian's Chromium):
sign up, recover from a failed submit, import a model, create and run a scenario from the
searchable checklists (the run sizes in the background), share it with a colleague who can
read it, clone it, and run a run again."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

from tests.factories import UserFactory
from tests.web.test_browser import TIMEOUT_MS, _no_horizontal_scroll, _shot, browser  # noqa: F401

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
PASSWORD = "a long enough passphrase 42"
RUN_TIMEOUT_MS = 120_000

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.background]


def _sign_in(page, url: str, username: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/scenarios/")


def _wait_for_results(page) -> None:
    page.locator("#run-status.done").wait_for(timeout=RUN_TIMEOUT_MS)


def test_newcomer_signs_up_shares_clones_imports_and_runs_again(browser, live_server, settings):  # noqa: F811
    from fleets.models import ModelArchitecture
    from planner.models import Scenario, SizingRun

    # given the shipped catalog, sign-up on (as under make run) and a colleague's account
    call_command("load_catalog", verbosity=0)
    settings.ALLOW_SIGNUP = True
    UserFactory(username="colleague", password=PASSWORD)
    url = live_server.url
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # when a newcomer finds sign-up from the sign-in page and creates an account
    page.goto(f"{url}/accounts/login/")
    page.locator("#signup-link").click()
    page.get_by_label("Username").fill("newcomer")
    page.get_by_label("E-mail").fill("newcomer@example.com")
    page.locator("#id_password1").fill(PASSWORD)
    page.locator("#id_password2").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    # then they are in
    page.wait_for_url("**/scenarios/")
    assert "Welcome, newcomer" in page.locator(".messages").inner_text()

    # when they submit an empty scenario form, focus lands on the linked error summary
    page.goto(f"{url}/scenarios/new/")
    page.locator("#save-and-run").click()
    page.wait_for_load_state()
    assert page.evaluate("document.activeElement.id") == "error-summary"
    summary = page.locator("#error-summary")
    assert summary.get_attribute("role") == "alert"
    summary.get_by_role("link", name="Peak rate").click()
    assert page.evaluate("document.activeElement.id") == "id_peak_rps"
    described = page.locator("#id_peak_rps").get_attribute("aria-describedby").split()
    assert "id_peak_rps_errors" in described
    assert page.locator("#id_peak_rps_errors").inner_text().strip()
    _shot(page, "form-errors", full_page=False)

    # when they import their fine-tune from a catalog family
    page.goto(f"{url}/models/")
    page.get_by_label("Model name").fill("acme/support-bot-8b")
    page.get_by_label("or start from a catalog family").select_option("llama-3.1-8b")
    page.locator("#import-model").click()
    page.wait_for_url("**/models/")
    assert "support-bot-8b" in page.locator("main").inner_text()
    assert ModelArchitecture.objects.get(hf_id="acme/support-bot-8b").owner.username == "newcomer"

    # and create a scenario, picking from the searchable checklists
    page.goto(f"{url}/scenarios/new/")
    for field, value in {
        "id_name": "Support bot",
        "id_peak_rps": "8",
        "id_mean_rps": "4",
        "id_prompt_tokens_mean": "800",
        "id_output_tokens_mean": "200",
        "id_ttft_ms": "2000",
        "id_tpot_ms": "60",
    }.items():
        page.locator(f"#{field}").fill(value)
    models_filter = page.get_by_label("Filter models")
    models_filter.fill("support bot")
    visible = page.locator("#id_models label:visible")
    assert visible.count() == 1 and "yours" in visible.first.inner_text()
    visible.first.locator("input").check()
    assert "1 selected, 1 shown" in page.locator("#id_models_status").inner_text()
    models_filter.press("Enter")  # Enter in the filter box must not submit the form
    page.wait_for_timeout(300)
    assert page.locator("#error-summary").count() == 0
    assert page.locator("#id_name").input_value() == "Support bot"
    page.get_by_label("Filter GPU SKUs").fill("h100 sxm")
    page.locator("#id_gpus label:visible").first.locator("input").check()
    page.locator("#id_precisions label", has_text="fp8").locator("input").check()
    assert page.locator("select#id_calibration_profile option").count() > 1
    _no_horizontal_scroll(page)
    _shot(page, "scenario-form-checklists")
    page.locator("#save-and-run").click()

    # then the run page answers at once with the progress bar, and results arrive in place
    page.wait_for_url("**/runs/*/")
    scenario = Scenario.objects.get(name="Support bot")
    first = SizingRun.objects.get(scenario=scenario)
    assert first.inputs["models"].keys() == {"support-bot-8b"}
    _wait_for_results(page)

    # when they share it with a colleague from the scenario page
    page.goto(f"{url}/scenarios/{scenario.pk}/")
    page.get_by_label("Share with colleagues (usernames, comma-separated)").fill("colleague")
    page.locator("#share-submit").click()
    page.wait_for_load_state()
    assert "colleague" in page.locator("#team").inner_text()
    assert list(scenario.shared_with.values_list("username", flat=True)) == ["colleague"]

    # and run the first run again (its own snapshot)
    page.goto(f"{url}/runs/{first.pk}/")
    page.locator("#run-again").click()
    page.wait_for_url(lambda u: u.rstrip("/").split("/")[-1] not in ("", str(first.pk)))
    _wait_for_results(page)
    rerun = SizingRun.objects.exclude(pk=first.pk).get(scenario=scenario)
    assert rerun.inputs == first.inputs

    # and clone the scenario, which opens the copy's form
    page.goto(f"{url}/scenarios/{scenario.pk}/")
    page.locator("#clone-scenario").click()
    page.wait_for_url("**/edit/")
    assert page.locator("#id_name").input_value() == "Copy of Support bot"
    assert page.locator("#id_models input:checked").count() == 1
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url("**/scenarios/*/")

    # then the colleague signs in and reads the scenario, read-only
    page.locator("header form button").click()  # sign out
    _sign_in(page, url, "colleague")
    assert "Support bot" in page.locator("#scenario-table").inner_text()
    assert "Copy of Support bot" not in page.locator("#scenario-table").inner_text()
    page.goto(f"{url}/scenarios/{scenario.pk}/")
    body = page.locator("main").inner_text()
    assert "Shared with you by newcomer (read-only)" in body
    assert page.locator("#run-scenario").count() == 0 and page.locator("#share-add").count() == 0
    page.goto(f"{url}/runs/{rerun.pk}/")
    _wait_for_results(page)
    assert page.locator("#run-again").count() == 0
    # and does not see the newcomer's private model in their own form
    page.goto(f"{url}/scenarios/new/")
    assert "support-bot-8b" not in page.locator("#id_models").inner_text()
    _shot(page, "colleague-form")

    context.close()
    assert not errors, errors
