"""The simulated search's step-down: when does a failing probe end the search?"""

import numpy as np

from sizing.tail_search import OVERLOAD_GROWTH, Probe, _next_rate, _ttft_growth


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
    # then the search steps down (4x at most) instead of giving up
    assert step == 1.674 / 4


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
