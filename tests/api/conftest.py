import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory


@pytest.fixture
def user(db):
    return UserFactory(username="finance")


@pytest.fixture
def api(user):
    """A client authenticated with the user's API token, as finance tooling calls us."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def other_api(db):
    client = APIClient()
    client.force_authenticate(UserFactory(username="intruder"))
    return client
