"""Fault drills on a private stack: a PostgreSQL cluster and a Redis of their own, a Celery
worker and gunicorn as subprocesses. Each drill starts runs, injects one fault, and reports
what was lost and how long recovery took. The tests assert on them; bench/reliability.py
publishes the numbers. Nothing here touches the machine's shared servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.private_services import PrivatePostgres, PrivateRedis, free_port

ROOT = Path(__file__).resolve().parents[2]
SECRET = "drill-only-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz-ABCDEFGH"

CREATE_RUNS = """
import json, sys
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from planner.services import WorkersUnavailable, scenario_create, sizing_run_start
from tests.factories import scenario_data
user, _ = get_user_model().objects.get_or_create(username="drill")
token, _ = Token.objects.get_or_create(user=user)
ids = []
for i in range({count}):
    scenario = scenario_create(owner=user, data=scenario_data(name=f"drill {{i}}"))
    try:
        ids.append(sizing_run_start(scenario=scenario).pk)
    except WorkersUnavailable:
        ids.append(scenario.runs.get().pk)
print(json.dumps({{"runs": ids, "token": token.key}}))
"""


@dataclass
class Stack:
    """A private PostgreSQL + Redis with the app's processes pointed at them."""

    pg: PrivatePostgres = field(default_factory=PrivatePostgres)
    redis: PrivateRedis = field(default_factory=PrivateRedis)
    queue: str = field(default_factory=lambda: f"headroom-drill-{uuid.uuid4().hex[:6]}")
    database_url: str = ""
    processes: list = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.pg.available and self.redis.available

    def env(self, **extra) -> dict:
        base = {
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.redis.url,
            "CELERY_TASK_DEFAULT_QUEUE": self.queue,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONUNBUFFERED": "1",
            "RUNS_ACTIVE_PER_USER": "1000",
            "SIZING_SIMULATE_TAILS": "false",  # mean-value runs: the drills time recovery
        }
        return os.environ | base | {k: str(v) for k, v in extra.items()}

    def __enter__(self) -> Stack:
        self.pg.create()
        self.database_url = self.pg.create_database()
        self.redis.start()
        self.manage("migrate", "--noinput", "-v0")
        self.manage("load_catalog", "-v0")
        return self

    def __exit__(self, *exc) -> None:
        for process in self.processes:
            stop(process)
        self.redis.close()
        self.pg.close()

    def manage(self, *args: str, **env) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args[:1])} failed: {out.stderr[-2000:]}")
        return out.stdout

    def shell(self, code: str, **env):
        """Run ``code`` in ``manage.py shell``; its last line of output, read as JSON."""
        return json.loads(self.manage("shell", "-c", code, **env).strip().splitlines()[-1])

    def create_runs(self, count: int, **env) -> tuple[list[int], str]:
        out = self.shell(CREATE_RUNS.format(count=count), **env)
        return out["runs"], out["token"]

    def worker(self, name: str, **env) -> subprocess.Popen:
        command = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=prefork"]
        command += ["--concurrency=1", "-Q", self.queue, "-n", f"{name}@%h"]
        command += ["--without-gossip", "--without-mingle", "--loglevel=WARNING"]
        return self._spawn(command, **env)

    def web(self, workers: int = 2, **env) -> str:
        port = free_port()
        command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "config.wsgi"]
        command += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
        command += ["--access-logfile", "/dev/null"]
        production = {
            "DEBUG": "false",
            "SECRET_KEY": SECRET,
            "ALLOWED_HOSTS": "127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
        }
        self._spawn(command, **(production | env))
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if get(base + "/healthz")[0] == 200:
                return base
            time.sleep(0.3)
        raise RuntimeError("gunicorn did not start")

    def _spawn(self, command: list[str], **env) -> subprocess.Popen:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def runs(self, ids: list[int]) -> dict[int, dict]:
        """Each run's status, batches done and distinct result rows, read directly."""
        import psycopg

        with psycopg.connect(self.database_url, connect_timeout=3) as connection:
            rows = connection.execute(
                "select r.id, r.status, r.candidate_count, r.batches_done, r.error,"
                " (select count(distinct c.candidate_key) from planner_candidateresult c"
                "  where c.run_id = r.id),"
                " (select count(*) from planner_candidateresult c where c.run_id = r.id)"
                " from planner_sizingrun r where r.id = any(%s)",
                (ids,),
            ).fetchall()
        return {
            row[0]: {
                "status": row[1],
                "candidates": row[2],
                "batches_done": len(row[3]),
                "error": row[4],
                "distinct_rows": row[5],
                "rows": row[6],
            }
            for row in rows
        }

    def wait(self, ids: list[int], condition, timeout_s: float) -> dict[int, dict]:
        deadline = time.monotonic() + timeout_s
        states: dict = {}
        while time.monotonic() < deadline:
            try:
                states = self.runs(ids)
            except Exception:  # the database is restarting: try again
                states = {}
            if states and condition(states):
                return states
            time.sleep(0.3)
        return states


def stop(process: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def get(url: str, token: str | None = None, method: str = "GET") -> tuple[int, float]:
    headers = {"Authorization": f"Token {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        status = 599
    return status, time.perf_counter() - started


def finished(states: dict) -> bool:
    return all(s["status"] in ("succeeded", "failed") for s in states.values())


def outcome(states: dict, ids: list[int], started: float) -> dict:
    succeeded = [s for s in states.values() if s["status"] == "succeeded"]
    return {
        "runs": len(ids),
        "succeeded": len(succeeded),
        "lost": len(ids) - len(succeeded),
        "duplicate_rows": sum(s["rows"] - s["distinct_rows"] for s in states.values()),
        "incomplete": sum(s["distinct_rows"] != s["candidates"] for s in succeeded),
        "recovery_s": round(time.monotonic() - started, 1),
        "errors": [s["error"][:200] for s in states.values() if s["status"] == "failed"],
    }


SLOW_BATCHES = {"SIZING_BATCH_SIZE": "8", "SIZING_BATCH_DELAY_S": "0.3"}


def postgres_restart(stack: Stack, runs: int = 2) -> dict:
    """PostgreSQL restarts while workers size batches; the web serves through it."""
    ids, token = stack.create_runs(runs, **SLOW_BATCHES)
    stack.worker("pg-drill", **SLOW_BATCHES)
    web = stack.web(workers=1)
    assert get(web + "/api/v1/scenarios/", token)[0] == 200  # the web holds a connection now
    stack.wait(ids, lambda s: any(r["batches_done"] >= 2 for r in s.values()), 180)
    down_s = stack.pg.restart()
    started = time.monotonic()
    # every web request after the restart answers: a stale connection is checked, not used
    after = [get(web + "/api/v1/scenarios/", token)[0] for _ in range(4)]
    states = stack.wait(ids, finished, 300)
    return outcome(states, ids, started) | {"down_s": round(down_s, 1), "web_after": after}


def redis_outage(stack: Stack, outage_s: float = 10) -> dict:
    """Redis (broker, chord backend, cache) stops with runs queued and the web in use; runs
    started meanwhile are saved; beat's sweep re-sends them when Redis is back."""
    web = stack.web(workers=1)
    _, token = stack.create_runs(0)
    stack.redis.stop()
    statuses = [get(web + "/api/v1/scenarios/", token)[0] for _ in range(3)]
    ids, _ = stack.create_runs(2)  # saved as queued: WorkersUnavailable
    time.sleep(outage_s)
    stack.redis.start()
    started = time.monotonic()
    stack.worker("redis-drill")
    sweep = "from planner.tasks import requeue_stuck_runs; print(requeue_stuck_runs())"
    stack.manage("shell", "-c", sweep, RUN_STALE_SECONDS="0")
    states = stack.wait(ids, finished, 300)
    return outcome(states, ids, started) | {"web_during": statuses}


def worker_killed(stack: Stack) -> dict:
    """A worker is SIGKILLed mid-batch; the message is redelivered to a second worker."""
    env = SLOW_BATCHES | {"CELERY_VISIBILITY_TIMEOUT": "10"}
    ids, _ = stack.create_runs(1, **env)
    first = stack.worker("doomed", **env)
    stack.wait(ids, lambda s: any(r["batches_done"] >= 1 for r in s.values()), 180)
    stop(first, signal.SIGKILL)
    started = time.monotonic()
    stack.worker("survivor", **env)
    states = stack.wait(ids, finished, 300)
    return outcome(states, ids, started)


LOAD_DOCUMENT = {
    "name": "load",
    "traffic": {
        "peak_rps": 12,
        "mean_rps": 6,
        "prompt_tokens": {"mean": 800, "p95": 2000},
        "output_tokens": {"mean": 250, "p95": 600},
    },
    "slo": {"ttft_ms": 2000, "tpot_ms": 60},
    "candidates": {
        "models": ["llama-3.1-8b", "Qwen3-8B"],
        "gpus": ["H100", "L40S"],
        "precisions": ["bf16", "fp8"],
    },
    "api_alternative": {"input_usd_per_mtok": 0.2, "output_usd_per_mtok": 0.6},
}
MAKE_TOKENS = """
import json
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
keys = []
for i in range({count}):
    user, _ = get_user_model().objects.get_or_create(username=f"load{{i}}")
    keys.append(Token.objects.get_or_create(user=user)[0].key)
print(json.dumps(keys))
"""


def post(url: str, token: str, document: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(document).encode() if document is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, {}
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return 599, {}


def load(stack: Stack, clients: int, seconds: float, workers: int = 2) -> dict:
    """``clients`` API users create and run scenarios for ``seconds`` against gunicorn and
    ``workers`` Celery workers; then the accepted runs drain."""
    import threading

    fast = {"API_USER_RATE": "100000/min", "SIZING_SIMULATE_TAILS": "false"}
    keys = stack.shell(MAKE_TOKENS.format(count=clients))
    web = stack.web(workers=3, **fast)
    for i in range(workers):
        stack.worker(f"load{i}")
    statuses: list[int] = []
    accepted: list[int] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(token: str) -> None:
        while time.monotonic() < deadline:
            code, scenario = post(web + "/api/v1/scenarios/", token, LOAD_DOCUMENT)
            with lock:
                statuses.append(code)
            if code != 201:
                continue
            code, run = post(web + f"/api/v1/scenarios/{scenario['id']}/run/", token)
            with lock:
                statuses.append(code)
                if code == 202:
                    accepted.append(run["id"])
            if code == 429:
                time.sleep(1)  # the quota said wait: a well-behaved client backs off

    threads = [threading.Thread(target=client, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    load_end = time.monotonic()
    health = get(web + "/healthz")
    states = stack.wait(accepted, finished, 900) if accepted else {}
    drained = time.monotonic() - load_end
    done = outcome(states, accepted, load_end) if accepted else {"succeeded": 0, "lost": 0}
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": len(statuses),
        "server_errors_5xx": sum(1 for s in statuses if s >= 500),
        "quota_429": sum(1 for s in statuses if s == 429),
        "runs_accepted": len(accepted),
        "runs_finished": done["succeeded"],
        "runs_lost": done["lost"],
        "drain_s": round(drained, 1),
        "healthz_ms_after_load": round(1000 * health[1]),
    }
