"""Load: N concurrent API clients create and run scenarios against gunicorn + 2 Celery workers.

    python bench/load.py [--clients 20] [--seconds 30] [--database headroom_load] [--json]

Loopback only (127.0.0.1), bounded in count and time, stops by itself. Uses its own
database (``--database``, created if missing) on the local PostgreSQL and a queue named after
it on the local Redis, so two benches side by side do not share work. Reports completed runs,
errors, 5xx, p50/p95 API latency, runs per second, the drain time (load end to every accepted
run finished) and ``/healthz`` right after the load; "lost" runs are those accepted (202)
that never finished.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PORT = 8765
BASE = f"http://127.0.0.1:{PORT}"
ENV = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/headroom_load",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CELERY_TASK_DEFAULT_QUEUE": "headroom-load",
    "DEBUG": "false",
    "SECRET_KEY": "load-test-only-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",
    "SESSION_COOKIE_SECURE": "false",
    "CSRF_COOKIE_SECURE": "false",
    "API_USER_RATE": "100000/min",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}
os.environ.update(ENV)
from tests.reliability.drills import LOAD_DOCUMENT as DOCUMENT  # noqa: E402 (one document)


def use_database(name: str) -> None:
    """Point this process and the servers it starts at database ``name`` and its own queue."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", name):
        raise SystemExit(f"--database {name!r}: use lower-case letters, digits and _")
    ENV["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{name}"
    ENV["CELERY_TASK_DEFAULT_QUEUE"] = name.replace("_", "-")
    os.environ.update(ENV)


def prepare(clients: int, database: str) -> list[str]:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        found = "select 1 from pg_database where datname = %s"
        if not c.execute(found, (database,)).fetchone():
            c.execute(f'create database "{database}"')  # the name is checked by use_database
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0)
    call_command("load_catalog", verbosity=0)
    tokens = []
    for i in range(clients):
        user, _ = get_user_model().objects.get_or_create(username=f"load{i}")
        tokens.append(Token.objects.get_or_create(user=user)[0].key)
    return tokens


def call(method: str, path: str, token: str, body: dict | None = None) -> tuple[int, dict, float]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        BASE + path,
        data=data,
        method=method,
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            payload = json.loads(response.read() or b"{}")
            status = response.status
    except urllib.error.HTTPError as error:
        status, payload = error.code, {}
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        status, payload = 599, {}
    return status, payload, time.perf_counter() - started


def client(token: str, deadline: float, log: dict, lock: threading.Lock) -> None:
    while time.monotonic() < deadline:
        status, body, latency = call("POST", "/api/v1/scenarios/", token, DOCUMENT)
        with lock:
            log["latency"].append(latency)
            log["status"].append(status)
        if status != 201:
            continue
        status, body, latency = call("POST", f"/api/v1/scenarios/{body['id']}/run/", token)
        with lock:
            log["latency"].append(latency)
            log["status"].append(status)
            if status == 202:
                log["runs"].append((token, body["id"]))
        if status == 429:
            time.sleep(1)  # RUNS_ACTIVE_PER_USER said wait: a well-behaved client backs off


def wait_for_runs(runs: list, timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    pending = dict.fromkeys(runs)
    states: dict = {}
    while pending and time.monotonic() < deadline:
        for token, run_id in list(pending):
            status, body, _ = call("GET", f"/api/v1/runs/{run_id}/", token)
            if status == 200 and body.get("status") in ("succeeded", "failed"):
                states[(token, run_id)] = body["status"]
                pending.pop((token, run_id))
        time.sleep(0.5)
    counts = {"succeeded": 0, "failed": 0, "lost": len(pending)}
    for state in states.values():
        counts[state] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--database", default="headroom_load", help="created if missing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    use_database(args.database)
    tokens = prepare(args.clients, args.database)
    env = os.environ | ENV
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "config/gunicorn.py",
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{PORT}",
            "--workers",
            "3",
            "--access-logfile",
            "/dev/null",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--concurrency=1",
                "-Q",
                ENV["CELERY_TASK_DEFAULT_QUEUE"],
                "-n",
                f"load{i}@%h",
                "--loglevel=ERROR",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    try:
        for _ in range(60):
            try:
                urllib.request.urlopen(BASE + "/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        log: dict = {"latency": [], "status": [], "runs": []}
        lock = threading.Lock()
        deadline = time.monotonic() + args.seconds
        threads = [threading.Thread(target=client, args=(t, deadline, log, lock)) for t in tokens]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        load_end = time.monotonic()
        _, _, health_s = call("GET", "/healthz", tokens[0])
        states = wait_for_runs(log["runs"], timeout_s=600)
        drain_s = time.monotonic() - load_end
        elapsed = time.monotonic() - started
    finally:
        for process in [web, *workers]:
            process.terminate()
        for process in [web, *workers]:
            process.wait(30)
    latencies = sorted(log["latency"])
    result = {
        "clients": args.clients,
        "seconds": args.seconds,
        "requests": len(latencies),
        "errors": sum(1 for s in log["status"] if s >= 400 and s != 429),
        "quota_429": sum(1 for s in log["status"] if s == 429),
        "server_errors_5xx": sum(1 for s in log["status"] if s >= 500),
        "runs_started": len(log["runs"]),
        **{f"runs_{k}": v for k, v in states.items()},
        "p50_api_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p95_api_ms": 1000 * latencies[int(0.95 * (len(latencies) - 1))] if latencies else None,
        "runs_per_s": states["succeeded"] / elapsed,
        "drain_s": drain_s,
        "healthz_ms_after_load": 1000 * health_s,
    }
    print(
        json.dumps(result, indent=2)
        if args.json
        else "\n".join(
            f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}" for k, v in result.items()
        )
    )


if __name__ == "__main__":
    main()
