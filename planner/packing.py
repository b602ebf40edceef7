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
    gpus_per_node = snap.gpus_per_node(inputs, values["gpu_slug"], values["gpus_per_replica"])
    replicas = values.get("replicas") or 0
    serving = (values.get("derivation") or {}).get("serving_replicas")
    if not values.get("fits") or not replicas or serving is None:
        return {"nodes": None, "gpus_per_node": gpus_per_node, "steps": []}
    packing = pack_nodes(serving, replicas, values["gpus_per_replica"], gpus_per_node, spare_nodes)
    out = {}
    for name in NODE_FIELDS:
        number = float(getattr(packing, name))
        out[name] = int(number) if math.isfinite(number) else None
    out["steps"] = [s.as_dict() for s in node_steps(packing)]
    return out
