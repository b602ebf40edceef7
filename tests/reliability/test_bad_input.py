"""Bad input is a 400 naming the field, never a 500 (round two of the attack on the stack)."""

import io
import json
import logging

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from config.logging_filters import RedactShareTokens, redact
from tests.api.test_api import body
from tests.factories import UserFactory
from tests.web.conftest import form_post

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(catalog):
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(UserFactory(username="prober"))
    return client


@pytest.fixture
def browser(catalog):
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="ui-prober"))
    return client


@pytest.mark.parametrize("param", ["search", "tag", "owner", "status", "updated_since"])
def test_nul_in_a_query_parameter_is_a_400_naming_it(api, param):
    answer = api.get("/api/v1/scenarios/", {param: "a\x00b"})
    assert answer.status_code == 400
    assert param in answer.json()["errors"]


@pytest.mark.parametrize("param", ["q", "tag"])
def test_nul_in_the_ui_search_is_a_400(browser, param):
    answer = browser.get("/scenarios/", {param: "\x00"})
    assert answer.status_code == 400 and param.encode() in answer.content


def test_json_nested_50k_deep_is_a_400(api):
    deep = "[" * 50_000 + "]" * 50_000
    answer = api.generic("POST", "/api/v1/scenarios/", deep, content_type="application/json")
    assert answer.status_code == 400
    assert "nested deeper than" in answer.json()["message"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_infinity_literal_names_its_field(api, literal):
    text = json.dumps(body()).replace('"peak_rps": 20', f'"peak_rps": {literal}')
    assert literal in text
    answer = api.generic("POST", "/api/v1/scenarios/", text, content_type="application/json")
    assert answer.status_code == 400
    assert answer.json()["errors"] == {
        "traffic.peak_rps": [f"{literal} is not a number JSON allows"]
    }


@pytest.mark.parametrize(
    "name, content, says",
    [
        ("bench.json", b"\x89PNG\r\n\x1a\n\x00\x00binary", "NUL"),
        ("bench.json", b"\x89PNG\r\n\x1a\nbinary", "not UTF-8"),
        ("bench.csv", "model,gpu,isl\n".encode("utf-16"), "UTF-16"),
        ("bench.csv", b"model,gpu\x00,isl\n", "NUL"),
        ("bench.csv", b"model,gpu,isl\n" + b"x" * 140_000 + b",h100,1\n", "the limit is 131,072"),
    ],
)
def test_calibration_uploads_that_are_not_text_are_400s(api, name, content, says):
    upload = io.BytesIO(content)
    upload.name = name
    form = {"file": upload, "gpu": "H100", "engine_family": "vllm", "num_gpus": 1, "tp": 1}
    answer = api.post("/api/v1/calibration-profiles/upload/", form | {"weight_precision": "fp8"})
    assert answer.status_code == 400, answer.content
    assert says in answer.json()["errors"]["file"][0]


@pytest.mark.parametrize("value", ["NaN", "1e309", "nan", "-inf"])
def test_ui_hourly_rps_of_nan_or_overflow_is_a_form_error(browser, value):
    answer = browser.post("/scenarios/new/", form_post(hourly_rps=",".join([value] * 24)))
    assert answer.status_code == 400  # the form again, with the error by the field
    assert b"finite number" in answer.content


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("description", "d" * 10_001, b"at most 10,000 characters"),
        ("tags", ", ".join(f"t{i}" for i in range(21)), b"at most 20 tags"),
        ("tags", "x" * 51, b"each tag at most 50 characters"),
    ],
)
def test_the_ui_form_applies_the_apis_size_limits(browser, field, value, says):
    from planner.models import Scenario

    answer = browser.post("/scenarios/new/", form_post(**{field: value}))
    assert answer.status_code == 400 and says in answer.content
    assert not Scenario.objects.exists()


def test_bodies_declaring_more_than_the_limit_are_refused_unread(api, settings):
    settings.REQUEST_MAX_BYTES = 1000
    answer = api.generic(
        "POST", "/api/v1/scenarios/", "{}", content_type="application/json", CONTENT_LENGTH="5000"
    )
    assert answer.status_code == 413 and "the limit is 1,000 bytes" in answer.json()["message"]


def test_chunked_bodies_are_refused_not_read_as_empty(api):
    answer = api.generic(
        "POST",
        "/api/v1/scenarios/",
        b"",
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert answer.status_code == 411


def test_every_page_carries_csp_and_permissions_policy(browser):
    page = browser.get("/scenarios/")
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert (
        "'unsafe-inline'"
        not in page["Content-Security-Policy"].split("script-src")[1].split(";")[0]
    )
    assert "microphone=()" in page["Permissions-Policy"]


@pytest.mark.parametrize(
    "path",
    [
        "/s/%71" + "A" * 42 + "/",
        "/s//" + "A" * 43 + "/",
        "/s/" + "%41" * 43 + "/",
    ],
)
def test_share_tokens_are_redacted_on_the_decoded_path(path):
    assert "AAAAAAAA" not in redact(f"GET {path} 404").replace("%41", "")
    assert "qAAAA" not in redact(f"GET {path} 404")
    assert "[redacted]" in redact(f"GET {path} 404")
    record = logging.LogRecord("django.server", logging.INFO, __file__, 1, '"%s"', (path,), None)
    RedactShareTokens().filter(record)
    assert "[redacted]" in record.getMessage()


@pytest.mark.parametrize(
    "password, says",
    [
        ("short-pw-1", "at least 12 characters"),
        ("394857203948572", "entirely numeric"),
        ("password12345", "too common"),
        ("prober-the-user", "too similar"),
    ],
)
def test_passwords_need_12_characters_and_pass_the_validators(password, says):
    user = UserFactory(username="prober-the-user")
    with pytest.raises(ValidationError) as refused:
        validate_password(password, user)
    assert any(says in m for m in refused.value.messages), refused.value.messages
    validate_password("violet staple orbit lantern", user)
