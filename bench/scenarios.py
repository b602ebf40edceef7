"""Scenario runs through real Celery workers on Redis + PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/headroom_bench \
        python bench/scenarios.py [--repeats 5] [--json]

1. A typical scenario (3 models x 4 GPUs x 3 precisions x the valid TP choices) from
   ``sizing_run_start`` to saved results with simulated tails (bound-and-prune rounds), with
   one worker and with four: median and max seconds, cold (simulation cache emptied before
   each run, workers keeping no step times: ``SIZING_STEP_MEMO_MB=0``) and warm (the same
   inputs again, as a re-run or a shared link's refresh is); then cold again with the
   workers' step-time memo on (``SIZING_STEP_MEMO_MB=1024``, off by default) and warm from
   an earlier run of the candidates.
2. The ~1,200-candidate sweep (10 models x 10 GPUs x 3 precisions x valid TPs), cold, with
   1 worker and with 2 workers.

Loopback services only; bounded in count and time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/headroom_bench")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
QUEUE = f"headroom-bench-{uuid.uuid4().hex[:6]}"
os.environ["CELERY_TASK_DEFAULT_QUEUE"] = QUEUE
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

TYPICAL = {
    "models": ["Llama-3.1-70B", "Qwen3-32B", "llama-3.1-8b"],
    "gpus": ["H100", "H200", "B200", "L40S"],
    "precisions": ["bf16", "fp8", "int4"],
}
SWEEP = {
    "models": [
        "Llama-3.1-70B",
        "Qwen3-32B",
        "llama-3.1-8b",
        "Qwen3-8B",
        "Mixtral-8x7B",
        "gpt-oss-120b",
        "Qwen3-30B-A3B",
        "Llama-3.1-405B",
        "gemma-3-27b",
        "Mistral-7B-v0.3",
    ],
    "gpus": ["H100", "H100 PCIe", "H200", "B200", "B300", "L40S", "L4", "A100", "MI300X", "MI325X"],
    "precisions": ["bf16", "fp8", "int4"],
}


def ensure_database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", [name]).fetchone():
            conn.execute(f'create database "{name}"')


def start_workers(count: int) -> list[subprocess.Popen]:
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                "-Q",
                QUEUE,
                "-n",
                f"bench{i}-{uuid.uuid4().hex[:4]}@%h",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=ERROR",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]


@contextlib.contextmanager
def memo(megabytes: int):
    """Workers started inside keep ``megabytes`` of step times (``SIZING_STEP_MEMO_MB``)."""
    before = os.environ.get("SIZING_STEP_MEMO_MB")
    os.environ["SIZING_STEP_MEMO_MB"] = str(megabytes)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SIZING_STEP_MEMO_MB")
        else:
            os.environ["SIZING_STEP_MEMO_MB"] = before


def stop(workers) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(30)


def time_run(scenario, timeout_s: float = 600) -> tuple[float, list, int]:
    from planner.models import SizingRun
    from planner.services import sizing_run_start

    started = time.perf_counter()
    run = sizing_run_start(scenario=scenario)
    samples = []
    while True:
        # what a progress poll reads (the page's poll does the same): not the run's inputs
        # and summary, whose JSON 50 polls a second would parse beside the workers
        run = SizingRun.objects.only("status", "progress").get(pk=run.pk)
        samples.append((round(time.perf_counter() - started, 2), run.progress))
        if run.is_finished:
            break
        if time.perf_counter() - started > timeout_s:
            raise SystemExit(f"run {run.pk} did not finish in {timeout_s} s")
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    run = SizingRun.objects.get(pk=run.pk)
    if run.status != SizingRun.Status.SUCCEEDED:
        raise SystemExit(f"run {run.pk} failed: {run.error}")
    return elapsed, samples, run.candidate_count


def clear_cache() -> None:
    from planner.models import SimulationCache

    SimulationCache.objects.all().delete()


def measure(scenario, repeats: int, cold: bool) -> dict:
    times, simulated = [], []
    for _ in range(repeats):
        if cold:
            clear_cache()
        elapsed, _, count = time_run(scenario)
        times.append(elapsed)
        run = scenario.runs.first()
        simulated.append(run.summary.get("simulated", 0))
    return {
        "candidates": count,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "runs": len(times),
        "simulated_per_run": statistics.median(simulated),
    }


def with_workers(count: int, job):
    workers = start_workers(count)
    try:
        time.sleep(3)  # worker boot
        return job()
    finally:
        stop(workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--typical-only", action="store_true", help="skip the 1,200-candidate sweep (~16 min)"
    )
    args = parser.parse_args()
    ensure_database()
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from planner.services import scenario_create
    from tests.factories import scenario_data

    call_command("migrate", verbosity=0)
    call_command("load_catalog", verbosity=0)
    settings.SIZING_SIMULATE_TAILS = True  # as in production: each snapshot carries it
    user, _ = get_user_model().objects.get_or_create(username="bench")
    typical = scenario_create(owner=user, data=scenario_data(**TYPICAL))
    sweep = scenario_create(owner=user, data=scenario_data(name="sweep", **SWEEP))
    out: dict = {}

    def typical_job():
        clear_cache()  # the warm-up simulates, so every worker has loaded the compiled loops
        time_run(typical)  # warm-up: imports, connections, the compiled loops
        return {
            "cold": measure(typical, args.repeats, cold=True),
            "warm": measure(typical, args.repeats, cold=False),
        }

    def memo_job():
        clear_cache()  # so the warm-up simulates: the workers compute and keep step times
        time_run(typical)
        return {"cold": measure(typical, args.repeats, cold=True)}

    # cold: workers keep no step times between searches (SIZING_STEP_MEMO_MB=0), so every
    # run computes them anew, as a worker seeing these candidates for the first time does
    with memo(0):
        out["typical_1_worker"] = with_workers(1, typical_job)
        out["typical_4_workers"] = with_workers(4, typical_job)
    # the same cold simulation cache, with the workers' step-time memo on (1024 MB) and warm
    # from an earlier run of the same candidates: a rerun, or another traffic on them
    with memo(1024):
        out["typical_1_worker_memo"] = with_workers(1, memo_job)
        out["typical_4_workers_memo"] = with_workers(4, memo_job)

    def sweep_job():
        clear_cache()  # warm-up on the typical scenario: long-lived workers, loaded loops
        time_run(typical)
        return measure(sweep, 1, cold=True)

    if not args.typical_only:
        out["sweep_2_workers"] = with_workers(2, sweep_job)
        out["sweep_1_worker"] = with_workers(1, sweep_job)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for key in ("typical_1_worker", "typical_4_workers", "typical_1_worker_memo",
                "typical_4_workers_memo"):  # fmt: skip
        for kind in ("cold", "warm"):
            if kind not in out[key]:
                continue
            t = out[key][kind]
            memo_note = ", step-time memo warm" if key.endswith("_memo") else ""
            workers = key.split("_")[1]
            print(
                f"typical scenario ({t['candidates']} candidates, tails on, {kind} cache"
                f"{memo_note}), {workers} worker(s): median {t['median_s']:.2f} s, "
                f"max {t['max_s']:.2f} s over {t['runs']} runs, "
                f"{t['simulated_per_run']:.0f} simulated per run"
            )
    for key in ("sweep_1_worker", "sweep_2_workers"):
        if key not in out:
            continue
        t = out[key]
        print(
            f"sweep ({t['candidates']} candidates, tails on, cold cache), "
            f"{key.split('_', 1)[1].replace('_', ' ')}: {t['median_s']:.2f} s, "
            f"{t['simulated_per_run']:.0f} simulated"
        )
    cold1 = out["typical_1_worker"]["cold"]["median_s"]
    cold4 = out["typical_4_workers"]["cold"]["median_s"]
    print(f"typical speed-up 1 -> 4 workers (cold): {cold1 / cold4:.2f}x")


if __name__ == "__main__":
    main()
