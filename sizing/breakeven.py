"""Step 7 of the chain: hosted API vs self-hosting, as a function of monthly token volume.

API cost is linear, ``V * p`` ($/month, p in $/token, blended over the traffic's input and
output mix). Self-hosting is a step function with a floor: volume V (tokens/month) needs
``n(V) = max(ceil(V / v_r), 1)`` serving replicas, ``v_r`` being what one replica carries
in a month at its SLO-bound capacity and target utilization, scaled by the peak-to-mean
ratio (replicas are sized for the peak); plus the fixed spare and warm-pool replicas.
``selfhost(V) = (n(V) + fixed) * usd_per_replica_month``.

Crossing (sustained): with ``n`` serving replicas the fleet costs ``(n + s) K`` on
``((n-1) v_r, n v_r]``. Because of the steps, self-hosting can touch the API line at a step
and fall behind again just after it; the reported crossing is the volume from which it stays
no dearer. The whole of step n is no dearer when ``(n + s) K <= p (n - 1) v_r``, i.e. for
``n >= n_s = ceil((s K + p v_r) / (p v_r - K))``; the crossing lies inside the step before,
``m = max(n_s - 1, 1)``: ``V* = max((m - 1) v_r, (m + s) K / p)``. Never if ``p v_r <= K``
(a replica's month costs more than the API charges for what it can carry).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.cost import HOURS_PER_MONTH
from sizing.specs import ApiPrice, Traffic

SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600.0


def api_usd_per_token(price: ApiPrice, traffic: Traffic) -> float:
    """Blended API $/token over the traffic's mix: input at the cached price for the
    prefix-hit share when the API has one, output at the output price."""
    isl, osl = traffic.prompt_tokens_mean, traffic.output_tokens_mean
    cached = min(traffic.shared_prefix_tokens * traffic.prefix_hit_rate, isl)
    cached_price = (
        price.cached_input_usd_per_mtok
        if price.cached_input_usd_per_mtok is not None
        else price.input_usd_per_mtok
    )
    usd = (isl - cached) * price.input_usd_per_mtok + cached * cached_price
    usd += osl * price.output_usd_per_mtok
    return usd / (isl + osl) / 1e6


def api_usd_per_month(tokens_per_month: np.ndarray, usd_per_token: float) -> np.ndarray:
    """``V * p`` ($/month)."""
    return np.asarray(tokens_per_month, dtype=np.float64) * usd_per_token


def selfhost_usd_per_month(
    tokens_per_month: np.ndarray,
    tokens_per_month_per_replica: np.ndarray,
    usd_per_replica_month: np.ndarray,
    fixed_replicas: np.ndarray,
) -> np.ndarray:
    """``(max(ceil(V / v_r), 1) + fixed) * K`` ($/month): a floor of one serving replica."""
    v = np.asarray(tokens_per_month, dtype=np.float64)
    n = np.maximum(np.ceil(v / tokens_per_month_per_replica - 1e-9), 1.0)
    return (n + fixed_replicas) * usd_per_replica_month


def crossing_tokens_per_month(
    tokens_per_month_per_replica: np.ndarray,
    usd_per_replica_month: np.ndarray,
    fixed_replicas: np.ndarray,
    usd_per_token: float,
) -> np.ndarray:
    """Monthly volume from which self-hosting stays no dearer than the API (tokens/month);
    ``inf`` when it never does. See the module docstring for the closed form."""
    v_r = np.asarray(tokens_per_month_per_replica, dtype=np.float64)
    k = np.asarray(usd_per_replica_month, dtype=np.float64)
    s = np.asarray(fixed_replicas, dtype=np.float64)
    margin = usd_per_token * v_r - k
    with np.errstate(divide="ignore", invalid="ignore"):
        n_s = np.ceil((s * k + usd_per_token * v_r) / margin - 1e-9)
        m = np.maximum(n_s - 1.0, 1.0)
        v_star = np.maximum((m - 1.0) * v_r, (m + s) * k / usd_per_token)
    return np.where(margin > 0, v_star, np.inf)


def utilization_to_win(
    usd_per_replica_hour: np.ndarray, capacity_tokens_per_s: np.ndarray, usd_per_token: float
) -> np.ndarray:
    """Mean utilization at which self-hosted $/token equals the API's:
    ``(usd_per_hour / 3600 / capacity_tok_s) / p`` (> 1: self-hosting cannot win)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        full = np.asarray(usd_per_replica_hour) / 3600.0 / np.asarray(capacity_tokens_per_s)
    return full / usd_per_token


def daily_profile_rps(traffic: Traffic) -> np.ndarray:
    """24 hourly request rates: ``traffic.hourly_rps`` if given, else a cosine day peaking at
    ``peak_rps`` at 14:00 whose mean is ``mean_rps`` (an assumption, stated in the derivation).

    ``mean + (peak - mean) * cos`` dips below zero when ``peak > 2 * mean``; clipped there it
    averaged above the declared mean (8.8% for peak 20, mean 8). The day is instead
    ``max(c + (peak - c) * cos, 0)`` with ``c`` chosen so the mean is ``mean_rps``: the mean
    rises monotonically with ``c`` (its derivative ``1 - cos >= 0``), so a bisection finds it.
    A mean below ``peak / 24`` (the peak hour alone) cannot keep the peak: that day is the
    peak hour's spike scaled down to the mean."""
    if traffic.hourly_rps:
        return np.asarray(traffic.hourly_rps, dtype=np.float64)
    cos = np.cos(2 * np.pi * (np.arange(24.0) - 14.0) / 24.0)
    peak, mean = float(traffic.peak_rps), float(traffic.mean_rps)

    def day(c: float) -> np.ndarray:
        return np.maximum(c + (peak - c) * cos, 0.0)

    if peak <= 2 * mean:
        return day(mean)  # no clipping: the mean is c itself
    spike = day(-1e6 * peak)
    if spike.mean() >= mean:
        return spike * (mean / spike.mean()) if spike.mean() > 0 else spike
    low, high = -1e6 * peak, mean
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if day(mid).mean() < mean else (low, mid)
        if high - low <= 1e-12 * max(abs(high), 1.0):
            break
    return day(0.5 * (low + high))


@dataclass(frozen=True)
class HybridSplit:
    """Self-host a base of ``selfhost_replicas`` serving replicas, overflow to the API."""

    selfhost_replicas: int  # serving replicas (spares added on top when > 0)
    api_token_share: float  # fraction of monthly tokens sent to the API
    usd_per_month: float
    selfhost_only_usd_per_month: float
    api_only_usd_per_month: float


def hybrid_split(
    hourly_rps: np.ndarray,
    capacity_rps_per_replica: float,
    target_utilization: float,
    usd_per_replica_month: float,
    fixed_replicas: int,
    tokens_per_request: float,
    usd_per_token: float,
    burst_factor: float = 1.0,
) -> HybridSplit:
    """Cheapest base: for R = 0..R_peak serving replicas, each hour self-hosts
    ``min(rps_h, R * capacity * target_util / burst)`` and sends the rest to the API (a
    replica is planned to carry the hour's rate with the burst on top, as the fixed fleet is,
    so ``R_peak`` is the fleet's own serving count and the self-host-only cost is its cost);
    ``cost(R) = (R + fixed * [R > 0]) * K + 30.42 d * sum_h overflow_h * 3600 * tokens * p``.
    The API also absorbs failures here, but the spares stay for the self-hosted base."""
    rps = np.asarray(hourly_rps, dtype=np.float64)
    per = capacity_rps_per_replica * target_utilization / burst_factor
    if not per > 0:
        api = float(rps.mean() * SECONDS_PER_MONTH * tokens_per_request * usd_per_token)
        return HybridSplit(0, 1.0, api, np.inf, api)
    r_peak = int(np.ceil(rps.max() / per - 1e-9))
    # cost(R) is convex and piecewise linear for R >= 1 with kinks where R * per crosses an
    # hour's rate, so the optimum is at 0, 1, R_peak or a kink: <= 51 candidates, not R_peak
    # (which reaches millions for absurd traffic and would allocate R_peak x 24 floats).
    kinks = np.concatenate([np.floor(rps / per), np.ceil(rps / per), [0.0, 1.0, r_peak]])
    r = np.unique(np.clip(kinks, 0, r_peak))[:, None]
    overflow = np.maximum(rps[None, :] - r * per, 0.0)  # req/s per hour, per R
    days = HOURS_PER_MONTH / 24.0
    api_usd = overflow.sum(axis=1) * 3600.0 * days * tokens_per_request * usd_per_token
    fleet = (r[:, 0] + fixed_replicas * (r[:, 0] > 0)) * usd_per_replica_month
    total = fleet + api_usd
    best_index = int(np.argmin(total))
    best = int(r[best_index, 0])
    all_tokens = rps.sum() * 3600.0 * days * tokens_per_request
    api_tokens = overflow[best_index].sum() * 3600.0 * days * tokens_per_request
    return HybridSplit(
        selfhost_replicas=best,
        api_token_share=float(api_tokens / all_tokens) if all_tokens > 0 else 0.0,
        usd_per_month=float(total[best_index]),
        selfhost_only_usd_per_month=float(total[-1]) if r_peak > 0 else float(fleet[0]),
        api_only_usd_per_month=float(total[0]),
    )
