"""Scenario list filters on every supported database: a bad date is a 400 naming the field, the
tag filter works without PostgreSQL's JSON containment. ``test_filters_on_sqlite`` re-runs this
file on SQLite so both databases are covered in one suite run."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.factories import make_scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["2026-13-01", "2026-02-30", "2026-01-01T25:00", "soon"])
def test_an_impossible_updated_since_is_a_400_naming_the_field(api, value):
    answer = api.get("/api/v1/scenarios/", {"updated_since": value})
    assert answer.status_code == 400
    assert "updated_since" in answer.json()["errors"]


def test_the_tag_filter_finds_exactly_the_tagged_scenarios(api, user, catalog):
    tagged = make_scenario(owner=user, name="tagged", tags=["chat", "prod"])
    make_scenario(owner=user, name="other", tags=["batch"])
    make_scenario(owner=user, name="untagged", tags=[])
    answer = api.get("/api/v1/scenarios/", {"tag": "prod"})
    assert answer.status_code == 200, answer.content
    assert [row["id"] for row in answer.json()["results"]] == [tagged.pk]
    assert api.get("/api/v1/scenarios/", {"tag": "none"}).json()["results"] == []


@pytest.mark.skipif(
    os.environ.get("HEADROOM_FILTERS_ON_SQLITE") == "1", reason="already the SQLite run"
)
def test_filters_on_sqlite(tmp_path):
    if connection.vendor == "sqlite":
        pytest.skip("this suite run is on SQLite already")
    env = os.environ | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'filters.sqlite3'}",
        "HEADROOM_FILTERS_ON_SQLITE": "1",
        "REQUIRE_SERVICES": "",  # the sub-run is SQLite on purpose (CI sets it to 1)
    }
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "5 passed" in out.stdout, out.stdout[-500:]
