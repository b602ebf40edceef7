"""Shared fixtures."""

import pytest

from tests.planner.test_celery_worker import broker  # noqa: F401 - shared fixture


@pytest.fixture
def catalog(db):
    """The shipped catalog (GPUs, models, reference prices), loaded as `make run` does."""
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
