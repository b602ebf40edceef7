"""Compare shows numbers with deltas ($/month, GPUs, p95, %), not only highlights."""

import pytest

from planner.compare import delta, delta_rows
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db


def test_delta_rows_against_the_first_column():
    # given two runs: $24,000 -> $30,000/month, 8 -> 12 GPUs, p95 TPOT 40 -> 30 ms
    base = {"Best: $/month": (24000.0, "usd"), "Best: GPUs": (8, "count"), "p95": (40.0, "ms")}
    other = {"Best: $/month": (30000.0, "usd"), "Best: GPUs": (12, "count"), "p95": (30.0, "ms")}
    rows = {r["label"]: r["cells"] for r in delta_rows([base, other])}
    # then +$6,000 is +25%, +4 GPUs is +50%, -10 ms is -25%
    assert rows["Best: $/month"][1] == {
        "value": "$30,000",
        "delta": "+$6,000",
        "pct": "+25.0%",
        "direction": "up",
    }
    assert (rows["Best: GPUs"][1]["delta"], rows["Best: GPUs"][1]["pct"]) == ("+4", "+50.0%")
    assert (rows["p95"][1]["delta"], rows["p95"][1]["pct"]) == ("−10", "−25.0%")
    assert rows["p95"][0]["delta"] == ""  # the base column has no delta
    assert delta(None, 3.0) == (None, None)


def test_compare_page_shows_the_deltas(owner_client, owner, catalog):
    small = make_scenario(owner, name="Small", models=["llama-3.1-8b"], gpus=["H100"])
    big = make_scenario(owner, name="Big", models=["llama-3.1-8b"], gpus=["H100"], peak_rps=80.0)
    runs = [sizing_run_start(scenario=s) for s in (small, big)]
    response = owner_client.get(f"/compare/?run={runs[0].pk}&run={runs[1].pk}")
    assert response.status_code == 200
    rows = {r["label"]: r["cells"] for r in response.context["deltas"]}
    cost = rows["Best: $/month"]
    base = runs[0].summary["per_gpu"][0]["usd_per_month"]
    more = runs[1].summary["per_gpu"][0]["usd_per_month"]
    assert more > base
    assert cost[1]["pct"] == f"{(more - base) / base:+.1%}"
    assert cost[1]["delta"].startswith("+$")
    page = response.content.decode()
    assert 'id="delta-table"' in page and cost[1]["pct"] in page
