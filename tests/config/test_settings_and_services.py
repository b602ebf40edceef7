"""Settings come from the environment; the suite really runs on the services it says."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.db import connection

from tests.plugin_services import services_required

ROOT = Path(__file__).resolve().parents[2]


def _settings_in_subprocess(env: dict, expr: str) -> subprocess.CompletedProcess:
    code = f"import django, os; django.setup(); from django.conf import settings; print({expr})"
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG"}
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=clean | {"DJANGO_SETTINGS_MODULE": "config.settings"} | env,
    )


def test_embedded_default_is_sqlite_and_in_process_tasks():
    out = _settings_in_subprocess(
        {}, "settings.DATABASES['default']['ENGINE'], settings.CELERY_TASK_ALWAYS_EAGER"
    )
    assert out.returncode == 0, out.stderr
    assert "sqlite3" in out.stdout and "True" in out.stdout


def test_postgres_url_and_broker_select_real_services():
    out = _settings_in_subprocess(
        {
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/headroom",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        },
        "settings.DATABASES['default']['ENGINE'], settings.CELERY_TASK_ALWAYS_EAGER",
    )
    assert "postgresql" in out.stdout and "False" in out.stdout, out.stderr


def test_secret_key_required_when_debug_off():
    out = _settings_in_subprocess({"DEBUG": "false"}, "settings.SECRET_KEY")
    assert out.returncode != 0
    assert "SECRET_KEY must be set" in out.stderr


def test_check_deploy_is_clean_with_production_environment():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}  # the browser tests set it
    }
    env |= {
        "DEBUG": "false",
        "SECRET_KEY": "x" * 64 + "-production-like-secret-Q9!",
        "ALLOWED_HOSTS": "headroom.example.com",
    }
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.django_db
def test_suite_runs_on_postgresql_when_services_required():
    if not services_required() and connection.vendor != "postgresql":
        pytest.skip("PostgreSQL not reachable and REQUIRE_SERVICES unset")
    assert connection.vendor == "postgresql"
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    with connection.cursor() as cursor:
        cursor.execute("select version()")
        assert "PostgreSQL" in cursor.fetchone()[0]


def test_redis_answers(redis_url):
    import redis

    assert redis.Redis.from_url(redis_url).ping() is True


def test_docker_compose_file_is_valid():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["CELERY_BROKER_URL"].startswith("redis://")
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "load_catalog" in services["web"]["command"]
    assert "migrate" in services["web"]["command"]
    if shutil.which("docker-compose"):  # Debian's package parses without an engine
        out = subprocess.run(
            ["docker-compose", "config", "-q"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=os.environ | {"SECRET_KEY": "compose-check", "REDIS_PASSWORD": "compose-check"},
        )
        assert out.returncode == 0, out.stderr


@pytest.mark.django_db
def test_home_and_admin_pages(client, catalog, admin_user):
    page = client.get("/")
    assert page.status_code == 200
    assert b"H100 SXM" in page.content and b"Llama 3.1 70B" in page.content
    assert client.get("/healthz").json() == {"status": "ok"}
    client.force_login(admin_user)
    assert client.get("/admin/fleets/gpusku/").status_code == 200
    assert client.get("/admin/pricing/pricesheet/").status_code == 200


@pytest.mark.django_db
def test_migrations_are_complete():
    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", verbosity=0)
