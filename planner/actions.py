"""Scenario actions beyond edit and run: share with colleagues, clone, archive, delete, and
"run again" on a run. Views stay thin; ``planner.services`` does the writes.

Writes look the scenario up through ``scenarios_owned_by`` (another user's id answers 404);
cloning only needs read access, since the copy belongs to whoever clones it.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST

from planner import services
from planner.views import owned_scenario, visible_run, visible_scenario


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.replace(";", ",").replace("\n", ",").split(",") if n.strip()]


@login_required
@require_POST
def scenario_share(request, pk: int):
    """Add colleagues (``add``: usernames, comma-separated) or stop sharing (``remove``)."""
    scenario = owned_scenario(request, pk)
    current = list(scenario.shared_with.values_list("username", flat=True))
    added = _names(request.POST.get("add", ""))
    removed = set(_names(request.POST.get("remove", "")))
    try:
        users = services.scenario_share_set(
            scenario=scenario, usernames=[u for u in current + added if u not in removed]
        )
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, f"Not shared: {message}.")
    else:
        names = ", ".join(u.username for u in users) or "nobody"
        messages.success(request, f"“{scenario.name}” is now shared (read-only) with {names}.")
    return redirect("planner:scenario-detail", pk=scenario.pk)


@login_required
@require_POST
def scenario_clone(request, pk: int):
    """Copy a scenario you can read into one you own, and open it for editing."""
    source = visible_scenario(request, pk)
    try:
        copy = services.scenario_clone(scenario=source, owner=request.user)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, f"Not cloned: {message}")
        return redirect("planner:scenario-detail", pk=source.pk)
    messages.success(request, f"Cloned “{source.name}” as “{copy.name}”; edit it freely.")
    return redirect("planner:scenario-edit", pk=copy.pk)


@login_required
@require_POST
def scenario_archive(request, pk: int):
    scenario = owned_scenario(request, pk)
    archived = request.POST.get("archived", "1") != "0"
    services.scenario_archive(scenario=scenario, archived=archived)
    if archived:
        messages.success(request, f"“{scenario.name}” is archived: hidden from the list, kept.")
    else:
        messages.success(request, f"“{scenario.name}” is back in the list.")
    return redirect("planner:scenario-detail", pk=scenario.pk)


@login_required
def scenario_delete(request, pk: int):
    """GET: confirm (what goes with it); POST: delete."""
    scenario = owned_scenario(request, pk)
    if request.method == "POST":
        name = scenario.name
        runs = services.scenario_delete(scenario=scenario)
        messages.success(request, f"Deleted “{name}” and its {runs} run{pluralize(runs)}.")
        return redirect("planner:scenario-list")
    context = {"scenario": scenario, "run_count": scenario.runs.count()}
    return render(request, "planner/scenario_delete.html", context)


@login_required
@require_POST
def run_rerun(request, pk: int):
    """Run again exactly what this run used (its inputs snapshot)."""
    run = visible_run(request, pk)
    if run.scenario.owner_id != request.user.pk:
        raise Http404("only the owner can run this scenario")
    try:
        rerun = services.sizing_run_rerun(run=run, background=True)
    except services.WorkersUnavailable as exc:
        messages.warning(request, str(exc))
        rerun = exc.run
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, f"The run did not start: {message}")
        return redirect("planner:run-detail", pk=run.pk)
    messages.success(request, f"Run #{rerun.pk} re-runs the inputs of run #{run.pk}.")
    return redirect("planner:run-detail", pk=rerun.pk)
