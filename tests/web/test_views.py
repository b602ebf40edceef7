"""Server-side tests of the capacity-review UI: form errors, permissions, runs, share links."""

from __future__ import annotations

import ast
import datetime as dt
import re
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.forms import CheckboxSelectMultiple
from django.utils import timezone

from planner import charts, services
from planner.forms import ScenarioForm, presets
from planner.models import Scenario, ShareLink, SizingRun
from tests.factories import UserFactory, make_scenario
from tests.web.conftest import form_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def scenario(catalog, owner):
    return make_scenario(owner, models=["Llama-3.1-70B-Instruct"], gpus=["H100", "L40S"])


@pytest.fixture
def run(scenario):
    return services.sizing_run_start(scenario=scenario)


def _errors_for(response, field: str) -> str:
    """The text of the error list rendered beside ``field``."""
    match = re.search(
        rf'id="id_{field}_errors"[^>]*>(.*?)</ul>', response.content.decode(), flags=re.S
    )
    return match.group(1) if match else ""


# --------------------------------------------------------------------------- sign-in, token


def test_private_pages_redirect_anonymous_visitors_to_sign_in(client, catalog):
    # given no session / when a private page is asked for / then sign-in is required
    for url in ["/scenarios/", "/scenarios/new/", "/accounts/token/", "/compare/"]:
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


def test_sign_in_page_labels_its_inputs_and_signs_in(client, owner):
    page = client.get("/accounts/login/").content.decode()
    assert '<label for="id_username">' in page and '<label for="id_password">' in page
    response = client.post(
        "/accounts/login/",
        {"username": "owner", "password": "correct horse battery staple", "next": "/scenarios/"},
    )
    assert response.status_code == 302 and response["Location"] == "/scenarios/"


def test_sign_out_is_a_post_with_csrf(owner_client):
    page = owner_client.get("/").content.decode()
    assert 'action="/accounts/logout/"' in page and "csrfmiddlewaretoken" in page
    assert owner_client.post("/accounts/logout/").status_code == 302
    assert owner_client.get("/scenarios/").status_code == 302


def test_api_token_page_shows_and_regenerates_the_token(owner_client, owner):
    from rest_framework.authtoken.models import Token

    # given no token / when created / then it is shown
    owner_client.post("/accounts/token/")
    first = Token.objects.get(user=owner).key
    assert first in owner_client.get("/accounts/token/").content.decode()
    # when regenerated / then the old key is gone
    owner_client.post("/accounts/token/")
    second = Token.objects.get(user=owner).key
    assert second != first
    assert not Token.objects.filter(key=first).exists()


# --------------------------------------------------------------------------- scenario form


def test_new_scenario_form_has_a_label_and_unit_for_every_input(owner_client, catalog):
    page = owner_client.get("/scenarios/new/").content.decode()
    form = ScenarioForm()
    for name, field in form.fields.items():
        if isinstance(field.widget, CheckboxSelectMultiple):  # a group: legend, labelled boxes
            assert f"<legend>{field.label}" in page, name
            assert f'for="id_{name}_0"' in page, name
            continue
        assert f'for="id_{name}"' in page, name
        if field.unit:
            assert f'id="id_{name}_unit"' in page, name


@pytest.mark.parametrize("slug", list(presets()))
def test_every_preset_fills_the_form_with_a_valid_scenario(owner_client, owner, catalog, slug):
    # given a preset / when the form is filled from it and posted back as is
    response = owner_client.get(f"/scenarios/new/?preset={slug}")
    assert response.status_code == 200
    form = response.context["form"]
    assert form.initial["models"] and form.initial["gpus"], "preset names resolve in the catalog"
    body = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if value is None:
            continue
        body[name] = value
    created = owner_client.post("/scenarios/new/", body)
    # then the service accepts it
    assert created.status_code == 302, created.context["form"].errors
    assert Scenario.objects.filter(owner=owner, name=presets()[slug]["name"]).exists()


def test_a_valid_form_creates_the_scenario_through_the_service(owner_client, owner, catalog):
    response = owner_client.post("/scenarios/new/", form_post())
    scenario = Scenario.objects.get(owner=owner)
    assert response.status_code == 302
    assert response["Location"] == f"/scenarios/{scenario.pk}/"
    assert scenario.tags == ["chat", "prod"]
    assert set(scenario.candidate_gpus.values_list("slug", flat=True)) == {"h100_sxm", "l40s"}


REQUIRED = [
    "name",
    "peak_rps",
    "mean_rps",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "ttft_ms",
    "tpot_ms",
    "models",
    "gpus",
    "precisions",
]


@pytest.mark.parametrize("field", REQUIRED)
def test_a_missing_required_input_is_reported_beside_it(owner_client, catalog, field):
    response = owner_client.post("/scenarios/new/", form_post(**{field: None}))
    assert response.status_code == 400
    assert "required" in _errors_for(response, field)
    assert not Scenario.objects.exists()


FORM_ERRORS = [
    # (field, posted value, words in the message): parsing errors from the form
    ("peak_rps", "lots", "Enter a number"),
    ("spare_replicas", "1.5", "whole number"),
    ("models", ["no-such-model"], "valid choice"),
    ("gpus", ["tpu-v9"], "valid choice"),
    ("precisions", ["fp3"], "valid choice"),
    ("engine", "ollama", "valid choice"),
    ("tier", "free", "valid choice"),
    ("price_sheet", "99999", "valid choice"),
    ("name", "x" * 201, "at most 200"),
    ("hourly_rps", "1, 2, many", "not a number"),
    ("tp_options", "2, four", "not a whole number"),
    ("pp_options", "x", "not a whole number"),
    ("ep_options", "1.5", "not a whole number"),
    # business rules from services.clean_scenario_data, keyed by the same field names
    ("peak_rps", "-5", "greater than 0"),
    ("mean_rps", "50", "cannot exceed the peak"),
    ("prompt_tokens_p95", "500", "at least the mean"),
    ("output_tokens_p95", "100", "at least the mean"),
    ("prompt_tokens_mean", "20000000", "less than or equal"),
    ("hourly_rps", "1, 2, 3", "24 hourly values"),
    ("prefix_hit_rate", "1.5", "less than or equal to 1"),
    ("shared_prefix_tokens", "-1", "greater than or equal to 0"),
    ("ttft_ms", "0", "greater than 0"),
    ("tpot_ms", "-1", "greater than 0"),
    ("slo_percentile", "100", "less than or equal to 99.9"),
    ("goodput_target", "1.2", "less than or equal to 1"),
    ("tp_options", "3", "does not divide"),
    ("tp_options", "128", "from 1 to 72"),
    ("pp_options", "32", "from 1 to 16"),
    ("api_input_usd_per_mtok", "-1", "greater than or equal to 0"),
    ("api_output_usd_per_mtok", "-0.5", "greater than or equal to 0"),
    ("target_utilization", "1.5", "less than or equal to 1"),
    ("target_utilization", "0", "greater than 0"),
    ("burst_factor", "0.5", "greater than or equal to 1"),
    ("spare_replicas", "-1", "greater than or equal to 0"),
    ("warm_pool_replicas", "-2", "greater than or equal to 0"),
    # the fleet-life blocks: "key = value" lines, each bad key named beside its box
    ("ownership", "pue = 0.9", "pue: must be at least 1"),
    ("ownership", "depreciation_years = 0", "depreciation_years: must be greater than 0"),
    ("cold_start", "registry_gb_s = -1", "registry_gb_s: must be at least 0.01"),
    ("cold_start", "weights_source", "write key = value"),
    ("autoscaling", "spot_share = 2", "spot_share: must be at most 1"),
    ("autoscaling", "spot_share = -0.1", "spot_share: must be at least 0"),
    ("cold_start", "weights_gb_s = -3", "weights_gb_s: must be at least 0.01"),
    ("ownership", "usd_per_kwh = -1", "usd_per_kwh: must be at least 0"),
    ("hourly_rps", ", ".join(["5"] * 24), "average 5 requests/s but mean_rps is 10"),
]


@pytest.mark.parametrize(("field", "value", "words"), FORM_ERRORS)
def test_each_invalid_input_is_reported_beside_its_field(
    owner_client, catalog, field, value, words
):
    # given an otherwise valid form / when one input is wrong
    response = owner_client.post("/scenarios/new/", form_post(**{field: value}))
    # then the page answers 400, keeps the input, and says what is wrong next to it
    assert response.status_code == 400
    assert words in _errors_for(response, field)
    assert 'role="alert"' in response.content.decode()
    assert not Scenario.objects.exists()


def test_service_errors_without_a_field_go_to_the_top_of_the_form(catalog):
    form = ScenarioForm(data=form_post())
    assert form.is_valid()
    form.apply_service_errors(ValidationError({"candidates": ["no valid candidate"]}))
    assert form.non_field_errors() == ["candidates: no valid candidate"]


def test_the_edit_form_updates_the_owners_scenario(owner_client, scenario):
    page = owner_client.get(f"/scenarios/{scenario.pk}/edit/")
    assert page.status_code == 200
    assert page.context["form"].initial["gpus"] == sorted(["h100_sxm", "l40s"]) or set(
        page.context["form"].initial["gpus"]
    ) == {"h100_sxm", "l40s"}
    response = owner_client.post(
        f"/scenarios/{scenario.pk}/edit/", form_post(name="Renamed", peak_rps="40")
    )
    assert response.status_code == 302
    scenario.refresh_from_db()
    assert scenario.name == "Renamed" and scenario.peak_rps == 40


def test_the_edit_form_reports_service_errors(owner_client, scenario):
    response = owner_client.post(f"/scenarios/{scenario.pk}/edit/", form_post(mean_rps="99"))
    assert response.status_code == 400
    assert "cannot exceed the peak" in _errors_for(response, "mean_rps")


# --------------------------------------------------------------------------- list, run, results


def test_scenario_list_searches_filters_by_tag_and_shows_the_last_run(owner_client, owner, run):
    other = make_scenario(owner, name="Batch jobs", tags=["batch"])
    page = owner_client.get("/scenarios/").content.decode()
    # newest first
    assert page.index("Batch jobs") < page.index("Chat assistant")
    assert "succeeded" in page and "$" in page  # last run status and best monthly cost
    assert "Chat assistant" not in owner_client.get("/scenarios/?q=batch").content.decode()
    tagged = owner_client.get("/scenarios/?tag=batch").content.decode()
    assert other.name in tagged and "Chat assistant" not in tagged


def test_save_and_run_goes_to_the_finished_results(owner_client, owner, catalog):
    response = owner_client.post("/scenarios/new/", form_post(action="run"), follow=True)
    run = SizingRun.objects.get(scenario__owner=owner)
    assert response.redirect_chain[-1][0] == f"/runs/{run.pk}/"
    page = response.content.decode()
    assert 'id="results-table"' in page and 'value="100"' in page
    assert 'id="chain-panel"' in page


def test_results_page_has_table_charts_with_tables_and_the_chain(owner_client, run):
    response = owner_client.get(f"/runs/{run.pk}/")
    page = response.content.decode()
    assert response.status_code == 200
    for heading in ["$/hour", "$/month", "$/M tok", "Tokens per $", "Binding", "TTFT p95 (ms)"]:
        assert heading in page
    chart_ids = {c["id"] for c in response.context["charts"]}
    assert {"chart-cost-by-sku", "chart-throughput-latency", "chart-memory"} <= chart_ids
    assert "chart-breakeven" in chart_ids  # the scenario has an API price
    assert page.count("<summary>Table:") == len(chart_ids)
    assert "plotly-4.1.1.min.js" in page and "cdn" not in page.lower()
    chain = response.context["chain"]
    stages = {
        "agg": [
            "Memory fit",
            "Step time and mean-value operating point",
            "Tail latency and capacity per replica",
            "Little's law, headroom and cost",
        ],
        # a disaggregated answer: its layout, each worker's memory, then the pools
        "disagg": [
            "Disaggregated layout",
            "Memory fit - decode worker",
            "Memory fit - prefill worker",
            "KV transfer between the pools",
        ],
    }
    shown = response.context["chain_result"].mode
    assert [s["title"] for s in chain][:4] == stages[shown]
    # the card says where its latencies come from, at which statistic, and the band
    assert "latency-source" in page and "card-profile" in page and "at p95" in page
    assert "kv_budget_gb_per_gpu" in page and "usd_per_month" in page


def test_the_chain_can_show_any_result_of_the_run(owner_client, run):
    misfit = run.results.filter(fits=False).first()
    page = owner_client.get(f"/runs/{run.pk}/?chain={misfit.pk}").content.decode()
    assert "Does not fit" in page and " open" in page


def test_daily_chart_appears_with_a_24_hour_profile(owner_client, catalog, owner):
    hourly = [5.0] * 12 + [20.0] * 12
    scenario = make_scenario(
        owner, hourly_rps=hourly, mean_rps=12.5, models=["llama-3.1-8b"], gpus=["H100"]
    )
    run = services.sizing_run_start(scenario=scenario)
    response = owner_client.get(f"/runs/{run.pk}/")
    assert "chart-daily" in {c["id"] for c in response.context["charts"]}


def test_progress_partial_polls_while_running_then_returns_the_results(owner_client, run):
    # given a run still in progress
    SizingRun.objects.filter(pk=run.pk).update(status="running", progress=40)
    partial = owner_client.get(f"/runs/{run.pk}/progress/", HTTP_HX_REQUEST="true")
    body = partial.content.decode()
    assert 'hx-trigger="every 1s"' in body and 'value="40"' in body and "<html" not in body
    # when it finishes / then the same partial carries the results, without a page
    SizingRun.objects.filter(pk=run.pk).update(status="succeeded", progress=100)
    body = owner_client.get(f"/runs/{run.pk}/progress/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="results-table"' in body and "hx-trigger" not in body
    # and a plain browser request goes to the page
    assert owner_client.get(f"/runs/{run.pk}/progress/").status_code == 302


def test_failed_run_shows_its_error(owner_client, run):
    SizingRun.objects.filter(pk=run.pk).update(status="failed", error="calculation error X")
    assert "calculation error X" in owner_client.get(f"/runs/{run.pk}/").content.decode()


def test_run_when_workers_are_down_says_so_and_shows_the_queued_run(
    owner_client, scenario, monkeypatch
):
    def refuse(**kwargs):
        run = SizingRun.objects.create(scenario=scenario, inputs={}, candidate_count=1)
        raise services.WorkersUnavailable(f"run {run.pk} is saved and queued")

    monkeypatch.setattr(services, "sizing_run_start", refuse)
    response = owner_client.post(f"/scenarios/{scenario.pk}/run/", follow=True)
    page = response.content.decode()
    assert "saved and queued" in page and 'hx-trigger="every 1s"' in page


def test_csv_and_xlsx_downloads_reuse_the_exports(owner_client, run):
    csv = owner_client.get(f"/runs/{run.pk}/export.csv")
    assert csv["Content-Type"].startswith("text/csv")
    assert csv.getvalue().decode().splitlines()[0].startswith("rank,recommended,model,gpu")
    xlsx = owner_client.get(f"/runs/{run.pk}/export.xlsx")
    assert xlsx["Content-Type"].startswith("application/vnd.openxmlformats")
    assert xlsx.getvalue()[:2] == b"PK"


# --------------------------------------------------------------------------- compare


def test_compare_two_scenarios_highlights_differences(owner_client, owner, run):
    second = make_scenario(owner, name="Bigger", peak_rps=40.0, models=["llama-3.1-8b"])
    response = owner_client.get(f"/compare/?scenario={run.scenario_id}&scenario={second.pk}")
    assert response.status_code == 200
    rows = {r["label"]: r for s in response.context["sections"] for r in s["rows"]}
    assert rows["Peak rate (requests/s)"]["differs"]
    assert not rows["TTFT limit (ms)"]["differs"]
    assert "<mark>" in response.content.decode()


def test_compare_two_runs_of_one_scenario(owner_client, run):
    second = services.sizing_run_start(scenario=run.scenario)
    response = owner_client.get(f"/compare/?run={run.pk}&run={second.pk}")
    assert response.status_code == 200 and len(response.context["columns"]) == 2


def test_compare_needs_two_columns(owner_client, run):
    response = owner_client.get(f"/compare/?run={run.pk}")
    assert response.status_code == 302


# --------------------------------------------------------------------------- permissions


def _private_routes(scenario, run):
    return [
        ("get", f"/scenarios/{scenario.pk}/"),
        ("get", f"/scenarios/{scenario.pk}/edit/"),
        ("post", f"/scenarios/{scenario.pk}/edit/"),
        ("post", f"/scenarios/{scenario.pk}/run/"),
        ("get", f"/runs/{run.pk}/"),
        ("get", f"/runs/{run.pk}/progress/"),
        ("get", f"/runs/{run.pk}/export.csv"),
        ("get", f"/runs/{run.pk}/export.xlsx"),
        ("post", f"/runs/{run.pk}/share/"),
        ("get", f"/compare/?scenario={scenario.pk}&scenario={scenario.pk}"),
        ("get", f"/compare/?run={run.pk}&run={run.pk}"),
    ]


def test_another_users_ids_answer_404_on_every_route(client, run, stranger):
    client.force_login(stranger)
    mine = make_scenario(stranger, name="Stranger plan")
    for method, url in _private_routes(run.scenario, run):
        if "compare" in url:
            url += f"&scenario={mine.pk}"
        response = getattr(client, method)(url, HTTP_HX_REQUEST="true")
        assert response.status_code == 404, (method, url)
    link, _ = services.share_link_create(user=run.scenario.owner, scenario=run.scenario, run=run)
    assert client.post(f"/share-links/{link.pk}/revoke/").status_code == 404
    assert run.scenario.name not in client.get("/scenarios/").content.decode()


def test_a_user_it_is_shared_with_reads_but_cannot_edit_run_or_share(client, run, stranger):
    run.scenario.shared_with.add(stranger)
    client.force_login(stranger)
    detail = client.get(f"/scenarios/{run.scenario_id}/").content.decode()
    assert "read-only" in detail and "Run sizing" not in detail
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Edit scenario" not in page and "Create read-only link" not in page
    assert client.get(f"/scenarios/{run.scenario_id}/edit/").status_code == 404
    assert client.post(f"/scenarios/{run.scenario_id}/run/").status_code == 404
    assert client.post(f"/runs/{run.pk}/share/").status_code == 404


def test_forms_carry_csrf_tokens_and_posts_without_them_are_refused(catalog, owner, run):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)
    assert "csrfmiddlewaretoken" in strict.get("/scenarios/new/").content.decode()
    assert strict.post("/scenarios/new/", form_post()).status_code == 403
    assert strict.post(f"/runs/{run.pk}/share/").status_code == 403


# --------------------------------------------------------------------------- share links


def _create_link(client, run, **data) -> str:
    client.post(f"/runs/{run.pk}/share/", data)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    match = re.search(r'id="share-url" type="text" readonly value="([^"]+)"', page)
    assert match, "the new link is shown once"
    assert "share-url" not in client.get(f"/runs/{run.pk}/").content.decode()
    return match.group(1)


def test_share_link_opens_without_sign_in_read_only_and_stops_when_revoked(
    owner_client, client_factory_anon, run
):
    url = _create_link(owner_client, run)
    path = url.split("testserver", 1)[1]
    token = path.strip("/").split("/")[-1]
    assert len(token) >= 22  # >= 128 bits, URL-safe base64
    # when an anonymous visitor opens it
    response = client_factory_anon.get(path)
    page = response.content.decode()
    # then the results show, without edit controls or owner details
    assert response.status_code == 200 and 'id="results-table"' in page
    for hidden in ["Edit scenario", "Run again", "Create read-only link", "owner", "Sign out"]:
        assert hidden not in page
    assert response["X-Robots-Tag"].startswith("noindex")
    assert client_factory_anon.get(path + "export.csv").status_code == 200
    # when the owner revokes it / then it answers 404
    link = ShareLink.objects.get()
    owner_client.post(f"/share-links/{link.pk}/revoke/")
    assert client_factory_anon.get(path).status_code == 404
    assert client_factory_anon.get(path + "export.csv").status_code == 404


def test_expired_share_link_answers_404(owner_client, client_factory_anon, run):
    future = (timezone.now() + dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    path = _create_link(owner_client, run, expires_at=future).split("testserver", 1)[1]
    assert client_factory_anon.get(path).status_code == 200
    ShareLink.objects.update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert client_factory_anon.get(path).status_code == 404


@pytest.mark.parametrize(
    ("value", "words"), [("2001-01-01T10:00", "must be in the future"), ("soon", "use a date")]
)
def test_share_link_expiry_errors_are_reported(owner_client, run, value, words):
    response = owner_client.post(f"/runs/{run.pk}/share/", {"expires_at": value}, follow=True)
    assert words in response.content.decode()
    assert not ShareLink.objects.exists()


def test_unknown_share_token_answers_404(client, catalog):
    assert client.get("/s/not-a-real-token/").status_code == 404


@pytest.fixture
def client_factory_anon():
    from django.test import Client

    return Client()


# --------------------------------------------------------------------------- charts (pure)


def test_charts_module_imports_no_django():
    source = Path(charts.__file__).read_text()
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert "django" not in imported


def test_breakeven_chart_is_a_step_against_a_line_with_the_crossing_marked():
    params = {
        "tokens_per_month_per_replica": 1e9,
        "usd_per_replica_month": 1000.0,
        "fixed_replicas": 1.0,
        "api_usd_per_mtok": 2.0,
        "crossing_tokens_per_month": 2e9,
        "traffic_tokens_per_month": 3e9,
    }
    # (n + s) K: one serving replica floor, then one more per v_r
    assert charts.selfhost_usd_per_month(0, params) == 2000
    assert charts.selfhost_usd_per_month(1.5e9, params) == 3000
    chart = charts.breakeven(params, "opt")
    names = [t["name"] for t in chart["figure"]["data"]]
    assert "break-even" in names
    api = chart["figure"]["data"][1]
    assert api["y"][1] == pytest.approx(api["x"][1] * 1e9 * 2e-6, rel=1e-3)


def test_memory_breakdown_adds_up_to_the_gpus_memory():
    derivation = {
        "steps": [
            {"name": "usable_gb_per_gpu", "inputs": [{"name": "HBM", "value": 80.0}], "value": 72},
            {
                "name": "kv_budget_gb_per_gpu",
                "inputs": [
                    {"name": "usable", "value": 72.0},
                    {"name": "weights", "value": 40.0},
                    {"name": "workspace", "value": 2.0},
                    {"name": "runtime_overhead", "value": 2.0},
                ],
                "value": 28.0,
            },
        ]
    }
    parts = charts.memory_breakdown_gb(derivation)
    total = sum(parts[k] for k in ("weights_gb", "kv_cache_gb", "activations_gb", "reserved_gb"))
    assert total == pytest.approx(parts["hbm_gb"])


def test_daily_profile_needs_24_values_and_counts_replicas_per_hour():
    assert charts.daily_profile([1.0] * 5, 1.0, 0.5, 1.0, 1, 3, "x") is None
    chart = charts.daily_profile([1.0] * 12 + [4.0] * 12, 1.0, 0.5, 1.0, 1, 9, "x")
    replicas = chart["figure"]["data"][0]["y"]
    assert replicas[0] == 3 and replicas[23] == 9  # ceil(rps / (1 * 0.5)) + 1 spare


def test_owner_of_a_scenario_it_is_shared_with_is_not_a_stranger(catalog, owner):
    # sanity for the fixtures used above
    other = UserFactory(username="third")
    assert other.pk != owner.pk


def test_fleet_life_blocks_round_trip_through_the_form(owner_client, catalog):
    body = form_post(
        cold_start="weights_source = peer\nimage_cached = true",
        ownership="capex_usd_per_node = 300000, pue = 1.3",
    )
    response = owner_client.post("/scenarios/new/", body)
    assert response.status_code == 302, response.content.decode()[:2000]
    scenario = Scenario.objects.get()
    assert scenario.cold_start == {"weights_source": "peer", "image_cached": True}
    assert scenario.ownership == {"capex_usd_per_node": 300000, "pue": 1.3}
    page = owner_client.get(f"/scenarios/{scenario.pk}/edit/")
    assert "weights_source = peer" in page.context["form"].initial["cold_start"]
