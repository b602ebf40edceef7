"""Step 6 of the chain: dollars.

``usd_per_hour = replicas * gpus_per_replica * usd_per_gpu_hour``; a month is 730 h.
``usd_per_mtok = usd_per_hour / 3600 / (tokens_per_s * utilization) * 1e6``: the fleet is paid
for whether or not it is busy, so cost per token divides by the mean utilization.
Check: 8 GPUs x $2.50 = $20/h over 2,000 tok/s -> $2.78/M; at 40% utilization $6.94/M.
"""

from __future__ import annotations

import numpy as np

HOURS_PER_MONTH = 730.0


def usd_per_hour(
    replicas: np.ndarray, gpus_per_replica: np.ndarray, usd_per_gpu_hour: np.ndarray
) -> np.ndarray:
    """Fleet $/h ``= replicas * gpus * price``."""
    return np.asarray(replicas) * np.asarray(gpus_per_replica) * np.asarray(usd_per_gpu_hour)


def usd_per_month(usd_hour: np.ndarray) -> np.ndarray:
    """``$/h * 730`` ($/month)."""
    return np.asarray(usd_hour) * HOURS_PER_MONTH


def usd_per_mtok(
    usd_hour: np.ndarray, tokens_per_s: np.ndarray, utilization: np.ndarray = 1.0
) -> np.ndarray:
    """$ per million tokens ``= usd_hour / 3600 / (tokens_per_s * utilization) * 1e6``;
    ``tokens_per_s`` is the provisioned capacity, ``utilization`` mean load over it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.asarray(usd_hour) / 3600.0 / (np.asarray(tokens_per_s) * utilization) * 1e6
    return np.where(np.isnan(v), np.inf, v)


def tokens_per_usd(usd_mtok: np.ndarray) -> np.ndarray:
    """Inverse of $/M tokens: ``1e6 / usd_per_mtok`` (tokens/$)."""
    with np.errstate(divide="ignore"):
        return 1e6 / np.asarray(usd_mtok)
