"""Fuzz every API operation from its own OpenAPI schema: no 5xx, responses match the schema."""

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from tests.factories import UserFactory, make_scenario

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


@pytest.fixture
def in_transaction():
    """Keep the test's connection open across in-process WSGI calls, as Django's client does."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(scope="module")
def fuzz_scenario(django_db_setup, django_db_blocker):
    """Catalog, scenario and a sized run, committed once for the module's 47 operations
    (building them per operation cost ~0.5 s each). Each fuzz test still runs in its own
    transaction, rolled back after it, so what one operation writes or deletes is gone before
    the next; the tables are flushed afterwards, as a transactional test leaves them."""
    from django.core.management import call_command
    from django.test import override_settings

    from planner.services import sizing_run_start
    from tests.conftest import load_catalog_once

    # sized as the per-test autouse settings would have it (they apply after this fixture)
    quick = override_settings(SIZING_SIMULATE_TAILS=False, SIZING_RUN_IN_BACKGROUND=False)
    with django_db_blocker.unblock(), quick:
        load_catalog_once()
        # a small scenario, so ids exist, lists are non-empty and runs stay cheap to fuzz
        scenario = make_scenario(
            owner=UserFactory(username="fuzz-owner"),
            models=["llama-3.1-8b"],
            gpus=["H100", "L40S"],
            precisions=["fp8"],
        )
        sizing_run_start(scenario=scenario)
    yield scenario.pk
    with django_db_blocker.unblock():
        # as pytest-django's transactional tests do: ids are never reused within the session
        call_command("flush", interactive=False, verbosity=0, reset_sequences=False)


@pytest.fixture
def token(fuzz_scenario, db, in_transaction):
    # a new user per operation (inside the test's transaction), as before: its own throttle
    # budget, and the one that owns the scenario and its run
    from planner.models import Scenario

    user = UserFactory(username="fuzzer", is_staff=True)
    Scenario.objects.filter(pk=fuzz_scenario).update(owner=user)
    return Token.objects.create(user=user).key


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_never_errors_and_matches_its_schema(case, token):
    response = case.call(headers={"Authorization": f"Token {token}"})
    case.validate_response(response, checks=CHECKS)
