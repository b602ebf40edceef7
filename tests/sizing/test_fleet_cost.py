"""Little's law, headroom, cost and break-even."""

import numpy as np
import pytest

from sizing import breakeven as be
from sizing import cost, headroom, littles
from sizing.specs import ApiPrice, Traffic


def test_littles_law_pieces():
    # W = TTFT + OSL * TPOT = 0.5 + 500 * 0.039 = 20 s; 50 req/s -> 1,000 in flight
    w = littles.residence_s(0.5, 500, 0.039)
    assert w == pytest.approx(20.0)
    assert littles.in_flight(50, w) == pytest.approx(1000.0)
    # a replica holding 100 requests for 20 s completes 5 req/s; 50 req/s needs 10
    assert littles.requests_per_s_per_replica(100, 20.0) == 5.0
    assert littles.replicas_for_rate(50.0, 5.0) == 10


def test_headroom_replicas():
    # 100 req/s peak, 10 req/s per replica at 70%: ceil(100 / 7) = 15, +1 spare +2 warm = 18
    s = headroom.serving_replicas(100.0, 10.0, 0.7)
    assert s == 15
    assert headroom.total_replicas(s, 1, 2) == 18
    # burst 1.5: ceil(150 / 7) = 22
    assert headroom.serving_replicas(100.0, 10.0, 0.7, 1.5) == 22
    # exact multiples do not round up: 70 / 7 = 10
    assert headroom.serving_replicas(70.0, 10.0, 0.7) == 10
    assert headroom.serving_replicas(0.0, 10.0, 0.7) == 0
    # utilization: 40 req/s mean over 18 * 10
    assert headroom.utilization(40.0, 18, 10.0) == pytest.approx(40 / 180)
    # warm pool: a 2 req/s/s ramp over a 60 s cold start at 10 req/s per replica -> 12
    assert headroom.warm_pool_for_cold_start(2.0, 60.0, 10.0) == 12


def test_cost_month_and_tokens_per_dollar():
    assert cost.usd_per_month(20.0) == 14_600.0
    assert cost.tokens_per_usd(2.5) == 400_000.0


def test_api_blended_price():
    t = Traffic(peak_rps=1, mean_rps=1, prompt_tokens_mean=3000, output_tokens_mean=1000)
    # (3000 * 1 + 1000 * 4) / 4000 = $1.75/M
    assert be.api_usd_per_token(ApiPrice(1.0, 4.0), t) * 1e6 == pytest.approx(1.75)
    t2 = Traffic(1, 1, 3000, 1000, shared_prefix_tokens=2000, prefix_hit_rate=0.5)
    # 1000 cached at $0.1: (2000 * 1 + 1000 * 0.1 + 1000 * 4) / 4000 = $1.525/M
    assert be.api_usd_per_token(ApiPrice(1.0, 4.0, 0.1), t2) * 1e6 == pytest.approx(1.525)


def _sustained_crossing(vols, v_r, k, s, p):
    """Brute force: the first grid volume after the last one where the API is cheaper."""
    dearer = be.selfhost_usd_per_month(vols, v_r, k, s) > be.api_usd_per_month(vols, p)
    return vols[np.flatnonzero(dearer)[-1] + 1]


def test_crossing_volume_matches_a_brute_force_scan():
    # v_r = 1e9 tokens/month per replica, K = $1,000/month, 1 spare, API $2/M:
    # at 1e9 both cost $2,000 (a touch), but just above it a 2nd replica makes it $3,000;
    # n_s = ceil((1000 + 2000) / 1000) = 3, m = 2: V* = max(1e9, 3 * 1000 / 2e-6) = 1.5e9
    v_r, k, s, p = 1e9, 1000.0, 1, 2e-6
    cross = be.crossing_tokens_per_month(v_r, k, s, p)
    assert cross == pytest.approx(1.5e9)
    vols = np.linspace(1e6, 5e9, 200_000)
    assert _sustained_crossing(vols, v_r, k, s, p) == pytest.approx(cross, rel=1e-4)
    # a replica that costs more than the API would charge for its tokens never wins
    assert be.crossing_tokens_per_month(1e9, 3000.0, 1, p) == np.inf


def test_crossing_with_many_spares_moves_past_the_floor():
    v_r, k, s, p = 1e9, 1500.0, 3, 2e-6
    # margin = 2000 - 1500 = 500; n_s = ceil((4500 + 2000) / 500) = 13, m = 12:
    # V* = max(11e9, 15 * 1500 / 2e-6 = 11.25e9) = 11.25e9
    cross = be.crossing_tokens_per_month(v_r, k, s, p)
    assert cross == pytest.approx(11.25e9)
    vols = np.linspace(1e8, 3e10, 600_000)
    assert _sustained_crossing(vols, v_r, k, s, p) == pytest.approx(cross, rel=1e-4)


def test_utilization_to_win():
    # $20/h over 2,000 tok/s = $2.78/M at full load; API $5.56/M -> 50%
    u = be.utilization_to_win(20.0, 2000.0, 20 / 3600 / 2000 * 2)
    assert u == pytest.approx(0.5)


def test_hybrid_split_extremes_and_middle():
    hourly = np.array([10.0] * 12 + [30.0] * 12)  # req/s
    # each replica carries 10 * 0.5 = 5 req/s; 1,000 tokens per request
    cheap_api = be.hybrid_split(hourly, 10.0, 0.5, 5000.0, 1, 1000, 1e-9)
    assert cheap_api.selfhost_replicas == 0
    assert cheap_api.api_token_share == 1.0
    dear_api = be.hybrid_split(hourly, 10.0, 0.5, 5000.0, 1, 1000, 1e-3)
    assert dear_api.selfhost_replicas == 6
    assert dear_api.api_token_share == 0.0
    # API $1/M: a req/s for one hour of every day costs 3600 * 1000 * 1e-6 * 30.42 = $109.5
    # a month. At K = $8,000 a replica busy 24 h saves 5 * 24 * 109.5 = $13,140 (> K) but
    # one busy 12 h saves $6,570 (< K): cover the base (10 req/s = 2 replicas), burst to API.
    # R=2: 3 * 8000 + 20 * 12 * 109.5 = $50,280 < R=0 $52,560 < R=3 $51,710 < R=6 $56,000
    mid = be.hybrid_split(hourly, 10.0, 0.5, 8000.0, 1, 1000, 1e-6)
    assert mid.selfhost_replicas == 2
    assert mid.usd_per_month == pytest.approx(24_000 + 20 * 12 * 3600 * 1000 * 1e-6 * 730 / 24)
    assert mid.api_token_share == pytest.approx(240 / 480)
    assert mid.usd_per_month <= min(mid.api_only_usd_per_month, mid.selfhost_only_usd_per_month)


def test_daily_profile_keeps_mean_and_peak():
    prof = be.daily_profile_rps(
        Traffic(peak_rps=30, mean_rps=20, prompt_tokens_mean=1, output_tokens_mean=1)
    )
    assert prof.mean() == pytest.approx(20)
    assert prof.max() == pytest.approx(30)
