"""Nodes of a sized row from the run's inputs: the instance's GPU count, the policy's k."""

import pytest

from planner import runner
from planner.packing import node_fields
from planner.services import build_inputs_snapshot
from pricing.models import PriceSheet
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db


def test_rows_pack_into_the_priced_instance_with_spare_nodes(catalog):
    # given Llama 8B on L40S at TP1 and TP2, one spare node; L40S is priced from AWS
    # g6e.12xlarge (4 GPUs per instance)
    scenario = make_scenario(
        models=["Llama-3.1-8B-Instruct"], gpus=["L40S"], tp_options=[1, 2], spare_nodes=1
    )
    assert scenario.spare_nodes == 1
    inputs = build_inputs_snapshot(scenario, PriceSheet.objects.get())
    assert inputs["policy"]["spare_nodes"] == 1
    sized = runner.size_candidates(inputs, range(len(inputs["candidates"])))
    rows = [r for r in sized if r["fits"] and r["mode"] == "agg"]
    assert rows
    # a disaggregated row packs each pool into its own nodes, each pool with the spare node
    for row in (r for r in sized if r["fits"] and r["mode"] == "disagg"):
        pools = row["derivation"]["pools"]
        nodes = node_fields(inputs, row)
        expected = sum(-(-p["workers"] // (4 // p["tp"])) + 1 for p in pools.values())
        assert nodes["nodes"] == expected
    for row in rows:
        nodes = node_fields(inputs, row)
        g, replicas = row["gpus_per_replica"], row["replicas"]
        # then r = floor(4 / g), nodes = ceil(replicas / r) + 1, billed = nodes x 4
        per_node = 4 // g
        assert nodes["gpus_per_node"] == 4 and nodes["replicas_per_node"] == per_node
        assert nodes["nodes"] == -(-replicas // per_node) + 1
        assert nodes["gpus_billed"] == nodes["nodes"] * 4
        assert nodes["idle_gpus"] == nodes["gpus_billed"] - replicas * g
        assert [s["name"] for s in nodes["steps"]][:2] == ["replicas_per_node", "nodes"]
