"""The production settings in a real browser: gunicorn, DEBUG off, static files collected and
served by the app itself (whitenoise). Charts (plotly), live progress (htmx) and the CSS must
load, with the security headers on and no Content-Security-Policy violation."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from django.db import connection

from planner.services import sizing_run_start
from tests.factories import UserFactory, make_scenario
from tests.planner.test_celery_worker import ROOT, _database_url
from tests.reliability.private_services import free_port
from tests.web.test_browser import (  # noqa: F401 (browser: fixture)
    CHARTS_DRAWN,
    PASSWORD,
    TIMEOUT_MS,
    browser,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def production_env(static_root, **extra) -> dict:
    return (
        os.environ
        | {
            "DEBUG": "false",
            "SECRET_KEY": "production-test-only-0123456789abcdefghijklmnopqrstuvwxyz-ABCDEFG",
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "SECURE_HSTS_SECONDS": "0",
            "STATIC_ROOT": str(static_root),
            "DATABASE_URL": _database_url(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
        | extra
    )


@pytest.fixture
def gunicorn(tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("gunicorn needs the test database on a server (PostgreSQL)")
    env = production_env(tmp_path / "static")
    env.pop("CELERY_BROKER_URL", None)  # runs finish in-process: no worker needed here
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stderr
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "config.wsgi"]
    command += ["--bind", f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"]
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/healthz", timeout=2)
            break
        except OSError:
            time.sleep(0.3)
    else:
        server.kill()
        pytest.fail(f"gunicorn did not start: {server.stdout.read(4000)!r}")
    yield base
    server.terminate()
    server.wait(20)


def test_charts_progress_and_css_load_under_production_settings(browser, gunicorn):  # noqa: F811
    # given a reviewer with a finished run
    from django.core.management import call_command

    call_command("load_catalog", verbosity=0)
    user = UserFactory(username="prod-reviewer", password=PASSWORD)
    run = sizing_run_start(scenario=make_scenario(owner=user, models=["llama-3.1-8b"]))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    static_answers: dict[str, int] = {}
    problems: list[str] = []
    page.on(
        "response",
        lambda r: static_answers.__setitem__(r.url, r.status) if "/static/" in r.url else None,
    )
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on(
        "console",
        lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
    )
    # when they sign in and open the run under gunicorn with DEBUG off
    page.goto(f"{gunicorn}/accounts/login/")
    page.get_by_label("Username").fill("prod-reviewer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/scenarios/")
    response = page.goto(f"{gunicorn}/runs/{run.pk}/")
    assert response.status == 200
    # then every static file answered 200: the stylesheet, htmx, plotly, the app's script
    page.wait_for_function(CHARTS_DRAWN)
    assert static_answers and set(static_answers.values()) == {200}, static_answers
    names = " ".join(static_answers)
    for asset in ("pico", "headroom.css", "htmx", "plotly", "headroom.js"):
        assert asset in names, (asset, static_answers)
    assert page.evaluate("typeof window.htmx") == "object"
    assert page.evaluate("typeof window.Plotly") == "object"
    # and the CSS applies (pico's variables are defined on the root element)
    font = page.evaluate(
        "getComputedStyle(document.documentElement).getPropertyValue('--pico-font-family')"
    )
    assert font.strip()
    # and the security headers are on, without announcing the server software
    headers = response.all_headers()
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "camera=()" in headers["permissions-policy"]
    assert "gunicorn" not in headers.get("server", "").lower()
    assert not problems, problems
    context.close()


def test_gunicorn_refuses_chunked_and_oversized_bodies_before_reading_them(gunicorn):
    import http.client
    from urllib.parse import urlparse

    address = urlparse(gunicorn)
    # a chunked body: Django would read it as empty; the guard answers 411
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.putrequest("POST", "/api/v1/scenarios/")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.putheader("Content-Type", "application/json")
    connection.endheaders()
    connection.send(b'7\r\n{"a": 1\r\n0\r\n\r\n')
    answer = connection.getresponse()
    assert answer.status == 411 and b"Content-Length" in answer.read()
    assert "gunicorn" not in (answer.getheader("Server") or "").lower()
    connection.close()
    # a multipart upload declaring 50 MB: refused on the header, nothing is read or spooled
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    connection.putrequest("POST", "/api/v1/calibration-profiles/upload/")
    connection.putheader("Content-Type", "multipart/form-data; boundary=x")
    connection.putheader("Content-Length", str(50_000_000))
    connection.endheaders()
    connection.send(b"--x\r\n")  # the rest never comes
    answer = connection.getresponse()
    assert answer.status == 413 and b"the limit is 3,000,000 bytes" in answer.read()
    connection.close()
