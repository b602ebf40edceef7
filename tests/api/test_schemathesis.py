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


@pytest.fixture
def token(catalog, in_transaction):
    user = UserFactory(username="fuzzer", is_staff=True)
    # a small scenario, so ids exist, lists are non-empty and runs stay cheap to fuzz
    scenario = make_scenario(
        owner=user, models=["llama-3.1-8b"], gpus=["H100", "L40S"], precisions=["fp8"]
    )
    from planner.services import sizing_run_start

    sizing_run_start(scenario=scenario)
    return Token.objects.create(user=user).key


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_never_errors_and_matches_its_schema(case, token):
    response = case.call(headers={"Authorization": f"Token {token}"})
    case.validate_response(response, checks=CHECKS)
