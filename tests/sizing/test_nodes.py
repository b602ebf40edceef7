"""Packing replicas into nodes with N+k spares by failure domain (sizing.nodes).

Every expected number is derived by hand in the comment beside it.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sizing.nodes import node_steps, pack_nodes


def test_tp2_on_eight_gpu_nodes_with_one_spare_node():
    # given 13 serving + 1 spare replica of 2 GPUs on 8-GPU nodes, k = 1
    p = pack_nodes(13, 14, 2, 8, spare_nodes=1)
    # then r = floor(8/2) = 4 per node; ceil(14/4) = 4 nodes + 1 spare = 5 nodes
    assert (p.replicas_per_node, p.nodes_per_replica, p.nodes) == (4, 1, 5)
    # 5 x 8 = 40 GPUs billed, 14 x 2 = 28 in replicas -> 12 idle; 20 slots, 7 beyond serving
    assert (p.gpus_billed, p.idle_gpus, p.replica_slots, p.spare_replica_slots) == (40, 12, 20, 7)
    # the worst node down leaves (5 - 1) x 4 = 16 >= 13
    assert p.surviving_replicas == 16


def test_one_spare_node_of_eight_tp1_replicas_is_eight_slots_not_one_replica():
    # given 16 serving TP1 replicas on 8-GPU nodes: 2 full nodes
    without = pack_nodes(16, 16, 1, 8, spare_nodes=0)
    with_k = pack_nodes(16, 16, 1, 8, spare_nodes=1)
    # then k = 1 adds a whole node (8 GPUs), so losing any node still leaves 16
    assert (without.nodes, with_k.nodes) == (2, 3)
    assert with_k.gpus_billed - without.gpus_billed == 8
    assert with_k.surviving_replicas == 16
    # while without it one node down would leave (2 - 1) x 8 = 8 < 16
    assert pack_nodes(16, 16, 1, 8, spare_nodes=0).replicas_per_node * (without.nodes - 1) == 8


def test_a_replica_larger_than_a_node_spans_whole_nodes():
    # given TP8 x PP2 = 16 GPUs on 8-GPU nodes: m = ceil(16/8) = 2 nodes per replica
    p = pack_nodes(3, 3, 16, 8, spare_nodes=1)
    # then one node down kills one replica: (3 + 1) x 2 = 8 nodes, 64 GPUs, 16 idle
    assert (p.replicas_per_node, p.nodes_per_replica, p.nodes) == (0, 2, 8)
    assert (p.gpus_billed, p.idle_gpus) == (64, 16)
    # floor(8/2) - 1 = 3 replicas survive
    assert p.surviving_replicas == 3


def test_leftover_gpus_when_the_replica_does_not_divide_the_node():
    # given TP4 on a 6-GPU node (H100 NVL 6x): r = floor(6/4) = 1, 2 GPUs per node idle
    p = pack_nodes(3, 3, 4, 6)
    assert (p.replicas_per_node, p.nodes, p.idle_gpus) == (1, 3, 6)


def test_no_traffic_needs_no_node_and_vectors_work():
    p = pack_nodes(np.array([0, 5]), np.array([0, 6]), np.array([1, 4]), np.array([8, 8]), 2)
    # [0 replicas -> 0 nodes; 6 TP4 replicas: r = 2, ceil(6/2) + 2 = 5 nodes]
    assert p.nodes.tolist() == [0, 5]


def test_steps_show_each_number_with_its_inputs():
    p = pack_nodes(13, 14, 2, 8, spare_nodes=1)
    steps = {s.name: s for s in node_steps(p)}
    assert steps["replicas_per_node"].value == 4
    assert steps["nodes"].formula == "ceil(replicas / replicas_per_node) + spare_nodes"
    assert [i.value for i in steps["nodes"].inputs] == [14, 4, 1]
    assert steps["gpus_billed"].value == 40 and steps["idle_gpus"].value == 12
    survive = steps["surviving_replicas"]
    assert (survive.value, survive.unit) == (16, "replicas")
    spanning = {s.name: s for s in node_steps(pack_nodes(3, 3, 16, 8, 1))}
    assert spanning["nodes_per_replica"].value == 2 and spanning["nodes"].value == 8


@given(
    serving=st.integers(0, 500),
    extra=st.integers(0, 20),
    g=st.sampled_from([1, 2, 4, 8, 16, 32]),
    gpn=st.sampled_from([1, 2, 4, 6, 8, 72]),
    k=st.integers(0, 4),
)
def test_law_the_serving_replicas_survive_the_worst_k_nodes_down(serving, extra, g, gpn, k):
    total = serving + extra
    p = pack_nodes(serving, total, g, gpn, k)
    if total == 0:
        assert p.nodes == 0
        return
    # the replica slots left on the surviving nodes (replicas restart there) cover serving:
    # drop the k nodes that hold the most slots
    if g <= gpn:
        slots = [gpn // g] * int(p.nodes)
        left = sum(sorted(slots)[: max(len(slots) - k, 0)])
    else:
        m = -(-g // gpn)
        assert p.nodes % m == 0
        left = int(p.nodes) // m - k  # each lost node kills at most one replica
    assert left >= serving
    assert p.surviving_replicas >= serving
    assert p.gpus_billed >= total * g and p.idle_gpus >= 0
    assert p.gpus_billed == pytest.approx(p.nodes * gpn)
