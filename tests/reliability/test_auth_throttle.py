"""Every authentication path is throttled per (address, username) with a progressive delay."""

import pytest
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.test import Client
from django.urls import URLPattern, get_resolver

from planner.auth_views import _delay_s
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
RIGHT = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _fresh_counts(settings):
    settings.LOGIN_FAILURES_ALLOWED = 3
    settings.LOGIN_DELAY_SECONDS = 30
    settings.LOGIN_LOCKOUT_SECONDS = 900
    cache.clear()
    yield
    cache.clear()


def _fail(client: Client, path: str, username: str, times: int) -> None:
    for _ in range(times):
        answer = client.post(path, {"username": username, "password": "wrong"})
        assert answer.status_code == 200, answer.status_code


def test_admin_sign_in_locks_after_the_allowance_even_for_the_right_password():
    # given a superuser, and 3 wrong passwords through the admin's sign-in
    UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    _fail(client, "/admin/login/", "root", 3)
    # when the right password comes next, then it is refused with 429 and Retry-After
    answer = client.post("/admin/login/", {"username": "root", "password": RIGHT})
    assert answer.status_code == 429
    assert int(answer["Retry-After"]) == 30
    assert "_auth_user_id" not in client.session


def test_failures_on_one_path_count_on_the_other():
    UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    _fail(client, "/admin/login/", "root", 2)
    _fail(client, "/accounts/login/", "root", 1)
    answer = client.post("/accounts/login/", {"username": "root", "password": RIGHT})
    assert answer.status_code == 429


def test_the_lock_is_per_address_and_username_pair():
    # given alice is locked from one address
    UserFactory(username="alice")
    UserFactory(username="bob")
    office = Client(REMOTE_ADDR="10.0.0.7")
    _fail(office, "/accounts/login/", "alice", 3)
    assert office.post("/accounts/login/", {"username": "alice", "password": RIGHT}).status_code
    # then bob behind the same address still signs in, and alice from her own address too
    answer = Client(REMOTE_ADDR="10.0.0.7").post(
        "/accounts/login/", {"username": "bob", "password": RIGHT}
    )
    assert answer.status_code == 302
    home = Client(REMOTE_ADDR="192.0.2.1")
    answer = home.post("/accounts/login/", {"username": "alice", "password": RIGHT})
    assert answer.status_code == 302


def test_the_delay_doubles_per_failure_up_to_the_lockout():
    # allowance 3, base 30 s, cap 900 s
    assert [_delay_s(n) for n in (1, 2, 3, 4, 5, 6, 7, 8)] == [0, 0, 30, 60, 120, 240, 480, 900]


def test_one_address_spraying_many_usernames_hits_the_address_ceiling(settings):
    settings.LOGIN_FAILURES_PER_ADDRESS = 4
    UserFactory(username="target")
    client = Client(REMOTE_ADDR="198.51.100.9")
    for name in ("u1", "u2", "u3", "u4"):
        _fail(client, "/accounts/login/", name, 1)
    answer = client.post("/accounts/login/", {"username": "target", "password": RIGHT})
    assert answer.status_code == 429


def test_success_resets_the_pair():
    UserFactory(username="carol")
    client = Client()
    _fail(client, "/accounts/login/", "carol", 2)
    assert client.post("/accounts/login/", {"username": "carol", "password": RIGHT}).status_code
    client.logout()
    _fail(client, "/accounts/login/", "carol", 2)  # would be the 4th and 5th without a reset
    answer = client.post("/accounts/login/", {"username": "carol", "password": RIGHT})
    assert answer.status_code == 302


def test_api_token_regeneration_is_rate_limited(settings):
    settings.API_TOKEN_REGENERATIONS_PER_HOUR = 2
    client = Client()
    client.force_login(UserFactory(username="minter"))
    assert [client.post("/accounts/token/").status_code for _ in range(3)] == [302, 302, 429]


def test_no_unthrottled_authentication_view_is_routed():
    """Walk the URL conf: any view that takes credentials must be the throttled wrapper."""
    credential_views = (
        auth_views.LoginView,
        auth_views.PasswordResetView,
        auth_views.PasswordResetConfirmView,
        auth_views.PasswordChangeView,
    )
    found = []

    def walk(resolver, prefix=""):
        for entry in resolver.url_patterns:
            if isinstance(entry, URLPattern):
                callback = entry.callback
                view_class = getattr(callback, "view_class", None)
                name = getattr(callback, "__name__", "")
                takes_credentials = (
                    view_class is not None and issubclass(view_class, credential_views)
                ) or name == "login"
                if takes_credentials:
                    found.append((prefix + str(entry.pattern), callback))
            else:
                walk(entry, prefix + str(entry.pattern))

    walk(get_resolver())
    assert found  # the walk sees the sign-in routes
    served = {}  # the first route matching a path is the one Django serves
    for path, callback in found:
        served.setdefault(path, callback)
    assert {"accounts/login/", "admin/login/"} <= set(served)
    unthrottled = [path for path, cb in served.items() if not getattr(cb, "throttled", False)]
    assert unthrottled == []


@pytest.mark.django_db
def test_password_reset_and_sign_up_posts_are_rate_limited_per_address(client, settings):
    # given an address that posts to the reset and sign-up forms again and again
    settings.ALLOW_SIGNUP = True
    reset = [client.post("/accounts/password_reset/", {"email": "x@example.com"}).status_code]
    reset += [
        client.post("/accounts/password_reset/", {"email": "x@example.com"}).status_code
        for _ in range(10)
    ]
    signups = [
        client.post("/accounts/signup/", {"username": f"u{i}"}).status_code for i in range(11)
    ]
    # then the 11th of each is refused with 429 (the mailer and the account table are spared)
    assert 429 not in reset[:10] and reset[10] == 429
    assert 429 not in signups[:10] and signups[10] == 429
