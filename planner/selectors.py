"""Reads for the planner: price sheets, scenarios, runs and share links.

Catalog look-ups (names -> rows -> core specs) live in ``fleets.selectors`` and are
re-exported here for the planner's callers.
"""

from __future__ import annotations

from django.db import connection

from fleets.selectors import (  # noqa: F401  (re-exported)
    CatalogIndex,
    catalog_index,
    gpu_spec,
    linear_state_elements,
    model_spec,
    models_visible_to,
    resolve_gpu,
    resolve_model,
)
from pricing.models import PriceSheet


def latest_price_sheet() -> PriceSheet | None:
    return PriceSheet.objects.order_by("-effective_date", "-version").first()


# --------------------------------------------------------------------------- scenarios


def scenarios_visible_to(user):
    """Scenarios the user owns or that were shared with them (read-only for the latter)."""
    from django.db.models import Q

    from planner.models import Scenario

    if not user.is_authenticated:
        return Scenario.objects.none()
    return Scenario.objects.filter(Q(owner=user) | Q(shared_with=user)).distinct()


def with_tag(queryset, tag: str):
    """Scenarios carrying ``tag``: JSON containment on PostgreSQL; SQLite has no JSON
    ``contains`` lookup, so there the ids are collected from a scan of the tags."""
    if connection.vendor == "postgresql":
        return queryset.filter(tags__contains=[tag])
    ids = [pk for pk, tags in queryset.values_list("pk", "tags") if tag in (tags or [])]
    return queryset.filter(pk__in=ids)


def scenarios_owned_by(user):
    from planner.models import Scenario

    return Scenario.objects.filter(owner=user) if user.is_authenticated else Scenario.objects.none()


def runs_visible_to(user):
    from planner.models import SizingRun

    return SizingRun.objects.filter(scenario__in=scenarios_visible_to(user))


def latest_run(scenario):
    return scenario.runs.order_by("-created_at").first()


def share_link_for_token(token: str):
    """The live (not revoked, not expired) link for a raw token, or None."""
    from django.utils import timezone

    from planner.models import ShareLink, hash_share_token

    link = (
        ShareLink.objects.select_related("scenario", "run")
        .filter(token_sha256=hash_share_token(token), revoked_at__isnull=True)
        .first()
    )
    if link is None or (link.expires_at and link.expires_at <= timezone.now()):
        return None
    return link
