"""Numbers for humans: the template filters the pages (and the lead's cards) use."""

import pytest

from planner.templatetags.headroom import count, num, si, usd


@pytest.mark.parametrize(
    "value, text",
    [
        (10.93e9, "10.9 B"),
        (61e9, "61 B"),
        (1.2e12, "1.2 T"),
        (24051.3, "24.1 k"),
        (999_999, "1 M"),  # 999.999 k rounds to 3 digits as 1 M, not "1e+03 k"
        (512, "512"),
        (0.5, "0.5"),
        (None, "—"),
        ("n/a", "—"),
        (float("inf"), "—"),
    ],
)
def test_si(value, text):
    assert si(value) == text


@pytest.mark.parametrize(
    "value, noun, text",
    [
        (1, "replica", "1 replica"),
        (2, "replica", "2 replicas"),
        (407_952, "GPU", "407,952 GPUs"),
        (1.0, "node", "1 node"),
        (0, "node", "0 nodes"),
        (3, "family", "3 families"),
        (None, "GPU", "—"),
    ],
)
def test_count(value, noun, text):
    assert count(value, noun) == text


def test_money_and_plain_numbers():
    assert usd(980.4e6) == "$980 M"
    assert usd(24051.3) == "$24,051"
    assert usd(26.756) == "$26.76"
    assert usd(0.01234) == "$0.0123"
    assert num(407952) == "407,952"


def test_run_page_uses_them(client, catalog):
    from planner.services import sizing_run_start
    from tests.factories import UserFactory, make_scenario

    owner = UserFactory(username="counts")
    scenario = make_scenario(owner, models=["Llama-3.1-8B-Instruct"], gpus=["H100"])
    run = sizing_run_start(scenario=scenario)
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"{run.candidate_count} candidates" in page
    assert f"{run.candidate_count} candidates sized" in page
