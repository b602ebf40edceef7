"""Server render time of every UI page with a 50-candidate result (target < 300 ms each).

    python bench/pages.py [--repeat 20] [--json]

Creates a throwaway test database (test_<name> on PostgreSQL when DATABASE_URL points there,
in-memory SQLite otherwise), loads the catalog, sizes a 50-candidate scenario with a 24-hour
profile (so every chart renders), then times each page with Django's test client: median and
max of ``--repeat`` renders after two warm-ups, in milliseconds. Not a test: a benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

TARGET_MS = 300.0
HOURLY = [8, 6, 5, 5, 5, 6, 8, 12, 16, 18, 20, 20, 19, 20, 20, 19, 18, 16, 14, 13, 12, 11, 10, 9]
SCENARIO = {
    "name": "Benchmark: 5 models x 5 GPUs x TP 2/4",
    "tags": ["bench"],
    "peak_rps": 20.0,
    "mean_rps": sum(HOURLY) / 24,
    "hourly_rps": [float(v) for v in HOURLY],
    "prompt_tokens_mean": 1000,
    "prompt_tokens_p95": 3000,
    "output_tokens_mean": 300,
    "output_tokens_p95": 800,
    "ttft_ms": 2000,
    "tpot_ms": 50,
    "models": ["llama-3.1-70b", "llama-3.1-8b", "qwen3-32b", "qwen3-8b", "mistral-7b-v0.3"],
    "gpus": ["H100", "H200", "B200", "L40S", "MI300X"],
    "precisions": ["fp8"],
    "tp_options": [2, 4],
    "api_input_usd_per_mtok": 0.6,
    "api_output_usd_per_mtok": 1.8,
}


def populate():
    from planner import services
    from tests.factories import UserFactory

    call_command("load_catalog", verbosity=0)
    user = UserFactory(username="bench")
    scenario = services.scenario_create(owner=user, data=SCENARIO)
    run = services.sizing_run_start(scenario=scenario)
    other = services.scenario_create(owner=user, data={**SCENARIO, "name": "B", "peak_rps": 40.0})
    services.sizing_run_start(scenario=other)
    _, token = services.share_link_create(user=user, scenario=scenario, run=run)
    chain = run.results.filter(fits=True).order_by("-rank").first()
    return user, scenario, other, run, token, chain


def time_pages(repeat: int) -> list[dict]:
    user, scenario, other, run, token, chain = populate()
    client = Client()
    client.force_login(user)
    anonymous = Client()
    pages = [
        ("home", client, "/", {}),
        ("scenario list", client, "/scenarios/", {}),
        ("scenario form (new)", client, "/scenarios/new/", {}),
        ("scenario form (preset)", client, "/scenarios/new/?preset=chat-llama70b", {}),
        ("scenario form (edit)", client, f"/scenarios/{scenario.pk}/edit/", {}),
        ("scenario detail", client, f"/scenarios/{scenario.pk}/", {}),
        ("results", client, f"/runs/{run.pk}/", {}),
        ("results + chain of another option", client, f"/runs/{run.pk}/?chain={chain.pk}", {}),
        (
            "progress partial (finished)",
            client,
            f"/runs/{run.pk}/progress/",
            {"HTTP_HX_REQUEST": "true"},
        ),
        (
            "compare two scenarios",
            client,
            f"/compare/?scenario={scenario.pk}&scenario={other.pk}",
            {},
        ),
        ("shared link (anonymous)", anonymous, f"/s/{token}/", {}),
        ("API token", client, "/accounts/token/", {}),
        ("CSV download", client, f"/runs/{run.pk}/export.csv", {}),
        ("XLSX download", client, f"/runs/{run.pk}/export.xlsx", {}),
        ("sign in", anonymous, "/accounts/login/", {}),
    ]
    rows = []
    for name, who, url, headers in pages:
        samples = []
        for i in range(repeat + 2):
            start = time.perf_counter()
            response = who.get(url, **headers)
            body = response.getvalue()  # a streamed download is timed until its last byte
            elapsed = (time.perf_counter() - start) * 1e3
            if response.status_code != 200:
                raise SystemExit(f"{url} answered {response.status_code}")
            if i >= 2:
                samples.append(elapsed)
        rows.append(
            {
                "page": name,
                "url": url,
                "median_ms": round(statistics.median(samples), 1),
                "max_ms": round(max(samples), 1),
                "bytes": len(body),
            }
        )
    return rows, run.candidate_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    setup_test_environment()
    settings.DEBUG = False
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        rows, candidates = time_pages(args.repeat)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    if args.json:
        print(json.dumps({"candidates": candidates, "pages": rows}, indent=2))
        return
    print(f"database: {connection.vendor}; run with {candidates} candidates; {args.repeat} renders")
    print(f"{'page':38} {'median ms':>10} {'max ms':>8} {'KB':>7}")
    for row in rows:
        flag = "" if row["median_ms"] < TARGET_MS else "  OVER TARGET"
        print(
            f"{row['page']:38} {row['median_ms']:>10.1f} {row['max_ms']:>8.1f} "
            f"{row['bytes'] / 1024:>7.1f}{flag}"
        )
    worst = max(rows, key=lambda r: r["median_ms"])
    print(f"slowest: {worst['page']} {worst['median_ms']} ms (target < {TARGET_MS:.0f} ms)")


if __name__ == "__main__":
    main()
