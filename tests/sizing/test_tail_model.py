"""The analytic percentile model's queueing pieces against closed forms derived by hand."""

import math

import numpy as np
import pytest
from scipy.special import gammainc
from specs_catalog import B200, H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.memory import fit_memory
from sizing.simulate import lengths_from_mean_p95
from sizing.specs import EngineSettings, Slo, Traffic
from sizing.tail_model import (
    WAIT_GRID,
    Lengths,
    PromptCost,
    TailModel,
    WaitLaw,
    busy_share_quantile,
    mg1_wait_tail,
    ttft_quantile,
)
from sizing.tail_search import Replica


def test_mm1_wait_tail_is_exact():
    # given exponential prompt service (cs2 = 1) at loads 0.1 .. 0.99
    rho = np.array([0.1, 0.5, 0.9, 0.99])
    # when the Cramer-Lundberg decay and weight are solved
    decay, weight = mg1_wait_tail(rho, 1.0)
    # then they are M/M/1's: P(wait > t) = rho exp(-(1 - rho) t / D) (to the bisection's 1e-9
    # of the decay's range)
    np.testing.assert_allclose(decay, 1.0 - rho, rtol=1e-6)
    np.testing.assert_allclose(weight, rho, rtol=1e-6)


def test_md1_at_light_load_decays_twice_as_fast_as_heavy_traffic_says():
    # given fixed-length prompts (cs2 = 0) at 10 % prefill load
    decay, weight = mg1_wait_tail(np.array([0.1]), 0.0)
    # then x solves 0.1 (e^x - 1) = x: x = 3.6150 (e^3.6150 = 37.15, 0.1 * 36.15 = 3.615),
    # against the heavy-traffic 2 (1 - rho) = 1.8; weight = 0.9 / (0.1 e^x - 1) = 0.3315
    assert decay[0] == pytest.approx(3.61495, abs=1e-4)
    assert weight[0] == pytest.approx(0.9 / (0.1 * math.exp(3.61495) - 1), rel=1e-4)


@pytest.mark.parametrize("cs2", [0.0, 0.5, 1.38])
def test_near_saturation_the_decay_is_the_heavy_traffic_one(cs2):
    decay, _ = mg1_wait_tail(np.array([0.995]), cs2)
    assert decay[0] == pytest.approx(2 * 0.005 / (1 + cs2), rel=0.02)


def test_the_mixed_share_quantile_is_the_poisson_tail_of_whole_clusters():
    # given a request of 100 decode gaps meeting on average 2 clusters of 4 mixed steps
    gaps = np.array([100.0])
    # when its 95th percentile share of mixed steps is solved
    x = busy_share_quantile(np.array([0.02]), np.array([0.0]), np.array([4.0]), gaps, 0.95)[0]
    # then it lies between 4 and 5 clusters (Poisson(2): P(K > 4) = 0.0527, P(K > 5) = 0.0166),
    # i.e. 16-20 mixed steps of 100, where the continuous tail P(k + 1, 2) is 5 %
    assert 0.16 < x < 0.20
    assert gammainc(x * 100 / 4 + 1, 2.0) == pytest.approx(0.05, abs=1e-4)  # x to 2^-15


def test_a_request_rarely_meeting_another_prompt_has_no_mixed_share_at_its_tail():
    # given 0.5 % of requests meeting one cluster (mean 0.005 clusters per request)
    gaps = np.array([200.0])
    share = busy_share_quantile(np.array([0.0]), np.array([0.005]), np.array([4.0]), gaps, 0.99)
    # then the 99th percentile request meets none: its TPOT is the unmixed step
    assert share[0] == pytest.approx(0.0, abs=4e-5)  # the bisection's 2^-15
    # and prompts queued behind it (the lead) count like those arriving during its decode
    lead = busy_share_quantile(np.array([0.0]), np.array([2.0]), np.array([4.0]), gaps, 0.95)
    same = busy_share_quantile(np.array([0.01]), np.array([0.0]), np.array([4.0]), gaps, 0.95)
    assert lead[0] == pytest.approx(same[0], rel=1e-6)


def test_variable_outputs_widen_the_share_tail_and_one_token_outputs_never_miss():
    # given outputs of mean 300 tokens, fixed or lognormal with p95 800, meeting a cluster of
    # 4 mixed steps every 100 decode gaps
    gaps = Lengths(1000, 300, None, 800).osl_gap_nodes()
    rate, size = np.array([0.01]), np.array([4.0])
    fixed = busy_share_quantile(rate, np.array([0.0]), size, np.array([299.0]), 0.99)[0]
    # then short outputs make the 99th percentile share larger than at a fixed 300 tokens
    assert busy_share_quantile(rate, np.array([0.0]), size, gaps, 0.99)[0] > 1.15 * fixed  # 1.21x
    # and a request population of one-token outputs (no gap) never exceeds any TPOT
    none = busy_share_quantile(rate, np.array([0.0]), size, np.zeros(16), 0.99)
    assert none[0] == pytest.approx(0, abs=4e-5)
    assert Lengths(1000, 300).osl_gap_nodes() is None


def test_a_poll_every_k_decode_steps_adds_its_uniform_wait_to_the_ttft_quantiles():
    # given one H100 serving Llama 3.1 8B polling every step, and every 30 decode steps
    every = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    sparse = CandidateArrays.build(
        LLAMA_8B, H100, "fp8", engine=EngineSettings(scheduler_recv_interval=30)
    )
    lengths = Lengths(1000, 300)
    fit = fit_memory(every, 1300)
    a, b = TailModel(every, fit, lengths), TailModel(sparse, fit, lengths)
    # when both are evaluated with 16 sequences in flight
    n = np.array([16.0])
    _, ttft_a, _, _ = a._at(n, (0.5, 0.95))
    _, ttft_b, _, _ = b._at(n, (0.5, 0.95))
    step = a._mean(n).pure_step.step_s[0]
    # then the poll adds 2q x (29 / 2) decode steps at quantile q (uniform over 0..29 steps);
    # the mean (q = 1/2) is the mean-value model's wait
    assert ttft_b[0.5][0] - ttft_a[0.5][0] == pytest.approx(14.5 * step, rel=0.05)
    assert ttft_b[0.95][0] - ttft_a[0.95][0] == pytest.approx(0.95 * 29 * step, rel=0.1)


def test_the_kv_holds_the_in_flight_count_at_the_tail_residence():
    # given Llama 3.1 8B fp8 on one H100 with 32k-token prompts (KV for a few dozen of them)
    # and a loose SLO (30 s TTFT, 250 ms TPOT at p90, 95 % goodput)
    c = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    lengths = Lengths(32000, 200)
    fit = fit_memory(c, 32200)
    model = TailModel(c, fit, lengths)
    slo = Slo(30000, 250, 90, 0.95)
    # when the highest rate meeting it is solved
    rate, binding = model.max_rate(slo)
    # then neither latency binds but the KV: at the tail's residence the sequences in flight
    # fill it, short of the closed-loop ceiling the mean alone would allow
    assert binding[0] == "memory"
    at = model.at_rate(rate, quantiles=(0.95,))
    in_flight_at_tail = rate[0] * (at.ttft_s[0.95][0] + 200 * at.tpot_s[0.95][0])
    assert in_flight_at_tail == pytest.approx(model.n_max[0], rel=0.02)
    assert at.ttft_s[0.95][0] < 30.0 and at.tpot_s[0.95][0] < 0.25
    assert rate[0] < 0.9 * model.saturation_rps()[0]


DEPLOYMENTS = [
    (model, gpu, tp)
    for model, tps in ((LLAMA_8B, (1, 2)), (LLAMA_70B, (2, 4, 8)))
    for gpu in (H100, B200)
    for tp in tps
]


@pytest.mark.parametrize(
    "slo",
    [
        Slo(2000, 50, 95, 0.0),
        Slo(500, 20, 99, 0.0),
        Slo(30000, 250, 90, 0.95),
        Slo(1000, 30, 99, 0.99),
    ],
)
def test_the_rate_search_stops_at_the_slo_boundary_of_each_row(slo):
    # given ten deployments (8B and 70B, H100 and B200, TP 1-8) with 4k prompts (p95 8k)
    models, gpus, tps = zip(*DEPLOYMENTS, strict=True)
    c = CandidateArrays.build(list(models), list(gpus), "fp8", tp=list(tps))
    model = TailModel(c, fit_memory(c, np.full(len(c), 4250.0)), Lengths(4000, 250, 8000, 500))
    # when the highest rate meeting the SLO is solved
    rate, binding = model.max_rate(slo)
    q = max(slo.percentile / 100, slo.goodput_target)
    # then just under it every row meets what binds it and just over it misses (N within
    # N_RTOL: the rate within a few parts in a thousand); the KV's limit is the sequences in
    # flight at the tail's residence
    checked = 0
    for side, factor in ((-1, 0.995), (1, 1.01)):
        at = model.at_rate(rate * factor, (q,))
        excess = {
            "ttft": at.ttft_s[q] * 1e3 / slo.ttft_ms,
            "tpot": at.tpot_s[q] * 1e3 / slo.tpot_ms,
            "memory": rate * factor * (at.ttft_s[q] + 250 * at.tpot_s[q]) / model.n_max,
        }
        for i in np.flatnonzero(rate > 0):
            if binding[i] in excess:
                ratio = excess[binding[i]][i]
                assert (ratio <= 1.001) if side < 0 else (ratio > 0.999), (i, binding[i], ratio)
                checked += 1
    assert checked >= 2 * 5


def test_a_rows_rate_is_its_own_whatever_is_solved_beside_it():
    # given Llama 3.1 70B fp8 at TP 2, 4 and 8 on B200 beside 8B on H100, one table
    c = CandidateArrays.build(LLAMA_70B, B200, "fp8", tp=np.array([2, 4, 8]))
    lengths = Lengths(2000, 300, 4000, 600)
    slo = Slo(1000, 30, 95, 0.0)
    fit = fit_memory(c, np.array([2300.0] * 3))
    # when the rate is solved for the three together and for each row alone
    together, bind_together = TailModel(c, fit, lengths).max_rate(slo)
    alone = [TailModel(c.take([i]), fit.take([i]), lengths).max_rate(slo) for i in range(3)]
    # then every row's rate and binding are the same bits (the root finder's iterations and
    # the open rows' evaluations are each row's own)
    assert together.tolist() == [r[0] for r, _ in alone]
    assert bind_together.tolist() == [b[0] for _, b in alone]


def _md1_waits_longer_than(t: float, rho: float) -> float:
    """Erlang's M/D/1 waiting time (service 1): ``P(W <= t) = (1 - rho) sum_{k <= t}
    (rho (k - t))^k / k! exp(-rho (k - t))``."""
    below = sum(
        (rho * (k - t)) ** k / math.factorial(k) * math.exp(-rho * (k - t))
        for k in range(int(math.floor(t)) + 1)
    )
    return 1.0 - (1.0 - rho) * below


@pytest.mark.parametrize("rho", [0.02, 0.2, 0.5, 0.8, 0.95])
def test_the_wait_is_erlangs_md1_law_at_every_load(rho):
    # given fixed prompts (service 1 s) at loads from 2 % to 95 %
    decay, _ = mg1_wait_tail(np.array([rho]), 0.0)
    wait = WaitLaw.solve(np.array([rho]), np.array([1.0]), 0.0, decay)
    # then P(wait > t) on the grid (and its exponential tail past 4 s) is Erlang's exact law
    # within 0.5 % of its value (or 1e-4) away from the residual's end at t = 1 s
    for t in (0.25, 0.5, 2.0, 5.0, 10.0):
        exact = _md1_waits_longer_than(t, rho)
        assert wait.exceeds(np.array([[t]]))[0, 0] == pytest.approx(exact, rel=5e-3, abs=1e-4)
    # and nobody waits with probability 1 - rho; the quantile inverts the law
    assert wait.exceeds(np.array([[0.0]]))[0, 0] == pytest.approx(rho)
    q = 0.99
    if rho > 0.01:
        assert wait.exceeds(wait.quantile(q)[:, None])[0, 0] == pytest.approx(1 - q, rel=1e-6)


def test_at_light_load_the_exponential_tail_alone_overstates_the_wait():
    # given 32k prompts at 1.5 % prefill load: 1.5 % of prompts wait, for a residual uniform
    # over the service D, so the p99 wait is D (1 - 0.01 / 0.015) = D / 3 (to first order)
    rho = np.array([0.015])
    decay, weight = mg1_wait_tail(rho, 0.0)
    wait = WaitLaw.solve(rho, np.array([1.0]), 0.0, decay)
    assert wait.quantile(0.99)[0] == pytest.approx(1 / 3, abs=0.02)
    # where the exponential tail alone has a weight of 0.19 (not 0.015) and says 0.49 D
    assert weight[0] == pytest.approx(0.19, abs=0.01)
    assert math.log(weight[0] / 0.01) / decay[0] == pytest.approx(0.49, abs=0.01)


def _exponential_wait(weight: float, rate: float) -> WaitLaw:
    """``P(wait > t) = weight exp(-rate t)`` on the law's grid (edges 0, then (j - 1/2) h)."""
    step = 0.01
    edges = np.concatenate([[0.0], (np.arange(1, WAIT_GRID + 1) - 0.5) * step])
    survival = weight * np.exp(-rate * edges)[None, :]
    return WaitLaw(np.array([step]), survival, np.array([rate]))


def _cost(per_token_s=1e-4, room=8000.0):
    one = np.array([1.0])
    return PromptCost(
        base_s=0.05 * one, room=room * one, step_s=0.01 * one, per_token_s=per_token_s * one,
        per_token2_s=0.0 * one, mean_per_token_s=per_token_s * one, full_step_s=0.81 * one,
    )  # fmt: skip


def test_a_prompt_shares_its_last_step_with_those_arriving_while_it_waits_and_prefills():
    cost, rho = _cost(), np.array([0.2])
    # given a prompt of 7,990 tokens that waited 0.1 s: arrivals bring 0.2 x 0.1 s of prompt
    # work, but its one step has room for only 10 more tokens (1 ms)
    co = cost.co_scheduled_s(np.array([[7990.0]]), np.array([[0.1]]), rho)
    assert co[0, 0] == pytest.approx(10 * 1e-4)
    # given 8,100 tokens (two steps): its second step also carries what arrived during its
    # first full step, 0.2 x (0.1 + 0.81) s = 0.182 s, within the 7,900 tokens' room
    co = cost.co_scheduled_s(np.array([[8100.0]]), np.array([[0.1]]), rho)
    assert co[0, 0] == pytest.approx(0.2 * 0.91)


def test_the_ttft_quantile_of_drawn_prompts_is_the_quantile_of_the_sum():
    # given prompts lognormal (mean 1,000, p95 3,000) costing 50 ms + 10 ms + 0.1 ms/token,
    # a prefill queue at 30 % load whose wait is exponential (weight 0.3, mean 0.2 s)
    lengths, cost, q = Lengths(1000, 300, 3000, None), _cost(), 0.95
    wait, rho = _exponential_wait(0.3, 5.0), np.array([0.3])
    quiet = _exponential_wait(0.0, 5.0)
    # when nothing waits, the quantile is the q-quantile prompt's own time (48 bins, the CDF
    # linear within each)
    alone = ttft_quantile(cost, quiet, np.zeros(1), lengths, np.zeros(1), q)[0]
    assert alone == pytest.approx(0.06 + 1e-4 * lengths.isl_quantile(q), rel=0.01)  # 0.4 %
    # then with the wait it matches a million-draw Monte Carlo of the same law (the wait's
    # co-scheduled work included), and lies below the sum of the two quantiles
    rng = np.random.default_rng(7)
    sigma = lengths.isl_sigma()
    x = np.exp(math.log(1000) - sigma**2 / 2 + sigma * rng.standard_normal(1_000_000))
    waits = np.where(rng.random(x.size) < 0.3, rng.exponential(0.2, x.size), 0.0)
    steps = np.ceil(x / 8000)
    own = 0.05 + 0.01 * steps + 1e-4 * x
    co = np.minimum(0.3 * (waits + (steps - 1) * 0.81), (steps * 8000 - x) * 1e-4)
    mixed = ttft_quantile(cost, wait, rho, lengths, np.zeros(1), q)[0]
    assert mixed == pytest.approx(np.quantile(own + waits + co, q), rel=0.01)
    assert mixed < alone + 1.3 * wait.quantile(q)[0]


def test_long_drawn_prompts_wait_and_share_steps_as_the_simulator_has_them():
    # given Llama 3.1 70B fp8 on 8 B200s (physics defaults), prompts lognormal of mean 4,000
    # (p95 8,000), outputs of 250 (p95 600)
    c = CandidateArrays.build(LLAMA_70B, B200, "fp8", tp=8)
    isl, osl = lengths_from_mean_p95(4000, 8000), lengths_from_mean_p95(250, 600)
    traffic = Traffic(1.0, 0.5, 4000, 250, 8000, 600)
    model = TailModel(c, fit_memory(c, 4250), Lengths(4000, 250, 8000, 600))
    for rate in (1.0, 2.0, 3.0, 4.0):
        # when the analytic p95 TTFT is taken at the rate the simulator runs (6,000 requests)
        run = Replica(c, isl, osl, traffic, Slo(500, 20, 95), 3, 6000).run(rate)
        simulated = np.percentile(run.ttft_s[run.measured], 95)
        analytic = model.at_rate(np.array([rate]), quantiles=(0.95,)).ttft_s[0.95][0]
        # then they agree within 10 % (+3.1, +3.0, -0.1, -2.7 %; the sum of the own and wait
        # quantiles was 12.3, 12.6, 6.9, 2.0 % high)
        assert analytic == pytest.approx(simulated, rel=0.10), rate
