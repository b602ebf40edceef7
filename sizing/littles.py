"""Step 4 of the chain: Little's law, ``N = lambda * W``.

Residence per request ``W = TTFT + OSL * TPOT`` (s; DESIGN's form, which counts one decode
step more than the strict ``(OSL - 1) * TPOT``, a deliberate one-TPOT conservatism). A
replica holding B requests in flight completes ``B / W`` requests/s.
"""

from __future__ import annotations

import numpy as np


def residence_s(ttft_s: np.ndarray, osl_tokens: np.ndarray, tpot_s: np.ndarray) -> np.ndarray:
    """``W = TTFT + OSL * TPOT`` (s)."""
    return np.asarray(ttft_s) + np.asarray(osl_tokens) * np.asarray(tpot_s)


def in_flight(rate_rps: np.ndarray, residence: np.ndarray) -> np.ndarray:
    """Requests in the system ``N = lambda * W``: 50 req/s x 20 s = 1,000."""
    return np.asarray(rate_rps) * np.asarray(residence)


def requests_per_s_per_replica(batch: np.ndarray, residence: np.ndarray) -> np.ndarray:
    """Throughput of a replica holding ``batch`` requests: ``B / W`` (req/s)."""
    return np.asarray(batch) / np.asarray(residence)


def replicas_for_rate(rate_rps: np.ndarray, requests_per_s_each: np.ndarray) -> np.ndarray:
    """Replicas at 100% load, ``ceil(lambda / (B / W))`` (no headroom; see headroom.py)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.ceil(np.asarray(rate_rps) / np.asarray(requests_per_s_each))
    return np.where(np.isfinite(r), r, np.inf)
