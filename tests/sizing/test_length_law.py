"""The token-length law every part of the core reads (sizing/length_law.py)."""

import math

import numpy as np
import pytest

from sizing.length_law import (
    MAX_P95_OVER_MEAN,
    length_quantile,
    length_sigma,
    lognormal_at_scores,
    lognormal_mu,
    lognormal_sigma,
    p95_limit_message,
)
from sizing.simulate import LengthDist
from sizing.tail_model import Lengths


def test_the_worked_example():
    # given mean 1,000 tokens and p95 3,000
    sigma = lognormal_sigma(1000.0, 3000.0)
    # then sigma = 1.645 - sqrt(1.645^2 - 2 ln 3), mu = ln 1000 - sigma^2 / 2
    assert sigma == pytest.approx(1.6448536 - math.sqrt(1.6448536**2 - 2 * math.log(3)))
    assert sigma == pytest.approx(0.93189, abs=1e-5)
    assert lognormal_mu(1000.0, sigma) == pytest.approx(6.47355, abs=1e-5)
    # and the quantiles: median 648, p95 the given 3,000, p99 5,662 tokens
    assert length_quantile(1000.0, 3000.0, 0.5) == pytest.approx(647.78, abs=0.01)
    assert length_quantile(1000.0, 3000.0, 0.95) == pytest.approx(3000.0)
    assert length_quantile(1000.0, 3000.0, 0.99) == pytest.approx(5661.5, abs=0.1)
    # and the same lengths at the Normal scores the tail model's nodes use
    scores = np.array([0.0, 1.6448536, 2.3263479])
    assert lognormal_at_scores(1000.0, sigma, scores) == pytest.approx(
        [647.78, 3000.0, 5661.5], abs=0.1
    )


def test_a_fixed_length_has_no_spread():
    for p95 in (None, 1000.0):
        assert length_sigma(1000.0, p95) == 0.0
        assert length_quantile(1000.0, p95, 0.99) == 1000.0


def test_the_limits_of_a_lognormal_are_named():
    # the p95 of a lognormal of mean m peaks at m exp(z^2 / 2) (at sigma = z)
    assert round(MAX_P95_OVER_MEAN, 4) == 3.8681
    assert lognormal_sigma(1000.0, 1000.0 * MAX_P95_OVER_MEAN) == pytest.approx(1.6448536)
    assert p95_limit_message(1000.0, 3868.0) is None
    assert "at least the mean (1000)" in p95_limit_message(1000.0, 900.0)
    assert "at most 3.87x the mean (1000), i.e. 3868.13" in p95_limit_message(1000.0, 3869.0)
    for p95 in (900.0, 3869.0):
        with pytest.raises(ValueError):
            lognormal_sigma(1000.0, p95)


def test_the_simulator_and_the_tail_model_read_one_law():
    # given one traffic description
    lengths = Lengths(isl_mean=1000.0, osl_mean=300.0, isl_p95=3000.0, osl_p95=800.0)
    # then the tail model's quantile is the law's, and the simulator's draws follow it
    assert lengths.isl_quantile(0.9) == length_quantile(1000.0, 3000.0, 0.9)
    x = LengthDist(1000.0, "lognormal", 3000.0).sample(200_000, np.random.default_rng(1))
    assert np.percentile(x, 90) == pytest.approx(lengths.isl_quantile(0.9), rel=0.02)
