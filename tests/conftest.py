"""Shared fixtures."""

import pytest

from tests.planner.test_celery_worker import broker  # noqa: F401 - shared fixture

#: What ``load_catalog`` writes, parents before children (bulk_create keeps the primary keys).
CATALOG_TABLES = (
    "fleets.GpuSku",
    "fleets.ModelArchitecture",
    "pricing.PriceSheet",
    "pricing.GpuHourPrice",
    "pricing.ApiTokenPrice",
    "fleets.CalibrationProfile",
)
_loaded_catalog: list[tuple[type, list]] = []


@pytest.fixture
def catalog(db):
    """The shipped catalog (GPUs, models, reference prices, calibration profiles), loaded as
    `make run` does. ``load_catalog`` runs once per test process; later tests get the very
    rows it wrote (same primary keys and values) by bulk insert, which is ~20x faster: most
    tests need a catalog, and loading it took a quarter of the suite."""
    load_catalog_once()


def load_catalog_once() -> None:
    """What the ``catalog`` fixture does, for a module-scoped fixture that commits it."""
    from django.apps import apps
    from django.core.management import call_command

    tables = [apps.get_model(label) for label in CATALOG_TABLES]
    if _loaded_catalog and not any(m.objects.exists() for m in tables):
        for model, rows in _loaded_catalog:
            model.objects.bulk_create(rows)
        return
    before = {m: set(m.objects.values_list("pk", flat=True)) for m in tables}
    call_command("load_catalog", verbosity=0)
    if not _loaded_catalog and not any(before.values()):
        _loaded_catalog.extend((m, list(m.objects.order_by("pk"))) for m in tables)


@pytest.fixture(autouse=True)
def _mean_value_runs_unless_asked(request, settings):
    """Runs size on the mean-value chain in tests (fast); tests marked ``tails`` simulate the
    leading candidates as production does."""
    settings.SIZING_SIMULATE_TAILS = request.node.get_closest_marker("tails") is not None


@pytest.fixture(autouse=True)
def _runs_in_the_request_unless_asked(request, settings):
    """Browser-started runs size inside the request in tests (a test's transaction never
    commits, so a thread started on commit would never start); tests marked ``background``
    get the embedded default, a thread."""
    settings.SIZING_RUN_IN_BACKGROUND = request.node.get_closest_marker("background") is not None
