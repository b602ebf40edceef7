"""The simulated search: where the next probe goes, and when a failing probe ends it."""

from types import SimpleNamespace

import numpy as np
import pytest

from sizing.tail_search import (
    OVERLOAD_GROWTH,
    PRIOR_SLOPE,
    REL_TOL,
    SECANT_MIN_SPAN,
    WARM_START_SHARE,
    Probe,
    _estimate,
    _next_rate,
    _ttft_growth,
    max_rate_rps,
)


def _failing(rate_rps: float, score: float, ttft_growth: float) -> Probe:
    return Probe(rate_rps, False, score, 1e3 * score, 10.0, 0.0, 1.0, 0.0, ttft_growth)


def test_a_stable_probe_far_above_the_slo_ends_the_search():
    # given one failing probe whose queue is stable (its TTFT does not grow over the run) and
    # whose distance from the SLO puts any meeting rate below the floor
    probe = _failing(1.0, score=50.0, ttft_growth=1.02)
    # when the search asks for the next rate, floor 0.125 (1/8 of the hint)
    # then it gives up: no rate down to the floor meets
    assert _next_rate(None, probe, [probe], upper_rps=4.0, floor_rps=0.125) is None


def test_an_overloaded_probe_steps_down_instead_of_giving_up():
    # given the same distance, but the probe's queue grew through the whole run
    probe = _failing(1.0, score=50.0, ttft_growth=OVERLOAD_GROWTH * 3)
    # then its score says nothing about where the SLO is met: the search steps down 4x
    assert _next_rate(None, probe, [probe], upper_rps=4.0, floor_rps=0.125) == 0.25


def test_a_probe_at_the_floor_ends_the_search_whatever_its_queue():
    probe = _failing(0.125, score=50.0, ttft_growth=OVERLOAD_GROWTH * 3)
    assert _next_rate(None, probe, [probe], upper_rps=4.0, floor_rps=0.125) is None


def test_ttft_growth_compares_the_last_third_of_requests_with_the_first():
    import numpy as np

    from sizing.simulate import SimResult

    n = 9
    ttft = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0])
    empty = np.zeros(0)
    r = SimResult(
        np.arange(n, dtype=float), ttft, np.ones(n), ttft + 1, np.ones(n), np.ones(n), 0, 10.0,
        10, empty, empty, empty, empty, measured=np.ones(n, dtype=bool),
    )  # fmt: skip
    assert _ttft_growth(r) == 4.0


def test_a_probe_near_the_slo_never_ends_the_search_by_extrapolation():
    # given two failing probes just over the SLO whose scores barely move with the rate
    high, low = _failing(1.754, 1.197, 1.0), _failing(1.674, 1.193, 1.0)
    # when the secant through them points far below the floor (0.22 req/s)
    step = _next_rate(None, low, [high, low], upper_rps=4.0, floor_rps=0.22)
    # then the search does not give up: the probes are too close for a secant of their own
    # (5 % apart, their scores' difference is the simulation's noise), so it steps down to
    # the nearer probe's crossing at the prior slope, a tolerance window below it
    assert step == pytest.approx(1.674 / 1.193 ** (1 / PRIOR_SLOPE) / (1 + REL_TOL), rel=1e-12)
    assert 0.22 < step < 1.674 / 1.25


def test_probes_far_enough_apart_whose_scores_do_not_rise_give_no_estimate():
    # given two failing probes 30 % apart with the same score
    a, b = _failing(2.0, 1.2, 1.0), _failing(1.54, 1.2, 1.0)
    # then the secant says nothing: no estimate (the search halves the bracket instead)
    assert SECANT_MIN_SPAN < 2.0 / 1.54
    assert _estimate([a, b]) is None


def test_close_probes_with_a_steep_secant_keep_it():
    # given two probes 5 % apart whose scores rise steeply (slope 3 in log-log)
    a = _failing(1.0, 1.1, 1.0)
    b = Probe(1.0 / 1.05, True, 1.1 / 1.05**3, 1e3, 10.0, 0.0, 0.0, 0.0, 1.0)
    # then the steeper of the secant and the prior is used: the crossing from the nearer
    assert _estimate([a, b]) == pytest.approx(b.rate_rps * b.score ** (-1 / 3), rel=1e-12)


class _ScoredReplica:
    """A stand-in replica whose score is (rate / crossing) ** slope (``probe`` only)."""

    def __init__(self, crossing_rps: float, slope: float):
        self.crossing_rps, self.slope, self.rates = crossing_rps, slope, []
        self.slo = SimpleNamespace(ttft_ms=1e3, tpot_ms=10.0)

    def probe(self, rate_rps: float) -> Probe:
        self.rates.append(rate_rps)
        score = (rate_rps / self.crossing_rps) ** self.slope
        return Probe(rate_rps, score <= 1, score, 1e3 * score, 10.0, 0.0, 0.0, 0.0, 1.0)


def test_a_warm_start_far_from_the_slo_goes_to_the_estimate_not_across_the_window():
    # given a replica whose SLO crossing is 20 % below the analytic hint (score ~ rate)
    replica = _ScoredReplica(crossing_rps=8.0, slope=1.0)
    # when the warm search starts
    found = max_rate_rps(replica, hint_rps=10.0, upper_rps=100.0, warm=True)
    # then the second probe goes where the first one's score puts the crossing (a window
    # below it, as a failing probe's step down does), not one window below the first, and
    # the bracket closes around the crossing in four probes (the search before took six)
    first = 10.0 * WARM_START_SHARE
    assert replica.rates[0] == pytest.approx(first)
    assert replica.rates[1] == pytest.approx(8.0 / (1 + REL_TOL), rel=1e-9)
    assert len(found.probes) <= 4
    assert found.low_rps <= 8.0 <= found.high_rps <= found.low_rps * (1 + REL_TOL)


def test_a_warm_start_within_half_a_window_steps_across_it():
    # given a crossing 1 % below the first probe
    first = 10.0 * WARM_START_SHARE
    replica = _ScoredReplica(crossing_rps=first / 1.01, slope=1.0)
    # then the second probe is one window (a hair inside) below the first, and closes
    found = max_rate_rps(replica, hint_rps=10.0, upper_rps=100.0, warm=True)
    assert len(found.probes) == 2
    assert replica.rates[1] == pytest.approx(first / ((1 + REL_TOL) / 1.002))


def test_a_rerun_at_the_last_probes_rate_reuses_its_simulation():
    # given a replica of Llama 3.1 8B on H100 that has just simulated one rate
    from types import SimpleNamespace

    from specs_catalog import H100, LLAMA_8B

    from sizing.candidates import CandidateArrays
    from sizing.simulate import lengths_from_mean_p95
    from sizing.tail_search import Replica

    c = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    traffic = SimpleNamespace(shared_prefix_tokens=0.0, prefix_hit_rate=0.0)
    slo = SimpleNamespace(ttft_ms=500, tpot_ms=50, percentile=95, goodput_target=0.99)
    isl, osl = lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(200, 600)
    replica = Replica(c, isl, osl, traffic, slo, seed=3, requests=200)
    first = replica.run(4.0)
    # when the same rate is run again, then another, then the first again
    again, other, back = replica.run(4.0), replica.run(5.0), replica.run(4.0)
    # then the repeat is the same simulation (nothing re-run), and a new rate simulates anew
    # with the same numbers a fresh replica gets
    assert again is first and other is not first and back is not first
    fresh = Replica(c, isl, osl, traffic, slo, seed=3, requests=200).run(4.0)
    assert np.array_equal(back.ttft_s, fresh.ttft_s) and np.array_equal(first.ttft_s, fresh.ttft_s)


def _replica_parts():
    from types import SimpleNamespace

    from specs_catalog import H100, LLAMA_8B

    from sizing.candidates import CandidateArrays
    from sizing.simulate import lengths_from_mean_p95

    c = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    traffic = SimpleNamespace(shared_prefix_tokens=0.0, prefix_hit_rate=0.0)
    slo = SimpleNamespace(ttft_ms=500, tpot_ms=50, percentile=95, goodput_target=0.99)
    return c, lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(200, 600), traffic, slo


def test_a_second_search_of_the_same_row_reuses_the_step_times_and_changes_no_number(
    monkeypatch,
):
    from sizing import simulate as sim
    from sizing.simulate import StepTimer, clear_shared_timers, simulate
    from sizing.tail_search import Replica

    # given the memo on (SIZING_STEP_MEMO_MB=1024) and a replica searched once on a fresh one,
    # its steps from the table (a dense row's are composed in the loop otherwise)
    monkeypatch.setattr(sim, "SHARED_TIMER_BYTES", 1 << 30)
    monkeypatch.setattr(sim, "AFFINE_STEPS", False)
    clear_shared_timers()
    c, isl, osl, traffic, slo = _replica_parts()
    first = Replica(c, isl, osl, traffic, slo, seed=3, requests=300)
    runs = [first.run(rate) for rate in (2.0, 4.0)]
    calls = first.timer.core_calls
    # when another search of the same row (a rerun: the same seed) runs the same rates
    second = Replica(c, isl, osl, traffic, slo, seed=3, requests=300)
    # then it shares the memo, makes no new core call for the same steps, and every number is
    # the one a replica with its own new memo gets
    assert second.timer is first.timer
    again = [second.run(rate) for rate in (2.0, 4.0)]
    assert calls > 0 and second.timer.core_calls == calls
    for a, b in zip(runs, again, strict=True):
        assert np.array_equal(a.ttft_s, b.ttft_s) and np.array_equal(a.tpot_s, b.tpot_s)
    own = simulate(c, second.workload(4.0), second.engine, StepTimer(c, second.engine.max_num_seqs))
    assert np.array_equal(own.tpot_s, again[1].tpot_s, equal_nan=True)
    clear_shared_timers()


def test_the_shared_memo_keys_on_the_row_and_drops_the_least_recently_used(monkeypatch):
    import dataclasses

    from sizing import simulate as sim

    sim.clear_shared_timers()
    c, *_ = _replica_parts()
    # off (the default): every search gets its own memo
    monkeypatch.setattr(sim, "SHARED_TIMER_BYTES", 0)
    assert sim.shared_timer(c, 64) is not sim.shared_timer(c, 64)
    monkeypatch.setattr(sim, "SHARED_TIMER_BYTES", 1 << 30)
    other = dataclasses.replace(c, eta_mem=c.eta_mem * 0.9)  # another calibration
    # given a memo of one row, then another
    a = sim.shared_timer(c, 64)
    b = sim.shared_timer(other, 64)
    # then each row has its own timer and asking again returns it
    assert a is not b and sim.shared_timer(c, 64) is a and sim.shared_timer(other, 64) is b
    assert sim.shared_timer(c, 128) is not a  # another engine limit, another memo
    # when the memory bound is below what they hold
    monkeypatch.setattr(sim, "SHARED_TIMER_BYTES", 1)
    # then only the most recently asked one is kept
    last = sim.shared_timer(other, 64)
    assert last is b and sim.shared_timer(c, 64) is not a
    sim.clear_shared_timers()
