"""Step 5 of the chain: headroom on top of the SLO-bound capacity.

``serving = ceil(peak_rps * burst_factor / (capacity_rps * target_utilization))`` replicas
(at least 1 when there is any traffic); queueing delay grows like ``1 / (1 - rho)`` near
full load, so a replica is planned at ``target_utilization``, not at 100%. Then ``+ k``
spare replicas (N+k: survive a failed node) and a warm pool (loaded, idle replicas that
cover the cold start: a new replica needs tens of seconds before it serves).
"""

from __future__ import annotations

import numpy as np


def serving_replicas(
    peak_rps: np.ndarray,
    capacity_rps: np.ndarray,
    target_utilization: np.ndarray,
    burst_factor: np.ndarray = 1.0,
) -> np.ndarray:
    """``ceil(peak * burst / (capacity * target_util))``, >= 1 if peak > 0 (replicas)."""
    load = np.asarray(peak_rps, dtype=np.float64) * burst_factor
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.ceil(load / (np.asarray(capacity_rps) * target_utilization) - 1e-9)
    r = np.where(load > 0, np.maximum(r, 1.0), 0.0)
    return np.where(np.isfinite(r), r, np.inf)


def total_replicas(
    serving: np.ndarray, spare_replicas: np.ndarray = 0, warm_pool_replicas: np.ndarray = 0
) -> np.ndarray:
    """``serving + k + warm`` replicas provisioned (and billed)."""
    return np.asarray(serving) + spare_replicas + warm_pool_replicas


def utilization(mean_rps: np.ndarray, replicas: np.ndarray, capacity_rps: np.ndarray) -> np.ndarray:
    """Mean load over provisioned capacity, ``mean_rps / (replicas * capacity_rps)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.asarray(mean_rps) / (np.asarray(replicas) * np.asarray(capacity_rps))
    return np.where(np.isfinite(u), u, 0.0)


def warm_pool_for_cold_start(
    ramp_rps_per_s: np.ndarray, cold_start_s: np.ndarray, capacity_rps: np.ndarray
) -> np.ndarray:
    """Replicas to hold warm so a ramp is absorbed while new ones boot (Little on the ramp):
    ``ceil(ramp * cold_start / capacity)`` (replicas)."""
    return np.ceil(np.asarray(ramp_rps_per_s) * cold_start_s / np.asarray(capacity_rps))
