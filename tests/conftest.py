"""Shared fixtures."""

import pytest

from tests.planner.test_celery_worker import broker  # noqa: F401 - shared fixture


@pytest.fixture
def catalog(db):
    """The shipped catalog (GPUs, models, reference prices), loaded as `make run` does."""
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)


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
