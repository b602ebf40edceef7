"""Nodes for a sized result row: ``sizing.nodes`` on the row's replicas and the run's policy.

The pipeline calls ``node_fields(inputs, values)`` per result (``values`` as
``runner.result_values`` returns them, with ``derivation.serving_replicas``) and stores the
returned ``nodes``, ``gpus_per_node`` ... beside the row; ``steps`` go into its derivation.
"""

from __future__ import annotations

import math

from planner import snapshot as snap
from sizing.nodes import node_steps, pack_nodes

NODE_FIELDS = (
    "nodes",
    "gpus_per_node",
    "replicas_per_node",
    "nodes_per_replica",
    "spare_nodes",
    "spare_replica_slots",
    "idle_gpus",
    "gpus_billed",
)


def node_fields(inputs: dict, values: dict) -> dict:
    """{nodes, gpus_per_node, ..., steps} for one row; ``nodes`` is None when it does not fit."""
    policy = inputs.get("policy") or {}
    spare_nodes = int(policy.get("spare_nodes") or 0)
    if values.get("mode") == "disagg":
        return _pool_node_fields(inputs, values, spare_nodes)
    gpus_per_node = snap.gpus_per_node(inputs, values["gpu_slug"], values["gpus_per_replica"])
    replicas = values.get("replicas") or 0
    serving = (values.get("derivation") or {}).get("serving_replicas")
    if not values.get("fits") or not replicas or serving is None:
        return {"nodes": None, "gpus_per_node": gpus_per_node, "steps": []}
    packing = pack_nodes(serving, replicas, values["gpus_per_replica"], gpus_per_node, spare_nodes)
    return _counts(packing) | {"steps": [s.as_dict() for s in node_steps(packing)]}


def _counts(packing) -> dict:
    """``NODE_FIELDS`` of one packing as whole numbers (None where not finite)."""
    out = {}
    for name in NODE_FIELDS:
        number = float(getattr(packing, name))
        out[name] = int(number) if math.isfinite(number) else None
    return out


def _pool_node_fields(inputs: dict, values: dict, spare_nodes: int) -> dict:
    """A disaggregated row: each pool packs into its own nodes (a worker never straddles the
    pools), the row's nodes are their sum; the spare nodes are the policy's, per pool."""
    pools = (values.get("derivation") or {}).get("pools") or {}
    gpus_per_node = snap.gpus_per_node(inputs, values["gpu_slug"], values["gpus_per_replica"])
    if not values.get("fits") or not pools:
        return {"nodes": None, "gpus_per_node": gpus_per_node, "steps": []}
    counts, steps = [], []
    for name in ("prefill", "decode"):
        pool = pools[name]
        per_worker = pool["tp"] * pool["pp"] * pool["dp"]
        packing = pack_nodes(
            pool["serving_workers"], pool["workers"], per_worker, gpus_per_node, spare_nodes
        )
        counts.append(_counts(packing))
        steps += [{**s.as_dict(), "name": f"{s.name}_{name}"} for s in node_steps(packing)]
    out = {  # a count either pool cannot give (not finite) is not given for the row either
        field: None if None in (a[field], b[field]) else a[field] + b[field]
        for field, a, b in ((f, *counts) for f in NODE_FIELDS)
    }
    return out | {"gpus_per_node": gpus_per_node, "steps": steps}
