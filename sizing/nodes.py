"""What to buy: pack replicas into nodes, with N+k spares by failure domain.

A node (one instance: the unit a provider rents and a failure takes down) holds
``gpus_per_node`` GPUs. A replica never straddles nodes when it fits in one (tensor
parallelism needs the node's scale-up link), so a node holds
``replicas_per_node = floor(gpus_per_node / gpus_per_replica)`` replicas; a replica larger than a
node spans ``nodes_per_replica = ceil(gpus_per_replica / gpus_per_node)`` whole nodes
(pipeline stages across nodes).

N+k by failure domain: ``policy.spare_nodes = k`` means the serving replicas must survive
``k`` whole nodes down. Losing a node loses every replica on it, so with replicas packed
``r`` per node the fleet needs ``k`` extra nodes (``k * r`` replica slots), not ``k``
replicas — one spare TP1 replica does not cover a lost node of eight. When a replica spans
``m`` nodes, one node down takes one replica down, so ``k`` more replicas (``k * m`` nodes)
are needed. Spare nodes are capacity held for the replicas of a lost node to restart on
(or to run extra replicas active-active); the law the tests check is that the replica slots
left after the worst ``k`` nodes fail still hold every serving replica.

Worked example (the numbers the tests use): 13 serving + 1 spare replica of TP2 on 8-GPU nodes
with ``k = 1``: ``r = floor(8 / 2) = 4``, nodes for the 14 replicas ``ceil(14 / 4) = 4``, plus
1 spare node = 5 nodes = 40 GPUs billed for 28 GPUs of replicas; 5 x 4 = 20 replica slots,
``(5 - 1) x 4 = 16 >= 13`` serving replicas survive the worst node lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.derivation import Step, q, step


@dataclass(frozen=True)
class NodePacking:
    """Arrays over candidates (or scalars); counts are floats so inf marks "cannot size".

    Attributes
    ----------
    gpus_per_node, gpus_per_replica : GPUs.
    replicas_per_node : replicas one node holds (0 when a replica spans nodes).
    nodes_per_replica : nodes one replica spans (1 when it fits in a node).
    replicas : replicas placed, serving + spare + warm (replicas).
    serving_replicas : replicas that must stay up (replicas).
    spare_nodes : k, the failure domains the fleet survives losing (nodes).
    nodes : nodes to buy, N + k (nodes).
    replica_slots : replicas the nodes could hold (replicas).
    spare_replica_slots : slots beyond the serving replicas (replicas): the spare capacity.
    idle_gpus : GPUs billed that run no replica (GPUs).
    gpus_billed : ``nodes * gpus_per_node`` (GPUs).
    surviving_replicas : serving capacity with the worst k nodes down (replicas).
    """

    gpus_per_node: np.ndarray
    gpus_per_replica: np.ndarray
    replicas_per_node: np.ndarray
    nodes_per_replica: np.ndarray
    replicas: np.ndarray
    serving_replicas: np.ndarray
    spare_nodes: np.ndarray
    nodes: np.ndarray
    replica_slots: np.ndarray
    spare_replica_slots: np.ndarray
    idle_gpus: np.ndarray
    gpus_billed: np.ndarray
    surviving_replicas: np.ndarray


def pack_nodes(
    serving_replicas,
    replicas,
    gpus_per_replica,
    gpus_per_node,
    spare_nodes=0,
) -> NodePacking:
    """Pack ``replicas`` (serving + spare + warm) into nodes and add N+k spare nodes.

    Parameters
    ----------
    serving_replicas : replicas that carry the peak within the SLO (replicas, >= 0).
    replicas : all replicas to place, serving + spare + warm pool (replicas, >= serving).
    gpus_per_replica : GPUs of one replica, tp x pp x dp (GPUs, >= 1).
    gpus_per_node : GPUs of one node or instance (GPUs, >= 1).
    spare_nodes : k whole nodes the serving replicas must survive losing (nodes, >= 0).

    Returns
    -------
    NodePacking
        With ``r = floor(G / g)`` replicas per node (``G`` GPUs per node, ``g`` per replica):
        ``nodes = ceil(replicas / r) + k``; if ``g > G`` a replica spans
        ``m = ceil(g / G)`` nodes and ``nodes = (replicas + k) * m``.

    Examples
    --------
    >>> p = pack_nodes(13, 14, 2, 8, spare_nodes=1)
    >>> int(p.replicas_per_node), int(p.nodes), int(p.gpus_billed), int(p.idle_gpus)
    (4, 5, 40, 12)
    >>> int(p.surviving_replicas)
    16
    """
    serving = np.asarray(serving_replicas, dtype=np.float64)
    total = np.asarray(replicas, dtype=np.float64)
    g = np.maximum(np.asarray(gpus_per_replica, dtype=np.float64), 1.0)
    gpn = np.maximum(np.asarray(gpus_per_node, dtype=np.float64), 1.0)
    k = np.asarray(spare_nodes, dtype=np.float64)
    fits_node = g <= gpn
    per_node = np.where(fits_node, np.floor(gpn / g), 0.0)
    span = np.where(fits_node, 1.0, np.ceil(g / gpn))
    with np.errstate(divide="ignore", invalid="ignore"):
        packed = np.where(fits_node, np.ceil(total / np.maximum(per_node, 1.0) - 1e-9) + k, 0.0)
    spanned = (total + k) * span
    nodes = np.where(total > 0, np.where(fits_node, packed, spanned), 0.0)
    slots = np.where(fits_node, nodes * per_node, np.floor(nodes / span))
    surviving = np.where(fits_node, (nodes - k) * per_node, np.floor(nodes / span) - k)
    billed = nodes * gpn
    return NodePacking(
        gpus_per_node=gpn,
        gpus_per_replica=g,
        replicas_per_node=per_node,
        nodes_per_replica=span,
        replicas=total,
        serving_replicas=serving,
        spare_nodes=k,
        nodes=nodes,
        replica_slots=slots,
        spare_replica_slots=slots - serving,
        idle_gpus=billed - total * g,
        gpus_billed=billed,
        surviving_replicas=surviving,
    )


def _at(array, i: int | None) -> float:
    values = np.asarray(array, dtype=np.float64)
    return float(values if values.ndim == 0 else values[i])


def node_steps(p: NodePacking, i: int | None = None) -> list[Step]:
    """The derivation of candidate ``i`` (None for scalar packings), one step per number."""
    v = {name: _at(getattr(p, name), i) for name in NodePacking.__dataclass_fields__}
    spans = v["nodes_per_replica"] > 1
    steps = [
        step(
            "nodes_per_replica" if spans else "replicas_per_node",
            "ceil(gpus_per_replica / gpus_per_node)"
            if spans
            else "floor(gpus_per_node / gpus_per_replica)",
            [
                q("gpus_per_node", v["gpus_per_node"], "GPUs"),
                q("gpus_per_replica", v["gpus_per_replica"], "GPUs"),
            ],
            v["nodes_per_replica"] if spans else v["replicas_per_node"],
            "nodes" if spans else "replicas",
            "a replica spans whole nodes (pipeline stages across nodes)"
            if spans
            else "a replica never straddles nodes",
        ),
        step(
            "nodes",
            "(replicas + spare_nodes) * nodes_per_replica"
            if spans
            else "ceil(replicas / replicas_per_node) + spare_nodes",
            [
                q("replicas", v["replicas"], "replicas"),
                q("replicas_per_node", v["replicas_per_node"], "replicas")
                if not spans
                else q("nodes_per_replica", v["nodes_per_replica"], "nodes"),
                q("spare_nodes", v["spare_nodes"], "nodes"),
            ],
            v["nodes"],
            "nodes",
            "N+k by failure domain: the serving replicas survive spare_nodes nodes down",
        ),
        step(
            "gpus_billed",
            "nodes * gpus_per_node",
            [q("nodes", v["nodes"], "nodes"), q("gpus_per_node", v["gpus_per_node"], "GPUs")],
            v["gpus_billed"],
            "GPUs",
        ),
        step(
            "idle_gpus",
            "gpus_billed - replicas * gpus_per_replica",
            [
                q("gpus_billed", v["gpus_billed"], "GPUs"),
                q("replicas", v["replicas"], "replicas"),
                q("gpus_per_replica", v["gpus_per_replica"], "GPUs"),
            ],
            v["idle_gpus"],
            "GPUs",
        ),
        step(
            "surviving_replicas",
            "floor(nodes / nodes_per_replica) - spare_nodes"
            if spans
            else "(nodes - spare_nodes) * replicas_per_node",
            [
                q("nodes", v["nodes"], "nodes"),
                q("spare_nodes", v["spare_nodes"], "nodes"),
                q("nodes_per_replica", v["nodes_per_replica"], "nodes")
                if spans
                else q("replicas_per_node", v["replicas_per_node"], "replicas"),
            ],
            v["surviving_replicas"],
            "replicas",
            f"must be >= {v['serving_replicas']:g} serving replicas",
        ),
    ]
    return steps
