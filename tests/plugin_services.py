"""pytest plugin, loaded before Django is set up: point the suite at the real services.

- PostgreSQL: DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432/headroom when that
  port answers; otherwise SQLite (a skip of nothing: the suite still runs), unless
  REQUIRE_SERVICES=1, which makes a missing PostgreSQL or Redis fail the run.
- Redis: REDIS_URL if set, else redis://127.0.0.1:6379/0 when it answers; tests that need it
  use the ``redis_url`` fixture, which skips (or fails under REQUIRE_SERVICES=1) without it.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import pytest

DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/headroom"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def services_required() -> bool:
    return os.environ.get("REQUIRE_SERVICES", "") in {"1", "true", "yes"}


def _select_services() -> list[str]:
    """Set DATABASE_URL / REDIS_URL for what answers; return what is missing."""
    missing = []
    url = os.environ.get("DATABASE_URL") or DEFAULT_PG
    if url.startswith("postgres") and _reachable(url, 5432):
        os.environ["DATABASE_URL"] = url
    elif url.startswith("postgres"):
        os.environ.pop("DATABASE_URL", None)
        missing.append(f"PostgreSQL at {url}")
    redis = os.environ.get("REDIS_URL") or DEFAULT_REDIS
    if _reachable(redis, 6379):
        os.environ["REDIS_URL"] = redis
    else:
        os.environ.pop("REDIS_URL", None)
        missing.append(f"Redis at {redis}")
    return missing


# Runs at import, during pytest's pre-parse of ``-p``: before pytest-django imports settings.
MISSING = _select_services()


def pytest_configure(config):
    if MISSING and services_required():
        pytest.exit(f"REQUIRE_SERVICES=1 but not reachable: {', '.join(MISSING)}", returncode=3)


def pytest_report_header(config):
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return f"headroom: database={engine} redis={os.environ.get('REDIS_URL', 'absent')}"


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        if services_required():
            pytest.fail("REQUIRE_SERVICES=1 but Redis is not reachable")
        pytest.skip("Redis not reachable")
    return url
