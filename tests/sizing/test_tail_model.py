"""The analytic percentile model's queueing pieces against closed forms derived by hand."""

import math

import numpy as np
import pytest
from scipy.special import gammainc
from specs_catalog import H100, LLAMA_8B

from sizing.candidates import CandidateArrays
from sizing.memory import fit_memory
from sizing.specs import EngineSettings, Slo
from sizing.tail_model import Lengths, TailModel, busy_share_quantile, mg1_wait_tail


def test_mm1_wait_tail_is_exact():
    # given exponential prompt service (cs2 = 1) at loads 0.1 .. 0.99
    rho = np.array([0.1, 0.5, 0.9, 0.99])
    # when the Cramer-Lundberg decay and weight are solved
    decay, weight = mg1_wait_tail(rho, 1.0)
    # then they are M/M/1's: P(wait > t) = rho exp(-(1 - rho) t / D)
    np.testing.assert_allclose(decay, 1.0 - rho, rtol=1e-9)
    np.testing.assert_allclose(weight, rho, rtol=1e-9)


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
