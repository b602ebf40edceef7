"""The worst burst window through the engine simulator: the per-replica trace and its check."""

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B

from sizing import autoscale, burst_check
from sizing.candidates import CandidateArrays
from sizing.simulate import LengthDist


def _8b():
    return CandidateArrays.build(LLAMA_8B, H100, "fp8")


def test_per_replica_rate_is_the_window_rate_over_the_ready_replicas():
    # given 20, 26, 32 req/s on 14, 14, 16 ready replicas (and a second with none ready)
    rates = burst_check.per_replica_rates([20.0, 26.0, 32.0, 5.0], [14, 14, 16, 0])
    # then each replica sees lambda / n: 1.4286, 1.8571, 2.0; no replica ready counts as one
    assert rates == pytest.approx([20 / 14, 26 / 14, 2.0, 5.0])


def test_nhpp_arrivals_follow_the_rate_second_by_second():
    # given 100 s at 0 req/s then 100 s at 50 req/s (expected 5,000 arrivals, sd 70.7)
    rates = np.concatenate([np.zeros(100), np.full(100, 50.0)])
    times = burst_check.nhpp_arrivals(rates, 1.0, np.random.default_rng(7))
    # then none arrive while the rate is 0, the count is within 4 sd, and times are sorted
    assert times.min() >= 100.0 and times.max() < 200.0
    assert abs(times.size - 5000) < 4 * 5000**0.5
    assert np.all(np.diff(times) >= 0)


def _check(rates, ready, max_requests=burst_check.MAX_REQUESTS, seed=11):
    return burst_check.check_burst(
        _8b(), LengthDist(1000), LengthDist(200), rates, ready, 1.0,
        ttft_slo_ms=2000, tpot_slo_ms=50, percentile=95, fluid_slo_share=0.9, seed=seed,
        max_requests=max_requests,
    )  # fmt: skip


def test_light_burst_is_inside_the_slo_and_reproducible():
    # given the fluid model's worst window: 10 s base, a 60 s ramp, a 60 s tail, 4 replicas
    rates = autoscale.burst_window_rates(4.0, 0.1, 60.0, 60.0)
    ready = np.full(rates.size, 4)
    # when checked with the simulator (1 to 2.5 req/s per replica: far below its capacity)
    check, steps = _check(rates, ready)
    # then every request is inside the SLO, beside the fluid share it was given
    assert check.slo_share == 1.0 and check.fluid_slo_share == 0.9
    assert check.ttft_ms_at_percentile < 2000 and check.tpot_ms_at_percentile < 50
    assert check.peak_rps_per_replica == pytest.approx((4.0 + 0.1 * 59.5) / 4)
    assert check.window_s == rates.size and not check.window_cut
    # ~ sum(rates) / 4 requests in the window (Poisson: within 4 sd)
    expected = rates.sum() / 4
    assert abs(check.requests - expected) < 4 * expected**0.5
    assert 0 < check.warmup_requests <= burst_check.MAX_WARMUP_REQUESTS
    (s,) = steps
    assert s.name == "burst_simulated_slo_share" and s.kind == "simulation"
    assert s.value == check.slo_share and "fluid model says 90.0%" in s.note
    # the same seed replays the same trace
    again, _ = _check(rates, ready)
    assert again == check


def test_overload_misses_the_slo_and_the_window_is_bounded():
    # given 400 req/s on one replica for 60 s (24,000 requests; far above what it serves)
    rates = np.full(60, 400.0)
    check, steps = _check(rates, np.ones(60), max_requests=2000)
    # then the window is cut at 2,000 expected requests (5 s) and most requests wait past
    # the TTFT SLO (2M prompt tokens queue on one replica)
    assert check.window_cut and check.window_s == 5.0
    assert abs(check.requests - 2000) < 4 * 2000**0.5
    assert check.slo_share < 0.5 < check.fluid_slo_share
    assert check.ttft_ms_at_percentile > 2000
    assert "tail cut at 2000 requests" in steps[0].note


def test_a_window_without_requests_is_json_ready():
    # given a window whose rate is 0 (nothing arrives): the share is 1 and no percentile exists
    check, _ = _check(np.zeros(30), np.ones(30))
    assert check.requests == 0 and check.slo_share == 1.0
    out = check.as_dict()
    assert out["ttft_ms_at_percentile"] is None and out["tpot_ms_at_percentile"] is None
