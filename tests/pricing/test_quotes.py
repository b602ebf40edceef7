"""Which price a replica pays: instance shapes, provider, custom prices, discount, fallback.

The expected prices are read off pricing/catalog/prices.csv by hand.
"""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from planner import runner
from planner import snapshot as snap
from planner.services import build_inputs_snapshot, scenario_update
from pricing.models import GpuHourPrice, PriceSheet
from pricing.quotes import PriceRow, label, pick_row, resolve_quote
from tests.factories import make_scenario

ROW = dict(region="", as_of="2026-11-29", source="s")


def _row(provider, gpus, usd, tier="on_demand"):
    return PriceRow(
        "h100", provider, f"{gpus or '?'}x", gpus, tier=tier, usd_per_gpu_hour=usd, **ROW
    )


def test_a_replica_is_priced_only_from_instances_that_hold_it():
    # given a cheap 1-GPU box, a dearer 8-GPU box and an unshaped per-GPU row
    rows = [_row("One", 1, 3.0), _row("Eight", 8, 4.0), _row("Loose", None, 3.5)]
    # then TP1 takes the 1-GPU box, TP2..8 the 8-GPU box, TP16 only the unshaped row
    assert pick_row(rows, tier="on_demand", replica_gpus=1).provider == "One"
    assert pick_row(rows, tier="on_demand", replica_gpus=2).provider == "Eight"
    assert pick_row(rows, tier="on_demand", replica_gpus=8).provider == "Eight"
    assert pick_row(rows, tier="on_demand", replica_gpus=16).provider == "Loose"
    # and a provider filter is case-insensitive and never switches provider silently
    assert pick_row(rows, tier="on_demand", replica_gpus=1, provider="eight").usd_per_gpu_hour == 4
    assert pick_row(rows, tier="on_demand", replica_gpus=1, provider="Nobody") is None
    assert pick_row(rows, tier="spot", replica_gpus=1) is None


def test_discount_applies_to_on_demand_and_fallback_says_so():
    rows = [_row("Eight", 8, 4.0), _row("Eight", 8, 2.5, tier="reserved")]
    common = dict(tier="reserved", replica_gpus=8, sheet_label="Mine v1", reference_label="Ref v2")
    # reserved without a discount: the sheet's reserved row
    quote = resolve_quote(custom_usd=None, sheet_rows=rows, reference_rows=None, **common)
    assert quote.usd_per_gpu_hour == 2.5 and quote.note == ""
    # reserved with 30 % off: 4.0 x 0.7 = 2.8, and the note says how
    quote = resolve_quote(
        custom_usd=None, sheet_rows=rows, reference_rows=None, reserved_discount=0.3, **common
    )
    assert quote.usd_per_gpu_hour == pytest.approx(2.8)
    assert "on-demand $4/GPU-h less the 30% committed-term discount" in quote.note
    # a sheet without the GPU falls back to the reference rows and says so
    quote = resolve_quote(custom_usd=None, sheet_rows=[], reference_rows=rows, **common)
    assert quote.usd_per_gpu_hour == 2.5
    assert quote.note == "not on Mine v1: price from the reference sheet Ref v2"
    assert label(quote.as_dict()).endswith("reference sheet")
    # a custom price wins and is dated
    quote = resolve_quote(
        custom_usd=2.0,
        sheet_rows=rows,
        reference_rows=rows,
        today=dt.date(2026, 12, 1),
        scenario_name="S",
        **common,
    )
    assert (quote.usd_per_gpu_hour, quote.provider, quote.as_of) == (2.0, "custom", "2026-12-01")


@pytest.mark.django_db
def test_snapshot_prices_each_replica_size_with_its_source(catalog):
    # given H100 (SXM) with TP1 and TP8 candidates, cheapest provider, on-demand
    scenario = make_scenario(models=["Llama-3.1-8B-Instruct"], gpus=["H100"], tp_options=[1, 8])
    inputs = build_inputs_snapshot(scenario, PriceSheet.objects.get())
    gpu = inputs["gpus"]["h100_sxm"]
    # then TP1 pays RunPod's 1-GPU $3.29 and TP8 Lambda's 8-GPU $3.99 (the cheapest 8-GPU box;
    # RunPod's 1x and Lambda's 1x cannot hold eight GPUs)
    one, eight = gpu["prices_by_replica_gpus"]["1"], gpu["prices_by_replica_gpus"]["8"]
    assert (one["provider"], one["usd_per_gpu_hour"], one["gpus_per_instance"]) == (
        "RunPod",
        3.29,
        1,
    )
    assert (eight["provider"], eight["usd_per_gpu_hour"], eight["gpus_per_instance"]) == (
        "Lambda",
        3.99,
        8,
    )
    assert eight["instance"] == "H100 SXM 80GB (gpu_8x_h100_sxm5)"
    assert eight["as_of"] == "2026-11-29" and "skypilot" in eight["source"]
    assert gpu["price_source"] == one and gpu["usd_per_gpu_hour"] == 3.29
    # and the sized rows pay the price of their own size
    assert snap.gpu_price(inputs, "h100_sxm", 8) == (3.99, eight)
    assert snap.gpus_per_node(inputs, "h100_sxm", 8) == 8
    assert snap.gpus_per_node(inputs, "h100_sxm", 1) == 1
    rows = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    for row in rows:
        if row["fits"] and row["usd_per_hour"] and row["mode"] == "disagg":
            # the pools rent whole nodes: every GPU at the 8-GPU box's price
            assert row["usd_per_hour"] == pytest.approx(row["gpus"] * 3.99)
        elif row["fits"] and row["usd_per_hour"]:
            rate = {1: 3.29, 8: 3.99}[row["gpus_per_replica"]]
            assert row["usd_per_hour"] == pytest.approx(row["replicas"] * row["tp"] * rate)


@pytest.mark.django_db
def test_custom_price_provider_and_discount_reach_the_snapshot(catalog):
    # given a scenario with its own H100 price, AWS as provider, reserved with 25 % off
    scenario = make_scenario(
        gpus=["H100", "H200", "L40S"],
        tier="reserved",
        gpu_prices={"H100": 2.5},
        price_provider="aws",
        reserved_discount=0.25,
        tp_options=[4],
        models=["Llama-3.1-70B-Instruct"],
    )
    assert scenario.gpu_prices == {"h100_sxm": 2.5} and scenario.price_provider == "AWS"
    inputs = build_inputs_snapshot(scenario, PriceSheet.objects.get())
    h100 = inputs["gpus"]["h100_sxm"]["price_source"]
    h200 = inputs["gpus"]["h200_sxm"]["price_source"]
    l40s = inputs["gpus"]["l40s"]["price_source"]
    # then H100 is the custom price, H200 AWS p5en on-demand 7.912 x 0.75 = 5.934,
    # L40S the 4-GPU g6e.12xlarge 2.6232 x 0.75 = 1.9674 (it holds a TP4 replica)
    assert (h100["provider"], h100["usd_per_gpu_hour"]) == ("custom", 2.5)
    assert (h200["provider"], h200["usd_per_gpu_hour"]) == ("AWS", pytest.approx(5.934))
    assert h200["instance"] == "H200 141GB (p5en.48xlarge, 8 GPU)"
    assert l40s["usd_per_gpu_hour"] == pytest.approx(1.9674) and l40s["gpus_per_instance"] == 4
    assert inputs["pricing"] == {
        "provider": "AWS",
        "reserved_discount": 0.25,
        "gpu_prices": {"h100_sxm": 2.5},
    }


@pytest.mark.django_db
def test_a_staff_sheet_without_a_gpu_falls_back_per_gpu(catalog):
    # given a staff sheet with only an H100 price
    staff = PriceSheet.objects.create(
        name="Staff", effective_date="2026-12-01", source="negotiated", as_of="2026-12-01"
    )
    GpuHourPrice.objects.create(
        sheet=staff,
        provider="Acme",
        source="contract 42",
        as_of="2026-12-01",
        gpu_slug="h100_sxm",
        item="8x H100",
        gpus_per_instance=8,
        tier="on_demand",
        usd_per_gpu_hour=2.0,
    )
    scenario = make_scenario(gpus=["H100", "H200"], models=["Llama-3.1-8B-Instruct"])
    inputs = build_inputs_snapshot(scenario, staff)
    # then H100 is priced from it, H200 from the reference sheet, and the run says so
    assert inputs["gpus"]["h100_sxm"]["price_source"]["provider"] == "Acme"
    h200 = inputs["gpus"]["h200_sxm"]["price_source"]
    assert h200["usd_per_gpu_hour"] == 7.912 and "reference sheet" in h200["note"]
    assert inputs["gpus_without_price"] == []
    assert inputs["price_notes"] == [
        "H200 SXM: not on Staff v1: price from the reference sheet Reference public prices v1"
    ]


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        ({"gpu_prices": {"TPU v9": 2}}, "gpu_prices", "unknown GPU 'TPU v9'"),
        ({"gpu_prices": {"H100": 0}}, "gpu_prices", "H100: 0 is not a price between 0 and"),
        ({"gpu_prices": {"H100": "cheap"}}, "gpu_prices", "is not a price"),
        ({"gpu_prices": {"H100": True}}, "gpu_prices", "is not a price"),
        ({"gpu_prices": [2.5]}, "gpu_prices", "must be an object"),
        ({"price_provider": "Nimbus"}, "price_provider", "no GPU prices from 'Nimbus'"),
        ({"reserved_discount": 0.3}, "reserved_discount", "applies to tier reserved only"),
        (
            {"reserved_discount": 1.5, "tier": "reserved"},
            "reserved_discount",
            "not a fraction from 0 to 0.95",
        ),
    ],
)
@pytest.mark.django_db
def test_bad_pricing_names_the_field(catalog, overrides, field, fragment):
    with pytest.raises(ValidationError) as error:
        make_scenario(**overrides)
    errors = error.value.message_dict
    assert any(fragment in m for m in errors.get(field, [])), errors


@pytest.mark.django_db
def test_cheapest_is_blank_and_update_keeps_prices(catalog):
    scenario = make_scenario(price_provider="Cheapest", gpu_prices={"H200": 3})
    assert scenario.price_provider == ""
    scenario = scenario_update(scenario=scenario, data={"peak_rps": 30})
    assert scenario.gpu_prices == {"h200_sxm": 3.0}
