"""The token-length law: lognormal through a mean and a 95th percentile, or fixed.

Every part of the core that draws, integrates or takes a quantile of prompt or output lengths
(the simulator's draws, the tail model's quantiles and nodes, the disaggregated plan's
percentile prompt) reads the law here, so one traffic description is one distribution.

A lognormal with mean ``m`` and 95th percentile ``p`` has

- ``sigma = z - sqrt(z^2 - 2 ln(p / m))`` (the smaller root of
  ``ln p = ln m - sigma^2 / 2 + z sigma``, ``z = 1.645``);
- ``mu = ln m - sigma^2 / 2``.

The p95 of a lognormal of mean ``m`` peaks at ``m exp(z^2 / 2) = 3.87 m`` (at ``sigma = z``):
no lognormal has a p95 below its mean or beyond that, and such inputs are refused
(``p95_limit_message`` names the limit for the input's validation).

Worked: mean 1,000 tokens, p95 3,000: ``sigma = 1.645 - sqrt(2.706 - 2 ln 3) = 0.9319``,
``mu = 6.908 - 0.434 = 6.474``, median ``exp(mu) = 648`` tokens, p99 ``exp(mu + 2.326 sigma)
= 5,662`` tokens.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

Z95 = 1.6448536269514722  # standard normal 95th percentile
#: The largest p95 / mean of a lognormal, ``exp(z95^2 / 2)`` (3.87).
MAX_P95_OVER_MEAN = math.exp(Z95 * Z95 / 2.0)


def p95_limit_message(mean: float, p95: float) -> str | None:
    """Why ``p95`` cannot be a lognormal's with this ``mean`` (None: it can)."""
    if p95 < mean:
        return f"p95 ({p95:g}) must be at least the mean ({mean:g})"
    if p95 > MAX_P95_OVER_MEAN * mean:
        return (
            f"p95 ({p95:g}) can be at most {MAX_P95_OVER_MEAN:.2f}x the mean ({mean:g}), "
            f"i.e. {MAX_P95_OVER_MEAN * mean:g}: no lognormal length law is more skewed"
        )
    return None


def lognormal_sigma(mean: float, p95: float) -> float:
    """``sigma`` of the lognormal with this mean and 95th percentile (the smaller root);
    a p95 below the mean or beyond ``MAX_P95_OVER_MEAN`` times it is a ``ValueError``."""
    problem = p95_limit_message(mean, p95)
    if problem:
        raise ValueError(problem)
    disc = Z95 * Z95 - 2.0 * math.log(p95 / mean)
    return Z95 - math.sqrt(max(disc, 0.0))  # max: rounding at the limit itself


def is_fixed(mean: float, p95: float | None) -> bool:
    """Every request the same length: no p95, or a p95 equal to the mean."""
    return p95 is None or p95 == mean


def length_sigma(mean: float, p95: float | None) -> float:
    """The law's ``sigma``: 0 when the length is fixed (``is_fixed``), else lognormal."""
    return 0.0 if is_fixed(mean, p95) else lognormal_sigma(mean, p95)


def lognormal_mu(mean: float, sigma: float) -> float:
    """``mu = ln mean - sigma^2 / 2``: the lognormal of this ``sigma`` has mean ``mean``."""
    return math.log(mean) - 0.5 * sigma * sigma


def lognormal_at_scores(mean: float, sigma: float, score):
    """Lengths at standard-normal ``score``s of the lognormal with this mean and ``sigma``,
    ``exp(mu + sigma * score)`` (tokens; an array for an array of scores). Worked: mean
    1,000, sigma 0.9319, score 2.326 gives 5,662 tokens (the module's p99)."""
    return np.exp(lognormal_mu(mean, sigma) + sigma * np.asarray(score, dtype=np.float64))


def length_quantile(mean: float, p95: float | None, q: float) -> float:
    """The ``q`` quantile of the length law (tokens; the mean when fixed)."""
    sigma = length_sigma(mean, p95)
    if sigma == 0.0:
        return float(mean)
    return float(lognormal_at_scores(mean, sigma, ndtri(q)))
