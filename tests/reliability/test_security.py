"""Access control on every route, share tokens, sign-in throttling, size limits, log hygiene."""

import logging
import uuid

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from config.logging_filters import RedactShareTokens, redact
from planner.services import share_link_create, sizing_run_start
from tests.factories import UserFactory, make_scenario

pytestmark = pytest.mark.django_db


def _patterns(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern)


def _object_routes() -> list[str]:
    """Every UI and API route that names an object (pk or link id), from the URL conf."""
    routes = []
    for route in _patterns(get_resolver()):
        if route.startswith(("admin/", "api/schema", "api/docs")) or "(?P<format>" in route:
            continue
        if route.replace("^", "").startswith(
            ("api/v1/gpus", "api/v1/models", "api/v1/price-", "api/v1/calibration-")
        ):
            continue  # the shared catalog (own calibration uploads: tested below)
        if "<int:pk>" in route or "<uuid:link_id>" in route or "(?P<pk>" in route:
            routes.append(route)
    return sorted(set(routes))


def _fill(route: str, ids: dict) -> str:
    path = route.replace("(?P<pk>[^/.]+)", "{pk}").replace("<int:pk>", "{pk}")
    path = path.replace("^", "").replace("$", "").replace("\\.", ".")
    path = path.replace("<uuid:link_id>", "{link}")
    kind = "run" if "runs/" in path else "link" if ("share-links" in path) else "scenario"
    return "/" + path.format(pk=ids[kind], link=ids["link"])


def test_every_object_route_answers_404_to_another_user(catalog):
    # given an owner's scenario, run and share link
    owner = UserFactory(username="owner")
    scenario = make_scenario(owner=owner)
    run = sizing_run_start(scenario=scenario)
    link, _ = share_link_create(user=owner, scenario=scenario, run=run)
    ids = {"scenario": scenario.pk, "run": run.pk, "link": link.pk}
    routes = _object_routes()
    assert len(routes) >= 15, routes  # the walk really covers the UI and the API
    intruder = UserFactory(username="intruder")
    api = APIClient()
    api.force_authenticate(intruder)
    # when the intruder tries every route with every method, then each answers 404
    for route in routes:
        url = _fill(route, ids)
        client = api if url.startswith("/api/") else None
        for method in ("get", "post", "patch", "delete"):
            if client is None:
                from django.test import Client

                client = Client()
                client.force_login(intruder)
            response = getattr(client, method)(url)
            assert response.status_code in (404, 405), (method, url, response.status_code)
            if response.status_code == 405:
                continue
    assert scenario.runs.count() == 1  # nothing was started, changed or deleted
    link.refresh_from_db()
    assert link.revoked_at is None


def test_share_link_is_read_only_and_unknown_tokens_404(client, catalog):
    owner = UserFactory()
    scenario = make_scenario(owner=owner)
    run = sizing_run_start(scenario=scenario)
    _, token = share_link_create(user=owner, scenario=scenario, run=run)
    assert client.get(f"/s/{token}/").status_code == 200
    assert client.post(f"/s/{token}/").status_code in (403, 405)
    assert client.get(f"/s/{token[:-2]}xx/").status_code == 404
    assert client.get(f"/s/{uuid.uuid4().hex}/").status_code == 404


def test_sign_in_is_throttled_after_repeated_failures(client, settings):
    settings.LOGIN_FAILURES_ALLOWED = 3
    UserFactory(username="alice")
    for _ in range(3):
        failed = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert failed.status_code == 200
    # even the right password is refused while locked out, with Retry-After
    locked = client.post(
        "/accounts/login/", {"username": "alice", "password": "correct horse battery staple"}
    )
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert b"Too many failed sign-in attempts" in locked.content


def test_request_bodies_have_a_size_limit(catalog):
    api = APIClient()
    api.force_authenticate(UserFactory())
    body = '{"name": "' + "x" * 3_000_000 + '"}'
    response = api.generic("POST", "/api/v1/scenarios/", body, content_type="application/json")
    assert response.status_code in (400, 413)
    assert response.status_code != 500


def test_share_tokens_never_reach_the_logs(caplog):
    token = "A" * 43
    assert redact(f"GET /s/{token}/ 200") == "GET /s/[redacted]/ 200"
    record = logging.LogRecord(
        "django.server",
        logging.INFO,
        __file__,
        1,
        '"%s" %s %s',
        (f"GET /s/{token}/ HTTP/1.1", "200", "512"),
        None,
    )
    RedactShareTokens().filter(record)
    assert token not in record.getMessage()


def test_gunicorn_access_log_redacts_tokens(monkeypatch):
    from types import SimpleNamespace

    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    from config.gunicorn import RedactingLogger

    seen = []
    monkeypatch.setattr(
        Logger,
        "access",
        lambda self, resp, req, environ, t: seen.append(
            (environ["RAW_URI"], environ["PATH_INFO"], req.uri, req.path)
        ),
    )
    token = "B" * 43
    request = SimpleNamespace(uri=f"/s/{token}/", path=f"/s/{token}/")
    environ = {"RAW_URI": f"/s/{token}/?x=1", "PATH_INFO": f"/s/{token}/"}
    RedactingLogger(Config()).access(None, request, environ, None)
    assert seen == [("/s/[redacted]/?x=1", "/s/[redacted]/", "/s/[redacted]/", "/s/[redacted]/")]


def test_another_users_calibration_upload_is_invisible(catalog, tmp_path):
    from fleets.calibration import fit_upload
    from fleets.measurements import read_measurements
    from fleets.models import CalibrationProfile, GpuSku
    from tests.fleets.test_calibration import measured_csv

    owner = UserFactory(username="lab-owner")
    rows = read_measurements(measured_csv(tmp_path / "lab.csv"))
    (profile,) = fit_upload(
        rows, GpuSku.objects.get(slug="h100_sxm"), "vllm", source="user upload lab.csv", owner=owner
    )[:1]
    api = APIClient()
    api.force_authenticate(UserFactory(username="other-lab"))
    for method in ("get", "patch", "delete"):
        response = getattr(api, method)(f"/api/v1/calibration-profiles/{profile.pk}/")
        assert response.status_code in (403, 404), (method, response.status_code)
    assert api.get(f"/api/v1/calibration-profiles/{profile.pk}/").status_code == 404
    assert CalibrationProfile.objects.filter(pk=profile.pk).exists()
