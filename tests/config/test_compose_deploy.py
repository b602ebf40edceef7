"""docker-compose's defaults are deployable: `check --deploy` passes with the environment the
compose file gives the app, the web port is loopback-only unless configured, Redis needs a
password."""

import os
import re
import subprocess
import sys

import yaml

from tests.config.test_settings_and_services import ROOT

GIVEN = {"SECRET_KEY": "k" * 20 + "-compose-deploy-check-0123456789abcdef", "REDIS_PASSWORD": "pw"}


def _substitute(value: str) -> str:
    """${VAR:-default} -> default, ${VAR:?msg} -> the value a deployer must give."""

    def one(match):
        name, op, rest = match.group(1), match.group(2), match.group(3)
        if op == ":-":
            return rest
        return GIVEN[name]

    return re.sub(r"\$\{(\w+)(:-|:\?)([^}]*)\}", one, str(value))


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_compose_environment_passes_check_deploy(tmp_path):
    environment = {k: _substitute(v) for k, v in _compose()["x-app"]["environment"].items()}
    # check --deploy does not connect; the path keeps any stray file out of the checkout
    environment["DATABASE_URL"] = f"sqlite:///{tmp_path / 'unused.sqlite3'}"
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process; a deployment never has it.
    ignored = set(environment) | {"DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean = {k: v for k, v in os.environ.items() if k not in ignored}
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=clean | environment | {"DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_web_port_is_loopback_and_redis_has_a_password():
    services = _compose()["services"]
    (port,) = services["web"]["ports"]
    assert _substitute(port).startswith("127.0.0.1:")
    assert "--requirepass" in services["redis"]["command"]
    broker = _substitute(_compose()["x-app"]["environment"]["CELERY_BROKER_URL"])
    assert broker == "redis://:pw@redis:6379/0"
