"""Scenario actions beyond edit and run: share with colleagues, clone, archive, delete, and
"run again" on a run. Views stay thin; ``planner.services`` does the writes.

Writes look the scenario up through ``scenarios_owned_by`` (another user's id answers 404);
cloning only needs read access, since the copy belongs to whoever clones it.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from planner import services
from planner.views import owned_scenario


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
