"""Shared fixtures."""

import pytest


@pytest.fixture
def catalog(db):
    """The shipped catalog (GPUs, models, reference prices), loaded as `make run` does."""
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
