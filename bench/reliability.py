"""Reliability and security figures for the README, on a private stack (a PostgreSQL cluster and
a Redis of its own on free loopback ports, gunicorn with DEBUG off, Celery workers):

    python bench/reliability.py [--examples 20] [--load-seconds 30] [--clients 20,50] [--json]

1. schemathesis over every API operation as a user and as staff: cases and 5xx answers;
2. two users: every object route (walked from the URL conf) x GET/POST/PATCH/DELETE by the
   user who does not own the objects: answers other than 403/404/405 count as leaks;
3. faults: PostgreSQL restarted mid-run, Redis (broker, chord backend, cache) stopped with the
   web in use, a worker SIGKILLed mid-batch: runs lost, duplicate rows, recovery time;
4. load: N clients creating and running scenarios, then the accepted runs drain.

Needs the PostgreSQL server binaries (initdb, pg_ctl) and redis-server; never touches the
machine's shared servers. Takes about 10-20 minutes on a 2-core machine; the README's
schemathesis rows are ``--only fuzz --examples 50`` (about 8 minutes: 2,000+ cases per
role). The CI test (tests/api/test_schemathesis.py) keeps a few examples per operation.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.reliability import drills  # noqa: E402

SEED = """
import json
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from planner.services import WorkersUnavailable, sizing_run_start
from tests.factories import make_scenario
keys = {}
for name, staff in (("fuzz-user", False), ("fuzz-staff", True)):
    user, _ = get_user_model().objects.get_or_create(username=name, is_staff=staff)
    scenario = make_scenario(
        owner=user, models=["llama-3.1-8b"], gpus=["H100", "L40S"], precisions=["fp8"]
    )
    try:
        sizing_run_start(scenario=scenario)
    except WorkersUnavailable:
        pass
    keys[name] = Token.objects.get_or_create(user=user)[0].key
print(json.dumps(keys))
"""

LEAKS = """
import json
from django.test import Client
from rest_framework.test import APIClient
from planner.services import share_link_create, sizing_run_start
from tests.factories import UserFactory, make_scenario
from tests.reliability.test_security import _fill, _object_routes
owner = UserFactory(username="leak-owner")
scenario = make_scenario(owner=owner, models=["llama-3.1-8b"], gpus=["H100"], precisions=["fp8"])
run = sizing_run_start(scenario=scenario)
link, _ = share_link_create(user=owner, scenario=scenario, run=run)
ids = {"scenario": scenario.pk, "run": run.pk, "link": link.pk}
intruder = UserFactory(username="leak-intruder")
api, web = APIClient(), Client()
api.force_authenticate(intruder)
web.force_login(intruder)
routes, requests, leaks = _object_routes(), 0, []
for route in routes:
    url = _fill(route, ids)
    client = api if url.startswith("/api/") else web
    for method in ("get", "post", "patch", "delete"):
        requests += 1
        code = getattr(client, method)(url).status_code
        if code not in (403, 404, 405):
            leaks.append([method, url, code])
unchanged = scenario.runs.count() == 1 and not type(link).objects.get(pk=link.pk).revoked_at
print(json.dumps({"routes": len(routes), "requests": requests, "leaks": leaks,
                  "objects_unchanged": unchanged}))
"""


def fuzz(stack: drills.Stack, examples: int) -> dict:
    keys = stack.shell(SEED, SIZING_SIMULATE_TAILS="false")
    web = stack.web(workers=2, API_USER_RATE="1000000/min")
    stack.worker("fuzz")
    out = {}
    for name, key in keys.items():
        started = time.monotonic()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "run",
                f"{web}/api/schema/?format=json",
                "-H",
                f"Authorization: Token {key}",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                str(examples),
                "--phases",
                "examples,fuzzing",
                "--request-timeout",
                "30",
                "--seed",
                "1",
                "--no-color",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        text = result.stdout + result.stderr
        cases = re.search(r"Test cases:\s*([\d,]+) generated", text)
        failures = re.findall(r"Server error", text)
        out[name] = {
            "cases": int(cases.group(1).replace(",", "")) if cases else None,
            "server_errors": len(failures),
            "exit": result.returncode,
            "seconds": round(time.monotonic() - started),
        }
        if cases is None:
            out[name]["tail"] = text[-1500:]
    return out


def leaks(stack: drills.Stack) -> dict:
    return stack.shell(LEAKS, SIZING_SIMULATE_TAILS="false")


def on_private_stack(function, *args):
    with drills.Stack() as stack:
        return function(stack, *args)


def _stop_cleanly(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")  # unwinds the stacks: servers stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20, help="schemathesis per operation")
    parser.add_argument("--load-seconds", type=float, default=30)
    parser.add_argument("--clients", default="20,50")
    parser.add_argument("--only", default="fuzz,leaks,faults,load")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop_cleanly)
    if not drills.Stack().available:
        sys.exit("needs the PostgreSQL server binaries (initdb, pg_ctl) and redis-server")
    only = set(args.only.split(","))
    figures: dict = {}
    if "fuzz" in only:
        figures["schemathesis"] = on_private_stack(fuzz, args.examples)
    if "leaks" in only:
        figures["routes"] = on_private_stack(leaks)
    if "faults" in only:
        figures["faults"] = {
            "postgresql_restart": on_private_stack(drills.postgres_restart),
            "redis_outage": on_private_stack(drills.redis_outage),
            "worker_sigkill": on_private_stack(drills.worker_killed),
        }
    if "load" in only:
        figures["load"] = [
            on_private_stack(drills.load, int(n), args.load_seconds)
            for n in args.clients.split(",")
        ]
    print(json.dumps(figures, indent=2 if not args.json else None))


if __name__ == "__main__":
    main()
