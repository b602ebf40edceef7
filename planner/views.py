"""Server-rendered pages. Views stay small: selectors read, services write, charts draw.

Every object route looks its object up through ``scenarios_visible_to`` / ``runs_visible_to``
(or ``scenarios_owned_by`` for writes), so another user's id answers 404, never 403.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Q, Subquery
from django.http import Http404, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST, require_safe
from rest_framework.authtoken.models import Token

from fleets.models import GpuSku
from planner import charts, exports, pipeline, selectors, services
from planner import compare as compare_numbers
from planner.auth_views import rate_limited
from planner.dates import parse_moment
from planner.forms import (
    ScenarioForm,
    initial_from_scenario,
    preset_initial,
    presets,
)
from planner.models import CandidateResult, Scenario, ShareLink, SizingRun
from planner.prices import price_rows, result_price_source
from planner.verdicts import run_verdict
from pricing.quotes import label as quote_label

MAX_TABLE_ROWS = 500


def home(request):
    context = {
        "gpus": GpuSku.objects.all(),
        "models": selectors.models_visible_to(request.user),
        "sheet": selectors.latest_price_sheet(),
    }
    return render(request, "planner/home.html", context)


# --------------------------------------------------------------------------- account


@login_required
@rate_limited("api-token", "API_TOKEN_REGENERATIONS_PER_HOUR")
def api_token(request):
    """Show the user's REST API token; POST regenerates it (the old one stops working)."""
    token = Token.objects.filter(user=request.user).first()
    if request.method == "POST":
        if token is not None:
            token.delete()
        token = Token.objects.create(user=request.user)
        messages.success(request, "A new API token was created; the previous one no longer works.")
        return redirect("planner:api-token")
    return render(request, "accounts/token.html", {"token": token})


# --------------------------------------------------------------------------- helpers


def visible_scenario(request, pk: int) -> Scenario:
    return get_object_or_404(selectors.scenarios_visible_to(request.user), pk=pk)


def owned_scenario(request, pk: int) -> Scenario:
    return get_object_or_404(selectors.scenarios_owned_by(request.user), pk=pk)


def visible_run(request, pk: int) -> SizingRun:
    return get_object_or_404(
        selectors.runs_visible_to(request.user).select_related("scenario", "scenario__owner"),
        pk=pk,
    )


# --------------------------------------------------------------------------- scenarios


@login_required
def scenario_list(request):
    query = request.GET.get("q", "").strip()
    tag = request.GET.get("tag", "").strip()
    archived = request.GET.get("archived") == "1"
    visible = selectors.scenarios_visible_to(request.user).filter(archived_at__isnull=not archived)
    latest = SizingRun.objects.filter(scenario=OuterRef("pk")).order_by("-created_at")
    scenarios = visible.select_related("owner").annotate(
        latest_run_id=Subquery(latest.values("pk")[:1])
    )
    if query:
        scenarios = scenarios.filter(Q(name__icontains=query) | Q(description__icontains=query))
    if tag:
        scenarios = selectors.with_tag(scenarios, tag)
    scenarios = list(scenarios.order_by("-updated_at", "-pk")[:200])
    runs = SizingRun.objects.only("status", "progress", "summary", "created_at").in_bulk(
        [s.latest_run_id for s in scenarios if s.latest_run_id]
    )
    for scenario in scenarios:
        scenario.latest_run = runs.get(scenario.latest_run_id)
        best = (
            compare_numbers.best_option(scenario.latest_run.summary)
            if scenario.latest_run
            else None
        )
        scenario.best_usd_per_month = best.get("usd_per_month") if best else None
    all_tags = sorted({t for tags in visible.values_list("tags", flat=True) for t in tags or []})
    context = {
        "scenarios": scenarios,
        "query": query,
        "tag": tag,
        "all_tags": all_tags,
        "archived": archived,
    }
    return render(request, "planner/scenario_list.html", context)


def _start_run(request, scenario: Scenario):
    """Start a run and go to its page (which polls); explain when it cannot start."""
    try:
        run = services.sizing_run_start(scenario=scenario, background=True)
    except services.WorkersUnavailable as exc:
        messages.warning(request, str(exc))
        run = selectors.latest_run(scenario)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, f"The run did not start: {message}")
        return redirect("planner:scenario-detail", pk=scenario.pk)
    return redirect("planner:run-detail", pk=run.pk)


def _form_page(request, form, scenario=None, preset=""):
    context = {
        "form": form,
        "scenario": scenario,
        "presets": [(slug, doc.get("name", slug)) for slug, doc in presets().items()],
        "preset": preset,
    }
    status = 400 if request.method == "POST" else 200
    return render(request, "planner/scenario_form.html", context, status=status)


@login_required
def scenario_create(request):
    preset = request.GET.get("preset", "")
    initial = preset_initial(preset) if preset else None
    if preset and initial is None:
        messages.error(request, f"Unknown preset {preset!r}.")
    form = ScenarioForm(request.POST or None, initial=initial, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            scenario = services.scenario_create(owner=request.user, data=form.service_data())
        except ValidationError as exc:
            form.apply_service_errors(exc)
        else:
            messages.success(request, f"Scenario “{scenario.name}” saved.")
            if request.POST.get("action") == "run":
                return _start_run(request, scenario)
            return redirect("planner:scenario-detail", pk=scenario.pk)
    return _form_page(request, form, preset=preset)


@login_required
def scenario_edit(request, pk: int):
    scenario = owned_scenario(request, pk)
    form = ScenarioForm(
        request.POST or None, initial=initial_from_scenario(scenario), user=request.user
    )
    if request.method == "POST" and form.is_valid():
        try:
            data = form.service_data(keep=scenario.serving)
            services.scenario_update(scenario=scenario, data=data)
        except ValidationError as exc:
            form.apply_service_errors(exc)
        else:
            messages.success(request, f"Scenario “{scenario.name}” updated.")
            if request.POST.get("action") == "run":
                return _start_run(request, scenario)
            return redirect("planner:scenario-detail", pk=scenario.pk)
    return _form_page(request, form, scenario=scenario)


@login_required
def scenario_detail(request, pk: int):
    scenario = visible_scenario(request, pk)
    runs = list(scenario.runs.only("status", "progress", "created_at", "summary")[:30])
    for run in runs:
        best = compare_numbers.best_option(run.summary)
        run.best_usd_per_month = best.get("usd_per_month") if best else None
    context = {
        "scenario": scenario,
        "is_owner": scenario.owner_id == request.user.pk,
        "runs": runs,
        "inputs": scenario_inputs(scenario),
    }
    return render(request, "planner/scenario_detail.html", context)


@login_required
@require_POST
def scenario_run(request, pk: int):
    return _start_run(request, owned_scenario(request, pk))


# --------------------------------------------------------------------------- runs


@login_required
def run_detail(request, pk: int):
    run = visible_run(request, pk)
    is_owner = run.scenario.owner_id == request.user.pk
    context = {
        "run": run,
        "scenario": run.scenario,
        "is_owner": is_owner,
        "read_only": False,
        **run_body_context(run, request.GET.get("chain")),
    }
    if is_owner:
        context["share_links"] = ShareLink.objects.filter(
            scenario=run.scenario, revoked_at__isnull=True
        ).select_related("run")
        context["new_share_url"] = request.session.pop("new_share_url", None)
        context["min_expiry"] = (timezone.now() + dt.timedelta(minutes=5)).strftime(
            "%Y-%m-%dT%H:%M"
        )
    return render(request, "planner/run_detail.html", context)


@login_required
def run_progress(request, pk: int):
    """The polled partial: the progress bar while running, the results once finished."""
    run = visible_run(request, pk)
    if not request.htmx:
        return redirect("planner:run-detail", pk=run.pk)
    context = {"run": run, "read_only": False, "oob_exports": True, **run_body_context(run, None)}
    return render(request, "planner/_run_body.html", context)


def _unfinished(run: SizingRun) -> HttpResponse | None:
    """409 with the reason when the run has no finished results to export."""
    reason = exports.unfinished_reason(run)
    if reason is None:
        return None
    return HttpResponse(reason, status=409, content_type="text/plain; charset=utf-8")


def _csv_response(run: SizingRun) -> HttpResponseBase:
    if refused := _unfinished(run):
        return refused
    return exports.csv_response(run)


def _xlsx_response(run: SizingRun) -> HttpResponseBase:
    if refused := _unfinished(run):
        return refused
    return exports.xlsx_response(run)


@login_required
def run_export_csv(request, pk: int):
    return _csv_response(visible_run(request, pk))


@login_required
def run_export_xlsx(request, pk: int):
    return _xlsx_response(visible_run(request, pk))


@login_required
def run_deploy(request, pk: int):
    """The recommendation's Kubernetes YAML (planner.deploy), as the API serves it."""
    from planner import deploy

    run = visible_run(request, pk)
    if refused := _unfinished(run):
        return refused
    try:
        text = deploy.deploy_yaml(
            run, request.GET.get("gpu", ""), request.GET.get("autoscaler", "")
        )
    except deploy.DeployError as exc:
        return HttpResponse(f"{exc.field}: {exc}", status=400, content_type="text/plain")
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    name = f"run-{run.pk}-{request.GET.get('gpu')}.yaml"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# --------------------------------------------------------------------------- share links


def parse_expiry(value: str) -> dt.datetime | None:
    """'' -> None; an ISO date (end of that day, UTC) or date-time (UTC when naive)."""
    value = (value or "").strip()
    if not value:
        return None
    moment = parse_moment(value, end_of_day=True)
    if moment is None:
        raise ValidationError({"expires_at": ["use a date (YYYY-MM-DD) or a date and time"]})
    return moment


@login_required
@require_POST
def share_create(request, pk: int):
    run = get_object_or_404(
        SizingRun.objects.filter(scenario__in=selectors.scenarios_owned_by(request.user)), pk=pk
    )
    try:
        link, token = services.share_link_create(
            user=request.user,
            scenario=run.scenario,
            run=run,
            expires_at=parse_expiry(request.POST.get("expires_at", "")),
        )
    except ValidationError as exc:
        for messages_ in exc.message_dict.values():
            for message in messages_:
                messages.error(request, f"The link was not created: expiry {message}")
    else:
        url = request.build_absolute_uri(reverse("planner:shared", args=[token]))
        request.session["new_share_url"] = url
        messages.success(request, "Read-only link created. Copy it now: it is shown only once.")
    return redirect(reverse("planner:run-detail", args=[run.pk]) + "#share")


@login_required
@require_POST
def share_revoke(request, link_id):
    link = get_object_or_404(
        ShareLink.objects.filter(scenario__in=selectors.scenarios_owned_by(request.user)),
        pk=link_id,
    )
    services.share_link_revoke(link=link)
    messages.success(request, "The link is revoked; it now answers 404.")
    run = link.run or selectors.latest_run(link.scenario)
    if run is None:
        return redirect("planner:scenario-detail", pk=link.scenario_id)
    return redirect(reverse("planner:run-detail", args=[run.pk]) + "#share")


def _shared_run(token: str) -> tuple[ShareLink, SizingRun]:
    link = selectors.share_link_for_token(token)
    run = (link.run or selectors.latest_run(link.scenario)) if link else None
    if run is None:
        raise Http404("This link is not valid: it was revoked, it expired or it never existed.")
    return link, run


def _private(response: HttpResponseBase) -> HttpResponseBase:
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    response["X-Robots-Tag"] = "noindex, nofollow"
    return response


@require_safe  # a share link is read-only: no method that could write
def shared_view(request, token: str):
    """Read-only results behind a share link: no sign-in, no edit controls, no owner."""
    link, run = _shared_run(token)
    context = {
        "run": run,
        "scenario": run.scenario,
        "read_only": True,
        "link": link,
        "token": token,
        **run_body_context(run, request.GET.get("chain")),
    }
    return _private(render(request, "planner/shared.html", context))


@require_safe
def shared_export(request, token: str, fmt: str):
    _, run = _shared_run(token)
    return _private(_csv_response(run) if fmt == "csv" else _xlsx_response(run))


# --------------------------------------------------------------------------- compare


def _fmt(value) -> str:
    from planner.templatetags.headroom import num

    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "—"
    if value is None or value == "":
        return "—"
    return num(value) if isinstance(value, int | float) else str(value)


def scenario_inputs(scenario: Scenario) -> list[tuple[str, str]]:
    """The scenario's current inputs as (label with unit, text) rows."""
    api = ""
    if scenario.api_input_usd_per_mtok is not None:
        api = (
            f"${scenario.api_input_usd_per_mtok:g} in / "
            f"${scenario.api_output_usd_per_mtok or 0:g} out per M tokens"
        )
    hourly = f"{len(scenario.hourly_rps)} hourly values" if scenario.hourly_rps else ""
    return [
        ("Peak rate (requests/s)", _fmt(scenario.peak_rps)),
        ("Mean rate (requests/s)", _fmt(scenario.mean_rps)),
        ("24-hour profile", hourly or "—"),
        (
            "Prompt mean / p95 (tokens)",
            f"{_fmt(scenario.prompt_tokens_mean)} / {_fmt(scenario.prompt_tokens_p95)}",
        ),
        (
            "Output mean / p95 (tokens)",
            f"{_fmt(scenario.output_tokens_mean)} / {_fmt(scenario.output_tokens_p95)}",
        ),
        (
            "Shared prefix (tokens) × hit rate",
            f"{_fmt(scenario.shared_prefix_tokens)} × {_fmt(scenario.prefix_hit_rate)}",
        ),
        (
            "Images per request × tokens per image",
            f"{_fmt(scenario.images_per_request)} × "
            f"{_fmt(scenario.tokens_per_image) if scenario.tokens_per_image else 'from config'}",
        ),
        ("TTFT limit (ms)", _fmt(scenario.ttft_ms)),
        ("TPOT limit (ms)", _fmt(scenario.tpot_ms)),
        ("SLO percentile", _fmt(scenario.slo_percentile)),
        ("Models", _fmt(sorted(scenario.candidate_models.values_list("name", flat=True)))),
        ("GPU SKUs", _fmt(sorted(scenario.candidate_gpus.values_list("name", flat=True)))),
        ("Precisions", _fmt(scenario.precisions)),
        ("TP degrees", _fmt(scenario.tp_options) if scenario.tp_options else "every valid"),
        ("Engine", scenario.get_engine_display()),
        ("Engine settings", _settings_text(scenario.engine_settings) or "engine defaults"),
        ("Serving techniques", _settings_text(scenario.serving) or "none"),
        ("Pricing tier", scenario.get_tier_display()),
        ("Price sheet", str(scenario.price_sheet) if scenario.price_sheet else "in force at run"),
        (
            "API alternative",
            " ".join(filter(None, [scenario.api_provider, scenario.api_model, api])) or "—",
        ),
        ("Target utilization", _fmt(scenario.target_utilization)),
        ("Spare replicas (N+k)", _fmt(scenario.spare_replicas)),
        ("Burst factor (× peak)", _fmt(scenario.burst_factor)),
        ("Warm-pool replicas", _fmt(scenario.warm_pool_replicas)),
        ("Spare nodes (N+k by failure domain)", _fmt(scenario.spare_nodes)),
    ]


def run_inputs(run: SizingRun) -> list[tuple[str, str]]:
    """What a run actually used (its frozen snapshot) as (label with unit, text) rows."""
    inputs = run.inputs or {}
    traffic, slo, policy = (
        inputs.get("traffic", {}),
        inputs.get("slo", {}),
        inputs.get("policy", {}),
    )
    api = inputs.get("api_price") or {}
    sheet = inputs.get("price_sheet") or {}
    candidates = inputs.get("candidates", [])
    models = sorted(
        {
            (inputs.get("models", {}).get(c["model"]) or {}).get("name", c["model"])
            for c in candidates
        }
    )
    api_text = "—"
    if api:
        api_text = (
            f"{api.get('label', '')} ${api.get('input_usd_per_mtok', 0):g} in / "
            f"${api.get('output_usd_per_mtok', 0):g} out per M tokens"
        )
    elif inputs.get("api_prices_by_model"):
        api_text = "each model's own API price on the price sheet (see the grid per model)"
    return [
        ("Peak rate (requests/s)", _fmt(traffic.get("peak_rps"))),
        ("Mean rate (requests/s)", _fmt(traffic.get("mean_rps"))),
        (
            "24-hour profile",
            f"{len(traffic['hourly_rps'])} hourly values" if traffic.get("hourly_rps") else "—",
        ),
        (
            "Prompt mean / p95 (tokens)",
            f"{_fmt(traffic.get('prompt_tokens_mean'))} / {_fmt(traffic.get('prompt_tokens_p95'))}",
        ),
        (
            "Output mean / p95 (tokens)",
            f"{_fmt(traffic.get('output_tokens_mean'))} / {_fmt(traffic.get('output_tokens_p95'))}",
        ),
        (
            "Shared prefix (tokens) × hit rate",
            f"{_fmt(traffic.get('shared_prefix_tokens'))} × {_fmt(traffic.get('prefix_hit_rate'))}",
        ),
        ("TTFT limit (ms)", _fmt(slo.get("ttft_ms"))),
        ("TPOT limit (ms)", _fmt(slo.get("tpot_ms"))),
        ("SLO percentile", _fmt(slo.get("percentile"))),
        ("Models", _fmt(models)),
        ("GPU SKUs", _fmt(sorted(inputs.get("gpu_names", {}).values()))),
        ("Precisions", _fmt(sorted({c["precision"] for c in candidates}))),
        ("TP degrees", _fmt(sorted({c["tp"] for c in candidates}))),
        ("Engine", (inputs.get("engine") or {}).get("engine", "—")),
        ("Engine settings", _engine_text(inputs.get("engine") or {})),
        ("Pricing tier", inputs.get("tier", "—")),
        ("Price sheet", f"{sheet.get('name', '')} v{sheet.get('version', '')}" if sheet else "—"),
        ("API alternative", api_text),
        ("Target utilization", _fmt(policy.get("target_utilization"))),
        ("Spare replicas (N+k)", _fmt(policy.get("spare_replicas"))),
        ("Burst factor (× peak)", _fmt(policy.get("burst_factor"))),
        ("Warm-pool replicas", _fmt(policy.get("warm_pool_replicas"))),
        ("Spare nodes (N+k by failure domain)", _fmt(policy.get("spare_nodes", 0))),
    ]


def run_outcome(run: SizingRun | None) -> list[tuple[str, str]]:
    from planner.templatetags.headroom import usd

    if run is None:
        return [("Run", "never run")]
    summary = run.summary or {}
    best = compare_numbers.best_option(summary)
    rows = [
        ("Run", f"#{run.pk} · {run.status} · {run.created_at:%Y-%m-%d %H:%M}"),
        (
            "Candidates (meeting SLOs)",
            f"{summary.get('candidates', run.candidate_count)} ({summary.get('meeting_slo', '—')})",
        ),
        (
            "Best option",
            f"{best['model']} on {best['gpu_name']}, {best['precision']}, TP {best['tp']}"
            if best
            else "none meets the SLOs",
        ),
        ("Best: GPUs (replicas)", f"{best['gpus']} ({best['replicas']})" if best else "—"),
        ("Best: $/month", usd(best.get("usd_per_month")) if best else "—"),
        ("Best: $/M output tokens", usd(best.get("usd_per_mtok")) if best else "—"),
    ]
    for entry in summary.get("per_gpu", []):
        if entry.get("recommended"):
            text = (
                f"{usd(entry.get('usd_per_month'))}/month · {entry['model']} "
                f"{entry['precision']} TP {entry['tp']} × {entry['replicas']}"
            )
        else:
            text = f"none: {entry.get('why_none', '')}"
        rows.append((f"{entry['gpu_name']} ($/month, option)", text))
    return rows


@login_required
def compare(request):
    """Two or more scenarios (their latest runs) or runs side by side; differences marked."""
    scenario_ids = [v for v in request.GET.getlist("scenario") if v.isdigit()]
    run_ids = [v for v in request.GET.getlist("run") if v.isdigit()]
    columns = []
    for pk in scenario_ids:
        scenario = visible_scenario(request, int(pk))
        run = selectors.latest_run(scenario)
        columns.append(
            {
                "title": scenario.name,
                "scenario": scenario,
                "run": run,
                "inputs": run_inputs(run) if run else scenario_inputs(scenario),
            }
        )
    for pk in run_ids:
        run = visible_run(request, int(pk))
        columns.append(
            {
                "title": f"{run.scenario.name} · run #{run.pk}",
                "scenario": run.scenario,
                "run": run,
                "inputs": run_inputs(run),
            }
        )
    if len(columns) < 2:
        messages.error(request, "Pick two or more scenarios (or two runs) to compare.")
        return redirect("planner:scenario-list")
    for column in columns:
        column["outcome"] = run_outcome(column["run"])
    sections = []
    for title, key in (("Inputs", "inputs"), ("Outcome", "outcome")):
        labels = list(dict.fromkeys(label for c in columns for label, _ in c[key]))
        rows = []
        for label in labels:
            values = [dict(c[key]).get(label, "—") for c in columns]
            differs = len(set(values)) > 1 and not label.startswith("Run")
            rows.append({"label": label, "values": values, "differs": differs})
        sections.append({"title": title, "rows": rows})
    deltas = compare_numbers.delta_rows([compare_numbers.run_metrics(c["run"]) for c in columns])
    context = {"columns": columns, "sections": sections, "deltas": deltas}
    return render(request, "planner/compare.html", context)


# --------------------------------------------------------------------------- results


def chain_sections(derivation: dict) -> list[dict]:
    """The derivation's steps grouped by the chain stage that emitted them, in order."""
    sections: dict[str, list] = {}
    for step in derivation.get("steps") or []:
        sections.setdefault(step.get("stage") or "Other", []).append(step)
    return [{"title": title, "steps": steps} for title, steps in sections.items()]


def _with_fleet_life(result: CandidateResult, per_gpu: list[dict]) -> dict:
    """A recommendation's derivation with its cold start, autoscaling and buy-vs-rent steps
    (computed for the summary by planner.lifecycle) after the chain's own."""
    entry = next((e for e in per_gpu if e.get("recommended") == result.candidate_key), None)
    steps = (entry or {}).get("lifecycle_steps") or []
    if not steps:
        return result.derivation
    derivation = result.derivation or {}
    return derivation | {"steps": [*(derivation.get("steps") or []), *steps]}


def _option_label(result: CandidateResult) -> str:
    return f"{result.model_name} · {result.gpu_name} {result.precision} TP{result.tp}"


def run_body_context(run: SizingRun, chain_param) -> dict:
    """Everything the results partial shows; empty while the run is not finished."""
    if run.status != SizingRun.Status.SUCCEEDED:
        return {}
    inputs = run.inputs or {}
    summary = run.summary or {}
    slo = inputs.get("slo", {})
    percentile = slo.get("percentile", 95)
    rows = list(run.results.defer("derivation").order_by("rank", "candidate_key")[:MAX_TABLE_ROWS])
    estimated = False
    for row in rows:  # ttft_ms / tpot_ms are at the SLO percentile (latency_statistic)
        row.price_label = quote_label(
            result_price_source(inputs, row) if row.usd_per_hour else None
        )
        row.ttft_at_pct, row.tpot_at_pct = row.ttft_ms, row.tpot_ms
        estimated = estimated or row.latency_source != "simulated"
    recommended = list(run.results.filter(recommended=True).order_by("rank"))
    by_key = {r.candidate_key: r for r in recommended}
    best = by_key.get(summary.get("best"))

    chain_result = None
    if chain_param and str(chain_param).isdigit():
        chain_result = run.results.filter(pk=int(chain_param)).first()
    if chain_result is None:
        chain_result = best or run.results.order_by("rank").first()

    per_gpu = []
    for entry in summary.get("per_gpu", []):
        result = by_key.get(entry.get("recommended"))
        per_gpu.append(
            {
                **entry,
                "result_id": result.pk if result else None,
                "is_best": bool(best and result and result.pk == best.pk),
            }
        )
    per_gpu.sort(key=lambda e: (e["result_id"] is None, e.get("usd_per_month") or 0))

    charts_ = [
        charts.cost_by_sku(
            [
                {
                    "gpu_name": e["gpu_name"],
                    "label": f"{e.get('model')} {e.get('precision')} TP{e.get('tp')}",
                    "usd_per_mtok": e.get("usd_per_mtok"),
                    "usd_per_month": e.get("usd_per_month"),
                }
                for e in per_gpu
                if e.get("recommended")
            ]
        ),
        charts.throughput_latency(
            [
                {
                    "gpu_name": r.gpu_name,
                    "label": _option_label(r),
                    "tok_s_per_gpu": (r.throughput_tok_s or 0) / max(r.gpus_per_replica, 1),
                    "tpot_ms": r.tpot_at_pct,
                    "meets_slo": r.meets_slo,
                }
                for r in rows
                if r.fits
            ],
            slo.get("tpot_ms", 0),
            percentile,
        ),
    ]
    memory_rows = []
    for result in recommended:
        breakdown = charts.memory_breakdown_gb(result.derivation)
        if breakdown:
            label = f"{result.gpu_name}<br>{result.precision} TP{result.tp}"
            memory_rows.append({"label": label, "option": _option_label(result), **breakdown})
    if memory_rows:
        charts_.append(charts.memory_breakdown(memory_rows))
    notes = []
    if chain_result is not None and chain_result.fits:
        params = charts.breakeven_inputs(chain_result.derivation)
        if params:
            charts_.append(charts.breakeven(params, _option_label(chain_result)))
        else:
            notes.append("No API alternative (or no GPU price): the break-even chart is omitted.")
        hourly = (inputs.get("traffic") or {}).get("hourly_rps") or []
        policy = inputs.get("policy") or {}
        daily = charts.daily_profile(
            hourly,
            chain_result.derivation.get("requests_per_s_per_replica") or 0,
            policy.get("target_utilization", 0.7),
            policy.get("burst_factor", 1.0),
            pipeline.fixed_replicas(inputs, {"derivation": chain_result.derivation}),
            chain_result.replicas,
            _option_label(chain_result),
        )
        if daily:
            charts_.append(daily)
        elif not hourly:
            notes.append("No 24-hour profile given: the replicas-over-the-day chart is omitted.")
    life = next(
        (
            e
            for e in per_gpu
            if chain_result is not None and e.get("recommended") == chain_result.candidate_key
        ),
        next((e for e in per_gpu if e.get("is_best")), None),
    )
    if life and life.get("day"):
        label = (
            f"{life.get('model')} {life.get('precision')} TP{life.get('tp')} on {life['gpu_name']}"
        )
        day_chart = charts.fleet_day(life["day"], label)
        tco_chart = charts.own_rent_api((life.get("tco") or {}).get("curve"), label)
        charts_ += [c for c in (day_chart, tco_chart) if c]
    for chart in charts_:
        chart["data_id"] = f"{chart['id']}-data"
    return {
        "summary": summary,
        "per_gpu": per_gpu,
        "rows": rows,
        "truncated": run.candidate_count > len(rows),
        "estimated_latency": estimated,
        "percentile": percentile,
        "slo": slo,
        "best": best,
        "chain_result": chain_result,
        "open_chain": bool(chain_param),
        "chain": chain_sections(_with_fleet_life(chain_result, per_gpu)) if chain_result else [],
        "charts": charts_,
        "chart_notes": notes,
        "price_rows": price_rows(inputs),
        "verdict": run_verdict(run),
    }


def _settings_text(block) -> str:
    """A scenario's engine or serving block as ``name value`` pairs (nested blocks inline)."""
    if not isinstance(block, dict):
        return ""
    parts = []
    for key, value in block.items():
        shown = f"({_settings_text(value)})" if isinstance(value, dict) else _fmt(value)
        parts.append(f"{key} {shown}")
    return ", ".join(parts)


def _engine_text(engine: dict) -> str:
    """The four engine settings a run used (0 max_model_len: the model's maximum)."""
    names = ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "max_model_len")
    if not any(name in engine for name in names):
        return "—"
    return ", ".join(f"{name} {_fmt(engine.get(name))}" for name in names)
