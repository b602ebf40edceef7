"""Getting in: sign-up (on under DEBUG, off in production unless ALLOW_SIGNUP), password reset
by e-mail, and sharing a scenario with named colleagues from its page."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from tests.factories import UserFactory, make_scenario

PASSWORD = "a long enough passphrase 42"


def signup_body(**overrides):
    body = {
        "username": "newcomer",
        "email": "newcomer@example.com",
        "password1": PASSWORD,
        "password2": PASSWORD,
    }
    return body | overrides


@pytest.mark.django_db
def test_signup_creates_the_account_and_signs_in(client, settings):
    # given sign-up on (as under make run)
    settings.ALLOW_SIGNUP = True
    # when a newcomer signs up
    response = client.post("/accounts/signup/", signup_body())
    # then they are signed in and land on their scenarios
    assert response.status_code == 302 and response["Location"] == "/scenarios/"
    user = get_user_model().objects.get(username="newcomer")
    assert user.email == "newcomer@example.com" and user.check_password(PASSWORD)
    assert client.get("/scenarios/").status_code == 200


@pytest.mark.django_db
def test_signup_is_404_when_off_and_the_login_page_does_not_offer_it(client, settings):
    settings.ALLOW_SIGNUP = False
    assert client.get("/accounts/signup/").status_code == 404
    assert client.post("/accounts/signup/", signup_body()).status_code == 404
    assert not get_user_model().objects.exists()
    assert b"/accounts/signup/" not in client.get("/accounts/login/").content
    settings.ALLOW_SIGNUP = True
    assert b"/accounts/signup/" in client.get("/accounts/login/").content


def test_allow_signup_follows_debug_unless_set(monkeypatch):
    import importlib

    import config.settings as module

    try:
        for debug, env, expected in [
            ("true", None, True),
            ("false", None, False),
            ("false", "true", True),
            ("true", "false", False),
        ]:
            monkeypatch.setenv("DEBUG", debug)
            monkeypatch.setenv("SECRET_KEY", "x" * 50)
            if env is None:
                monkeypatch.delenv("ALLOW_SIGNUP", raising=False)
            else:
                monkeypatch.setenv("ALLOW_SIGNUP", env)
            assert importlib.reload(module).ALLOW_SIGNUP is expected, (debug, env)
        monkeypatch.delenv("EMAIL_HOST", raising=False)
        mailer = importlib.reload(module).MAILERS["default"]
        assert mailer["BACKEND"] == "django.core.mail.backends.console.EmailBackend"
        monkeypatch.setenv("EMAIL_HOST", "smtp.example.com")
        monkeypatch.setenv("EMAIL_HOST_USER", "mailer")
        mailer = importlib.reload(module).MAILERS["default"]
        assert mailer["BACKEND"] == "django.core.mail.backends.smtp.EmailBackend"
        assert mailer["OPTIONS"] | {"password": ""} == {
            "host": "smtp.example.com",
            "port": 587,
            "username": "mailer",
            "password": "",
            "use_ssl": False,
            "use_tls": True,
            "timeout": 10,
        }
    finally:
        monkeypatch.undo()
        importlib.reload(module)


@pytest.mark.django_db
def test_signup_errors_are_400_with_a_linked_summary(client, settings):
    settings.ALLOW_SIGNUP = True
    UserFactory(username="taken", email="taken@example.com")
    response = client.post(
        "/accounts/signup/", signup_body(username="taken", email="TAKEN@example.com")
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="error-summary"' in html
    assert 'href="#id_username"' in html and 'href="#id_email"' in html
    assert re.search(r'<input[^>]*aria-describedby="[^"]*id_email_errors', html)
    assert 'id="id_email_errors"' in html
    assert get_user_model().objects.count() == 1


@pytest.mark.django_db
def test_password_reset_mails_a_link_that_sets_a_new_password(client):
    # given a user with an e-mail address
    user = UserFactory(username="forgetful", email="forgetful@example.com")
    # when they ask for a reset
    response = client.post("/accounts/password_reset/", {"email": "forgetful@example.com"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/password_reset/done/"
    # then one e-mail carries a working link
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["forgetful@example.com"]
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", mail.outbox[0].body).group(1)
    form_page = client.get(link, follow=True)
    assert form_page.status_code == 200 and form_page.context["validlink"]
    new = "another long passphrase 7"
    done = client.post(
        form_page.redirect_chain[-1][0],
        {"new_password1": new, "new_password2": new},
    )
    assert done.status_code == 302 and done["Location"] == "/accounts/reset/done/"
    user.refresh_from_db()
    assert user.check_password(new)
    # an unknown address answers the same page and sends nothing (no account probing)
    again = client.post("/accounts/password_reset/", {"email": "nobody@example.com"})
    assert again.status_code == 302 and len(mail.outbox) == 1


@pytest.mark.django_db
def test_owner_shares_from_the_scenario_page_and_stops_sharing(client, catalog):
    owner = UserFactory(username="owner")
    colleague = UserFactory(username="colleague")
    UserFactory(username="other")
    scenario = make_scenario(owner=owner)
    client.force_login(owner)
    page = client.get(f"/scenarios/{scenario.pk}/").content.decode()
    assert 'id="share-add"' in page
    # when the owner shares with a colleague and a name that does not exist
    client.post(f"/scenarios/{scenario.pk}/share/", {"add": "colleague, ghost"})
    assert not scenario.shared_with.exists()  # nothing half-saved
    client.post(f"/scenarios/{scenario.pk}/share/", {"add": "colleague, other"})
    assert set(scenario.shared_with.values_list("username", flat=True)) == {"colleague", "other"}
    # then the colleague reads it, without the share form
    client.force_login(colleague)
    page = client.get(f"/scenarios/{scenario.pk}/")
    assert page.status_code == 200 and 'id="share-add"' not in page.content.decode()
    # and cannot change who sees it
    assert client.post(f"/scenarios/{scenario.pk}/share/", {"remove": "other"}).status_code == 404
    # when the owner stops sharing, the colleague gets 404
    client.force_login(owner)
    client.post(f"/scenarios/{scenario.pk}/share/", {"remove": "colleague"})
    client.force_login(colleague)
    assert client.get(f"/scenarios/{scenario.pk}/").status_code == 404


@pytest.mark.django_db
def test_admin_edits_who_a_scenario_is_shared_with(client, catalog):
    admin = UserFactory(username="admin", is_staff=True, is_superuser=True)
    scenario = make_scenario(owner=admin)
    client.force_login(admin)
    page = client.get(f"/admin/planner/scenario/{scenario.pk}/change/")
    assert page.status_code == 200 and b'name="shared_with"' in page.content
