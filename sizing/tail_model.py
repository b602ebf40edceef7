"""The analytic percentile model: tail latencies of a replica under open-loop Poisson load.

The mean-value chain (``operating``) answers "what batch meets the *mean* latencies"; an SLO
is stated at a percentile with a goodput target, and a replica fed by random arrivals sees a
fluctuating batch and a prefill queue. This module predicts, in closed form and vectorized
over candidates, the request rate per replica at which the SLO percentile and the goodput
quantile are met, and the p50/p95/p99 of TTFT and TPOT at a given load. The discrete-event
simulator (``simulate``) is the reference; the five tail constants below are fitted to it
(``scripts/tail_agreement.py`` regenerates the fit and the agreement table in
docs/tail-agreement.md).

Per DP rank at rate ``lam`` (requests/s), prompts of mean ``isl``, outputs of mean ``osl``:

- In flight (Little): ``N = lam * W(N)`` with ``W(N) = TTFT(N) + osl * TPOT(N)``; solved for N.
  The mean TPOT at N sequences comes from ``operating.closed_loop`` (same step times).
- TPOT at quantile q: the batch a request decodes in fluctuates around N; with Poisson arrivals
  the count in service is close to Poisson(N), so its q-quantile is ``N + a * z_q * sqrt(N)`` and
  the decode steps are taken there (``a = tpot_spread``), with the request's own context at its
  q-quantile (``isl + osl / 2`` over requests; attention reads its own cache every step). On top,
  the share of the request's decode steps that carry another prompt's chunk (each costs
  ``t_mixed - t_pure`` more): prompts that reach the engine while the request waits and prefills
  are queued behind it and prefilled during its decode, and so are those arriving during its pure
  decode steps; each such arrival starts a busy period of the prefill queue (rho its load) that
  prefills ``1 / (1 - rho)`` prompts on average with ``E[C^2] = 1 / (1 - rho)^3`` (M/D/1's busy
  period), ``n_chunks`` mixed steps each. The count of mixed steps a request meets is that
  compound Poisson sum, taken as a Poisson count of clusters of
  ``d n_chunks (1 + cs^2) / (1 - rho)^e`` steps with the same mean (variance matched at
  ``d = tpot_mix = 1``, ``e = tpot_busy = 2``; the fit takes d = 1.5 and e = 1, a cluster of 1.5
  mean busy periods: a request's decode window cuts the longest short). Its q-quantile over
  requests is solved on the mixture over the output-length distribution (a request of ``o`` tokens
  shares the steps over ``o - 1`` gaps; short outputs make the tail), and the window before the
  first token is the q-quantile TTFT (a long wait is a busy period). A request that meets no
  cluster sees the unmixed step: where fewer than ``1 - q`` of requests meet one, that is the
  tail. Llama 3.1 70B fp8 TP2 on H100, 32k prompts, 0.091 req/s: simulated p99 TPOT 91 ms (48,000
  requests), this model 96 ms, the Normal spread around the mean mixed share it replaced 124 ms
  (Llama 3.1 405B on B200 at 0.004 req/s: 45, 30 and 95 ms).
- TTFT at quantile q: the engine's front-end latency, the rest of the step in progress when the
  request arrives (uniform over a decode step for the ``1 - exp(-N)`` of arrivals that find the
  engine stepping; an idle engine starts at once), (an engine that polls for requests every
  k decode steps) the wait for the next poll, uniform over ``k - 1`` steps, ``2 q`` times its mean
  ``operating.recv_wait_s``, the own prefill, the wait behind other prompts, and the other
  prompts' work that joins the request's last prefill step. Prompt work arrives as a Poisson
  stream into a server of ``mu = (budget - decodes) / t_full`` tokens/s (``t_full`` the step whose
  room is full of prompt tokens) with load ``rho = lam * isl / mu``. The wait is M/G/1's
  (``WaitLaw.solve``): none with probability ``1 - rho``, else the residual of the prompt in
  service plus a wait of the same law (Pollaczek-Khinchine), solved on a grid for lognormal
  service of mean ``D = isl / mu`` (fixed for fixed prompts), beyond it the exponential tail
  ``C exp(-theta t)`` (``mg1_wait_tail``). The exponential tail alone put a 32k prompt's p99 wait
  at 0.49 D where 1.5 % of prompts wait (the exact 0.35 D): its weight C tends to 1 / (x - 1),
  not to rho, as the load falls. Prompts that arrive
  while the request waits and while its earlier chunks run are scheduled behind it in the same
  step, up to the room its last chunk leaves, so that step lasts ``rho`` s longer per s of that
  window (``PromptCost.co_scheduled_s``). The own prefill of ``x`` prompt tokens is one formula
  (``PromptCost.own_s``): ``n(x)`` steps (``x`` over the room the decodes leave) plus the
  tokens' own cost over the pure step, the mixed step's extra time per prompt token it carries
  (so the last chunk costs only its remainder's tokens), for drawn prompt lengths linear
  (GEMMs) plus quadratic (attention) in x, read off the chain's step at the mean and the
  q-quantile prompt; for drawn lengths TTFT is the q-quantile of the sum of own, wait
  and joined work over the prompt law (``ttft_quantile``), not the sum of their q-quantiles,
  which is the quantile only when the longest prompts always wait longest (Llama 3.1 70B fp8 TP8
  on B200, prompts of mean 4,000 tokens (p95 8,000), 1 req/s: simulated p95 TTFT 466 ms, this
  model 463, the sum of the quantiles 492, the law without the joined work 422). ``b =
  ttft_wait`` scales the wait and
  ``c = ttft_base`` the own prefill.
- The KV holds the tail (Little at the tail): ``lam * (TTFT_q + osl * TPOT_q) <= n_max``, the
  sequences in flight while requests take their q-quantile residence. Slow periods (a prefill busy
  period makes every decode step a mixed one) pile sequences up, and an engine whose KV fills
  preempts the newest and recomputes it, which keeps the steps mixed: above some rate the
  simulator flips into that state and its queue never drains (Llama 3.1 8B fp8 on H100, 32k
  prompts, KV for 30 of them: 65 preemptions in 6,000 requests at 0.975 req/s, 745 at 1.1, 3,939
  at 1.2 with the running count pinned at 30). The mean in flight alone filled the KV only at the
  closed-loop ceiling (1.44 req/s there); this condition stops at 1.12, the simulator's longest
  search at 1.03. With short prompts it stops a replica short of a full KV (Qwen3 32B bf16 TP2 on
  H100, 1k prompts, p99: 10.6 -> 9.55 req/s, the simulator 8.53; at 10.6 it preempts 6,732 times
  in 48,000 requests and its queue never drains).
- The SLO is met at rate lam when ``TTFT_q <= TTFT_SLO`` and ``TPOT_q <= TPOT_SLO`` at the SLO
  percentile and at the goodput quantile (the simulator's test: the request at the goodput
  quantile of ``max(TTFT/SLO, TPOT/SLO)`` must meet both); ``q = max(percentile, goodput)``.
  Both tails grow with N, so the largest N meeting them is found by a bracketing root finder
  on the tightest limit's margin (``max_rate``), and
  ``lam* = N* / W(N*)`` (times DP for the instance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize.elementwise import find_root
from scipy.special import gammainc, ndtr, ndtri

from sizing.candidates import CandidateArrays
from sizing.length_law import length_quantile, length_sigma, lognormal_at_scores
from sizing.memory import MemoryFit
from sizing.operating import batch_limit, closed_loop, prompt_chunk_tokens, recv_wait_s
from sizing.specs import Slo
from sizing.steptime import decode_step

BISECTION_STEPS = 16  # on log N (at_rate): 2e-4 of N over its ~14 e-folds
N_RTOL = 1e-3  # the in-flight count N the rate searches find, within this share (a rate's
# fourth digit; a replica count moves only where a fleet sits within 0.1 % of a whole replica)
MAX_MARGIN = 50.0  # the max_rate search's score (a log ratio) is clipped to +-this
MG1_BISECTION_STEPS = 30  # on the decay rate: ~1e-9 of its range
TPOT_OUTPUT_NODES = 16  # output-length quantiles the TPOT tail averages over
MIXTURE_BISECTION_STEPS = 14  # on the mixed-step share: 6e-5 of a request's steps (< 0.1 ms TPOT)
SUM_QUANTILE_BISECTION_STEPS = 10  # on TTFT between its bounds: 1e-3 of a wait quantile
WAIT_GRID = 64  # bins of the M/G/1 wait's grid
WAIT_GRID_RESIDUALS = 8.0  # mean residuals the grid spans (an exponential tail beyond)
OWN_LAW_NODES = 48  # prompt lengths the own-prefill law integrates over (Normal score -5..5)
OWN_LAW_Z = 5.0
MAX_BUSY_RHO = 0.95  # the busy period's factors stop at rho 0.95 (by then every step of a
# request's decode carries a chunk, the share's cap of 1)


@dataclass(frozen=True)
class TailConstants:
    """The model's fitted terms (dimensionless) and where they come from."""

    # fitted by scripts/tail_agreement.py (docs/tail-agreement.md) against the simulator at
    # 48,000 requests per probe, by the most grid points sized within 10 % or 1 replica: the
    # batch's spread (Poisson's 1 would ignore that a larger batch decodes slower and stays
    # longer), the cluster's scale and the busy period's exponent (the physics' 1 and 2 hold
    # for a whole busy period counted in prompts; a request's decode window cuts the long
    # ones short, and the grid takes 1.5 and 1: a cluster is 1.5 mean busy periods); the two
    # TTFT terms stay at the physics' 1
    tpot_spread: float = 1.6
    ttft_wait: float = 1.0
    ttft_base: float = 1.0
    tpot_mix: float = 1.5
    tpot_busy: float = 1.0
    source: str = "fit to the simulator on the grid of scripts/tail_agreement.py"


DEFAULT_TAILS = TailConstants()


@dataclass(frozen=True)
class Lengths:
    """Mean and p95 of prompt and output tokens (p95 None: every request the same)."""

    isl_mean: float
    osl_mean: float
    isl_p95: float | None = None
    osl_p95: float | None = None

    def isl_sigma(self) -> float:
        return length_sigma(self.isl_mean, self.isl_p95)

    def isl_quantile(self, q: float) -> float:
        """q-quantile of the prompt length (lognormal through mean and p95, as simulated)."""
        return length_quantile(self.isl_mean, self.isl_p95, q)

    def context_mean(self) -> float:
        """Mean context a request decodes at, ``isl + osl / 2`` (tokens)."""
        return self.isl_mean + 0.5 * self.osl_mean

    def context_quantile(self, q: float) -> float:
        """q-quantile of a request's mean decode context ``isl + osl / 2`` over requests: the
        sum of the two lognormals as one of the same mean and variance (Fenton-Wilkinson)."""
        var = 0.0
        for mean, sigma, share in (
            (self.isl_mean, self.isl_sigma(), 1.0),
            (self.osl_mean, length_sigma(self.osl_mean, self.osl_p95), 0.5),
        ):
            var += (share * mean) ** 2 * math.expm1(sigma * sigma)
        mean = self.context_mean()
        if var == 0:
            return mean
        sigma = math.sqrt(math.log1p(var / mean**2))
        return float(lognormal_at_scores(mean, sigma, ndtri(q)))

    def osl_gap_nodes(self) -> np.ndarray | None:
        """Decode gaps ``o - 1`` at ``TPOT_OUTPUT_NODES`` equal-probability quantiles of the
        output length (lognormal through mean and p95, rounded as the simulator draws
        whole tokens); None when every output is the same length."""
        sigma = length_sigma(self.osl_mean, self.osl_p95)
        if sigma == 0:
            return None
        u = (np.arange(TPOT_OUTPUT_NODES) + 0.5) / TPOT_OUTPUT_NODES
        lengths = np.maximum(np.rint(lognormal_at_scores(self.osl_mean, sigma, ndtri(u))), 1.0)
        return lengths - 1.0


def mg1_wait_tail(rho: np.ndarray, cs2: float) -> tuple[np.ndarray, np.ndarray]:
    """Decay rate (per mean service time) and weight of an M/G/1 queue's waiting-time tail,
    ``P(wait > t) ~ weight * exp(-decay * t / D)`` (Cramer-Lundberg).

    The decay ``x = theta D`` solves ``rho (M(x) - 1) = x`` for service times with mean D
    and squared variation ``cs2``, taken as gamma (``M(x) = (1 - x cs2)^(-1/cs2)``; for
    ``cs2 = 0``, deterministic ``e^x``); ``weight = (1 - rho) / (rho M'(x) - 1)``. Checks:
    M/M/1 (cs2 = 1) gives ``x = 1 - rho`` and ``weight = rho``; as rho -> 1 both tend to
    the heavy-traffic ``x = 2 (1 - rho) / (1 + cs2)``. At light load the exact decay is
    much faster than the heavy-traffic one (M/D/1 at rho 0.1: x = 3.6, not 1.8).
    """
    rho = np.clip(np.asarray(rho, dtype=np.float64), 1e-9, 0.999)

    def mgf(x):
        if cs2 == 0:
            return np.exp(x), np.exp(x)
        base = 1.0 - x * cs2
        return base ** (-1.0 / cs2), base ** (-1.0 / cs2 - 1.0)

    # rho (M(x) - 1) - x is negative just above 0 and grows to +inf at the upper end
    lo = np.zeros_like(rho)
    hi = np.full_like(rho, 1.0 / cs2 * (1 - 1e-12) if cs2 > 0 else 60.0)
    for _ in range(MG1_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        above = rho * (mgf(mid)[0] - 1.0) - mid > 0
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    x = np.maximum(0.5 * (lo + hi), 1e-12)
    slope = rho * mgf(x)[1]
    weight = np.clip((1.0 - rho) / np.maximum(slope - 1.0, 1e-12), 0.0, 1.0)
    return x, weight


def busy_share_quantile(
    clusters_per_gap, lead_clusters, cluster_steps, gaps: np.ndarray, q: float
) -> np.ndarray:
    """The share ``x`` of a request's decode steps that carry other prompts' chunks at
    quantile ``q`` over requests, per row: ``mean_j P(K_j > x g_j / s) = 1 - q`` with ``K_j``
    Poisson of mean ``lead + clusters_per_gap * g_j`` (clusters of ``s`` mixed steps;
    ``g_j`` the decode gaps at the output-length nodes; a one-token output has no TPOT and
    never misses, as the simulator counts). Continuous in ``x`` (``P(K > k)`` is the
    regularized lower gamma ``P(k + 1, m)``, equal to the Poisson tail at whole ``k``);
    capped at 1, every step mixed."""
    per_gap = np.asarray(clusters_per_gap, dtype=np.float64)[:, None]
    lead = np.asarray(lead_clusters, dtype=np.float64)[:, None]
    size = np.maximum(np.asarray(cluster_steps, dtype=np.float64), 1e-12)[:, None]
    g = np.maximum(gaps, 1.0)[None, :]
    decodes = (gaps > 0)[None, :]
    mean = lead + per_gap * g
    clusters_per_share = g / size
    lo = np.zeros(per_gap.shape[0])
    hi = np.ones(per_gap.shape[0])
    for _ in range(MIXTURE_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        tail = np.mean(decodes * gammainc(mid[:, None] * clusters_per_share + 1.0, mean), axis=1)
        above = tail > 1.0 - q
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class WaitLaw:
    """A prompt's wait in the prefill queue, per row: M/G/1's waiting time solved on a grid
    (``solve``), its survival ``P(wait > w)`` at the grid's edges, and beyond the grid the
    exponential tail of ``mg1_wait_tail`` at ``rate``."""

    step_s: np.ndarray  # the grid's spacing per row
    survival: np.ndarray  # rows x (WAIT_GRID + 1): P(wait > t) at t = 0 and (j - 1/2) step_s
    rate: np.ndarray  # 1/s: the tail's decay beyond the grid

    @classmethod
    def solve(cls, rho, mean_s, sigma: float, rate) -> WaitLaw:
        """Pollaczek-Khinchine: a prompt finds the queue empty with probability ``1 - rho``,
        else it waits out the residual ``R`` of the prompt in service and then, as that
        prompt did, a wait of the same law: ``W = 0`` (``1 - rho``) or ``R + W'`` (``rho``),
        with ``P(R > t) = E[(S - t)+] / E[S]`` for the service ``S`` (lognormal of mean
        ``mean_s`` and log-sd ``sigma``; fixed at sigma 0). On a grid of ``WAIT_GRID`` points
        over ``WAIT_GRID_RESIDUALS`` mean residuals the renewal equation is a power series'
        inverse."""
        rho = np.asarray(rho, dtype=np.float64)
        mean_s = np.maximum(np.asarray(mean_s, dtype=np.float64), 1e-12)
        cs2 = math.exp(sigma * sigma) - 1.0
        step = WAIT_GRID_RESIDUALS * mean_s * (1.0 + cs2) / 2.0 / WAIT_GRID
        # R's mass about each grid point k step (the bins centred on them), so that the
        # recursion's lags are R's values, not its bins' lower ends
        edges = step[:, None] * np.maximum(np.arange(WAIT_GRID + 1) - 0.5, 0.0)[None, :]
        residual = -np.diff(_residual_survival(edges / mean_s[:, None], sigma), axis=1)
        # W's mass m solves m = (1 - rho) e_0 + rho (r * m) (r the residual's mass, * the
        # convolution): in power series, M(z) = (1 - rho) / (1 - rho R(z)), truncated to
        # the grid
        series = -rho[:, None] * residual
        series[:, 0] += 1.0
        mass = (1.0 - rho)[:, None] * _series_inverse(series)
        # the wait's mass sits at the points k step: P(wait > t) falls by it across the bin
        # about each point, so the survival at the bins' edges (k + 1/2) step, with rho at 0
        survival = np.empty((len(rho), WAIT_GRID + 1))
        survival[:, 0] = rho
        survival[:, 1:] = np.clip(1.0 - np.cumsum(mass, axis=1), 0.0, 1.0)
        return cls(step, np.minimum(survival, rho[:, None]), np.asarray(rate, dtype=np.float64))

    def exceeds(self, w: np.ndarray) -> np.ndarray:
        """``P(wait > w)`` (rows x columns), linear between the grid's edges."""
        at = np.maximum(w, 0.0) / self.step_s[:, None]
        # edge 0 at 0, edge j at (j - 1/2) steps
        position = np.where(at < 0.5, 2.0 * at, at + 0.5)
        k = np.minimum(np.floor(position), WAIT_GRID - 1).astype(np.int64)
        frac = np.minimum(position - k, 1.0)
        lo = np.take_along_axis(self.survival, k, axis=1)
        hi = np.take_along_axis(self.survival, k + 1, axis=1)
        end = (WAIT_GRID - 0.5) * self.step_s[:, None]
        beyond = self.survival[:, -1:] * np.exp(-self.rate[:, None] * (np.maximum(w, 0.0) - end))
        return np.where(position < WAIT_GRID, lo + frac * (hi - lo), beyond)

    def quantile(self, q: float) -> np.ndarray:
        """The q-quantile of the wait (s): 0 where fewer than ``1 - q`` of prompts wait."""
        tail = 1.0 - q
        over = self.survival > tail  # non-increasing along each row
        count = over.sum(axis=1)  # edges above 1 - q: the quantile lies past edge count - 1
        k = np.clip(count - 1, 0, WAIT_GRID - 1)
        lo = np.take_along_axis(self.survival, k[:, None], axis=1)[:, 0]
        hi = np.take_along_axis(self.survival, k[:, None] + 1, axis=1)[:, 0]
        frac = np.clip((lo - tail) / np.maximum(lo - hi, 1e-300), 0.0, 1.0)
        position = k + frac
        inside = np.where(position < 1.0, 0.5 * position, position - 0.5) * self.step_s
        end = (WAIT_GRID - 0.5) * self.step_s
        with np.errstate(divide="ignore"):
            past = end + np.log(np.maximum(self.survival[:, -1], 1e-300) / tail) / self.rate
        return np.where(count == 0, 0.0, np.where(count > WAIT_GRID, past, inside))


def _series_inverse(a: np.ndarray) -> np.ndarray:
    """Per row, the power series ``1 / A(z)`` to as many terms as ``a`` has (``a[:, 0]`` not
    0): Newton's iteration ``B <- B (2 - A B)``, doubling the terms each round, the products
    by FFT (6 rounds for 64 terms instead of 64 sequential sums)."""
    terms = a.shape[1]
    b = 1.0 / a[:, :1]
    n = 1
    while n < terms:
        n = min(2 * n, terms)
        correction = -_series_product(a[:, :n], b, n)
        correction[:, 0] += 2.0
        b = _series_product(b, correction, n)
    return b


def _series_product(x: np.ndarray, y: np.ndarray, terms: int) -> np.ndarray:
    """Per row, the first ``terms`` coefficients of the product of two power series."""
    size = 1 << int(x.shape[1] + y.shape[1] - 1).bit_length()
    full = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(y, size), size)
    return full[:, :terms]


def _residual_survival(t_over_mean: np.ndarray, sigma: float) -> np.ndarray:
    """``P(R > t)`` of a service's equilibrium residual, ``E[(S - t)+] / E[S]``, at ``t`` in
    mean services: ``1 - t`` up to 1 for a fixed service; for a lognormal one Black's
    formula at the forward 1: ``Phi(d1) - t Phi(d1 - sigma)``, ``d1 = (sigma^2 / 2 - ln t)
    / sigma``."""
    t = np.maximum(t_over_mean, 0.0)
    if sigma == 0:
        return np.clip(1.0 - t, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        d1 = (0.5 * sigma * sigma - np.log(np.maximum(t, 1e-300))) / sigma
    return np.clip(ndtr(d1) - t * ndtr(d1 - sigma), 0.0, 1.0)


@dataclass(frozen=True)
class PromptCost:
    """A prompt's prefill time without waiting, per row: ``own(x) = base_s + n(x) step_s +
    a x + b x^2`` for ``x`` prefilled tokens, ``n(x) = ceil(x / room)`` steps (``room``
    what the decodes leave of the step's token budget), ``a`` its GEMMs' and ``b`` its
    attention's cost per token (``TailModel._prompt_cost``)."""

    base_s: np.ndarray
    room: np.ndarray
    step_s: np.ndarray
    per_token_s: np.ndarray  # a
    per_token2_s: np.ndarray  # b
    mean_per_token_s: np.ndarray  # the mean prompt's cost per token: others' tokens
    full_step_s: np.ndarray  # a step whose room is full of prompt tokens

    def own_s(self, x: np.ndarray) -> np.ndarray:
        """``own`` at prefilled tokens ``x`` (rows x nodes)."""
        steps = np.ceil(np.maximum(x, 1.0) / self.room[:, None])
        work = x * self.per_token_s[:, None] + x * x * self.per_token2_s[:, None]
        return self.base_s[:, None] + steps * self.step_s[:, None] + work

    def lead_and_room_s(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For prompts of ``x`` prefilled tokens (rows x nodes, s): how long its earlier
        chunks run before its last step, and the time the room its last chunk leaves holds."""
        steps = np.ceil(np.maximum(x, 1.0) / self.room[:, None])
        lead = (steps - 1.0) * self.full_step_s[:, None]
        free = np.maximum(steps * self.room[:, None] - x, 0.0) * self.mean_per_token_s[:, None]
        return lead, free

    def co_scheduled_s(self, x: np.ndarray, wait_s: np.ndarray, rho: np.ndarray) -> np.ndarray:
        """Other prompts' work in the request's last prefill step (rows x nodes, s): the
        prompts that arrive while it waits and while its earlier chunks run (``rho`` s of
        prefill work per s) are scheduled behind it in the same step, up to the room its
        last chunk leaves; that step lasts until their tokens are done too."""
        lead, free = self.lead_and_room_s(x)
        return np.minimum(rho[:, None] * (wait_s + lead), free)


def prompt_law_nodes(lengths: Lengths, cached: np.ndarray):
    """Prefilled tokens of a drawn prompt on ``OWN_LAW_NODES`` bins evenly spaced in the
    Normal score over +-``OWN_LAW_Z`` (fine in the tail): the bins' edges and midpoints
    (rows x bins), each bin's probability (the tails beyond fold into the end bins) and the
    edges' scores."""
    z = np.linspace(-OWN_LAW_Z, OWN_LAW_Z, OWN_LAW_NODES + 1)
    cdf = ndtr(z)
    cdf[0], cdf[-1] = 0.0, 1.0
    sigma = lengths.isl_sigma()

    def tokens(score):
        drawn = lognormal_at_scores(lengths.isl_mean, sigma, score)
        return np.maximum(drawn[None, :] - cached[:, None], 0.0)

    return tokens(z), tokens(0.5 * (z[1:] + z[:-1])), np.diff(cdf)[None, :], z[None, :]


def ttft_quantile(cost: PromptCost, wait: WaitLaw, rho, lengths: Lengths, cached, q: float):
    """The q-quantile of TTFT for drawn prompt lengths: ``own(x) + wait + co(x, wait)``
    with the prompt ``x``, independent of the wait (the work queued ahead of it), and
    ``co`` the other prompts' work that joins its last step (``PromptCost.co_scheduled_s``).
    Not the sum of the terms' q-quantiles: that is the quantile only when long prompts
    always wait longest. Solves ``P(TTFT > t) = 1 - q`` by bisection on t; within a bin
    the no-wait TTFT is spread evenly between its edges' (the CDF interpolated linearly)."""
    edges, mids, mass, z = prompt_law_nodes(lengths, cached)
    at_edges = cost.own_s(edges) + cost.co_scheduled_s(edges, np.zeros_like(edges), rho)
    lo_e = np.minimum(at_edges[:, :-1], at_edges[:, 1:])
    hi_e = np.maximum(at_edges[:, :-1], at_edges[:, 1:])
    own = cost.own_s(mids)
    # co = min(rho (wait + lead), cap): the wait w* at which TTFT reaches t solves a
    # piecewise-linear equation, on the linear piece or the capped one
    lead, cap = cost.lead_and_room_s(mids)
    r = rho[:, None]
    waits_at_all = wait.exceeds(np.zeros_like(own))
    # bracket: the q-quantile prompt without waiting is passed by at least 1 - q of requests;
    # the prompt and the wait each at 1 - (1 - q) / 2 pass at most 1 - q together
    # (on the edges either side of the two quantiles: the bins' own spread)
    bin_z = 2.0 * OWN_LAW_Z / OWN_LAW_NODES
    deeper = 1.0 - 0.5 * (1.0 - q)
    lo = np.min(np.where(z >= ndtri(q) - bin_z, at_edges, np.inf), axis=1)
    hi = np.max(np.where(z <= ndtri(deeper) + bin_z, at_edges, -np.inf), axis=1)
    hi = np.maximum(hi, lo) + wait.quantile(deeper) * (1.0 + rho)
    for _ in range(SUM_QUANTILE_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        left = mid[:, None] - own
        linear = (left - r * lead) / (1.0 + r)
        w_star = np.where(r * (linear + lead) <= cap, linear, left - cap)
        no_wait = np.clip((hi_e - mid[:, None]) / np.maximum(hi_e - lo_e, 1e-15), 0.0, 1.0)
        waited = np.where(w_star >= 0.0, wait.exceeds(w_star), waits_at_all)
        above = np.sum(mass * (no_wait * (1.0 - waits_at_all) + waited), axis=1) > 1.0 - q
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return hi


def _search_roots(f, low: np.ndarray, high: np.ndarray, open_rows: np.ndarray) -> None:
    """Per row where ``open_rows``, search the root of ``f(x, rows)`` between ``low`` and
    ``high`` (its signs differ there) to within ``N_RTOL`` of x by Chandrupatla's method
    (scipy), which calls ``f`` on the rows still open only (``rows``: their indices, so ``f``
    can evaluate those rows alone: a row's cost is its own). ``f`` keeps what it needs of the
    points it is called at (``TailModel.max_rate`` the largest meeting the SLO, not the
    interpolated root)."""
    rows = np.flatnonzero(open_rows)
    if len(rows):
        find_root(
            f, (low[rows], high[rows]), args=(rows,),
            tolerances={"xrtol": N_RTOL, "xatol": 0.0, "fatol": 0.0, "frtol": 0.0},
        )  # fmt: skip


@dataclass(frozen=True)
class TailPoint:
    """Per candidate at one load (arrays of n; seconds; rates per instance)."""

    rate_rps: np.ndarray
    in_flight: np.ndarray  # mean sequences per DP rank
    ttft_s: dict[float, np.ndarray]  # quantile -> seconds
    tpot_s: dict[float, np.ndarray]
    prefill_rho: np.ndarray
    stable: np.ndarray  # bool: the load is below the replica's saturation


class TailModel:
    """Tail latencies of n candidates (rows of ``c``) under open-loop Poisson arrivals."""

    def __init__(
        self,
        c: CandidateArrays,
        fit: MemoryFit,
        lengths: Lengths,
        constants: TailConstants = DEFAULT_TAILS,
    ):
        self.c, self.fit, self.lengths, self.k = c, fit, lengths, constants
        n = len(c)
        self.n_max = np.maximum(np.floor(batch_limit(c, fit) / c.dp), 1.0)  # per rank
        self.isl = np.full(n, float(lengths.isl_mean))
        self.osl = np.full(n, max(float(lengths.osl_mean), 1.0))
        sigma = lengths.isl_sigma()
        self.isl_cs2 = math.exp(sigma * sigma) - 1.0
        # decode gaps ``o - 1`` a request's TPOT averages over: at the output-length nodes, or
        # the one fixed output's
        nodes = lengths.osl_gap_nodes()
        self.decode_gaps = nodes if nodes is not None else np.array([self.osl[0] - 1.0])
        self._subsets: dict[bytes, TailModel] = {}  # ``_rows``' models, by their rows

    # ------------------------------------------------------------------ building blocks
    def _rows(self, rows: np.ndarray) -> TailModel:
        """The model of ``rows`` only (a root search's open rows; the whole model for all)."""
        if len(rows) == len(self.c):
            return self
        key = rows.tobytes()
        if key not in self._subsets:
            self._subsets[key] = TailModel(
                self.c.take(rows), self.fit.take(rows), self.lengths, self.k
            )
        return self._subsets[key]

    def _mean(self, n_rank: np.ndarray):
        """Mean-value step times at ``n_rank`` sequences per DP rank."""
        return closed_loop(self.c, self.fit, self.isl, self.osl, n_rank * self.c.dp, envelope=False)

    def _at(self, n_rank: np.ndarray, quantiles: tuple[float, ...]):
        """Rate, tails and prefill load with N = ``n_rank`` in flight per rank."""
        n_rank = np.clip(n_rank, 1e-6, self.n_max)
        op = self._mean(np.maximum(n_rank, 1.0))
        t_mixed = op.mixed_step.step_s
        budget = self.c.max_num_batched_tokens
        room = np.maximum(budget - op.decode_seqs_per_step, 1.0)  # prompt tokens per step
        # a busy prefill queue fills every step's room with prompt tokens, so it drains at
        # the throughput of a full step (the chunk step ``t_mixed`` carries one prompt's chunk)
        full_step_s = np.maximum(
            decode_step(
                self.c, op.decode_seqs_per_step, op.context_tokens, room, op.isl_tokens
            ).step_s,
            t_mixed,
        )
        mu_tokens = room / full_step_s
        ttft_mean = self._ttft(op, n_rank, 0.5, lam=None)
        w = ttft_mean + self.osl * op.tpot_s
        lam = n_rank / w  # per rank (Little)
        rho = lam * op.prefill_isl_tokens / mu_tokens  # prefilled tokens: a cache hit skips
        ttft = {q: self._ttft(op, n_rank, q, lam, rho, mu_tokens, full_step_s) for q in quantiles}
        tpot = {q: self._tpot(n_rank, q, rho, lam, ttft[q]) for q in quantiles}
        return lam, ttft, tpot, rho

    def _ttft(self, op, n_rank, q, lam, rho=None, mu_tokens=None, full_step_s=None):
        """TTFT at quantile q: the front end, alignment with the step in progress, the poll
        wait, the prompt's own prefill, the prefill queue's wait and the work that joins the
        prompt's last step (the module docstring); ``lam`` None: the mean without waiting."""
        isl_q = self.lengths.isl_quantile(q) if q != 0.5 else self.lengths.isl_mean
        isl_q = isl_q - (op.isl_tokens - op.prefill_isl_tokens)  # minus the cached prefix
        # a request that finds the engine stepping (others in flight: 1 - exp(-N) of arrivals,
        # Poisson) waits out the step's rest, uniform over it; an idle engine starts at once.
        # The mixture's q-quantile is ``step (1 - (1 - q) / busy)``, its mean ``busy step / 2``
        busy = -np.expm1(-n_rank)
        if q == 0.5:
            share = 0.5 * busy
        else:
            share = np.maximum(1.0 - (1.0 - q) / np.maximum(busy, 1e-12), 0.0)
        base = share * op.pure_step.step_s
        # the engine's front end holds every request before the scheduler sees it (the
        # simulator and the mean-value chain count it in TTFT too)
        base = base + self.c.frontend_latency_s
        # an engine polling every k decode steps receives a request after a wait uniform over
        # 0..k-1 steps (``operating.recv_wait_s`` is its mean): the q-quantile is 2q x the mean
        base = base + 2.0 * q * recv_wait_s(self.c, n_rank, op.pure_step.step_s)
        prompt = np.broadcast_to(isl_q, base.shape)[:, None]  # rows x 1 prefilled tokens
        if lam is None:
            own = self._prompt_cost(op, base, op.pure_step.step_s, None)
            return own.own_s(prompt)[:, 0]
        rho_c = np.minimum(rho, 0.999)
        service_s = self.k.ttft_wait * op.prefill_isl_tokens / mu_tokens
        decay, _ = mg1_wait_tail(rho_c, self.isl_cs2)  # the tail's decay beyond the grid
        wait = WaitLaw.solve(
            rho_c, service_s, self.lengths.isl_sigma(), decay / np.maximum(service_s, 1e-12)
        )
        drawn = self.lengths.isl_sigma() > 0 and q != 0.5
        cached = op.isl_tokens - op.prefill_isl_tokens
        cost = self._prompt_cost(op, base, full_step_s, isl_q if drawn else None)
        if drawn:
            return ttft_quantile(cost, wait, rho_c, self.lengths, cached, q)
        wait_q = wait.quantile(q)
        co = cost.co_scheduled_s(prompt, wait_q[:, None], rho_c)
        return cost.own_s(prompt)[:, 0] + wait_q + co[:, 0]

    def _prompt_cost(self, op, base_s, full_step_s, quantile_tokens) -> PromptCost:
        """``PromptCost`` at the operating point: a prompt's cost over the pure step is linear
        in its tokens (GEMMs) plus quadratic (attention over its own context), read off the
        chain's step at the mean prompt and at ``quantile_tokens`` prefilled (the quantile
        prompt's; None, a fixed prompt or the mean: linear only). ``full_step_s`` serves the
        joined work only (``co_scheduled_s``)."""
        budget = self.c.max_num_batched_tokens
        pure = op.pure_step.step_s
        x1 = np.maximum(np.maximum(op.chunk_tokens, op.prefill_tokens_per_step), 1.0)
        y1 = np.maximum(op.mixed_step.step_s - pure, 0.0)
        quad = np.zeros_like(y1)
        if quantile_tokens is not None:
            # at the quantile prompt, where the law's answer lies (the step's roofline bends
            # between: a straight line through a far point would misplace it)
            x2 = np.maximum(quantile_tokens, 1.25 * x1)
            t2 = decode_step(self.c, op.decode_seqs_per_step, op.context_tokens, x2, x2).step_s
            y2 = np.maximum(t2 - pure, y1)
            quad = np.maximum((y2 / x2 - y1 / x1) / (x2 - x1), 0.0)
        base = self.k.ttft_base
        return PromptCost(
            base_s=base_s,
            room=prompt_chunk_tokens(budget, op.batch_per_rank),
            step_s=base * pure,
            per_token_s=base * np.maximum(y1 / x1 - quad * x1, 0.0),
            per_token2_s=base * quad,
            mean_per_token_s=base * y1 / x1,
            full_step_s=full_step_s,
        )

    def _tpot(self, n_rank, q: float, rho, lam, window_s) -> np.ndarray:
        """TPOT at quantile q: the decode steps at the batch's q-quantile, plus the q-quantile
        share of the request's steps that carry other prompts' chunks (the module docstring:
        prompts queued behind it during ``window_s`` and arriving during its pure steps, each
        starting a busy period of the prefill queue at load ``rho``; ``lam`` per rank)."""
        z = float(ndtri(q))
        n_q = np.minimum(n_rank + self.k.tpot_spread * z * np.sqrt(n_rank), self.n_max)
        op = self._mean(np.maximum(n_q, 1.0))
        tau = self.c.spec_tokens_per_step  # tokens a decode step emits (1 without drafting)
        extra = np.maximum(op.mixed_step.step_s - op.pure_step.step_s, 0.0)
        # the mean-value step without its mixed share: what a request meeting no chunk sees
        unmixed = op.tpot_s * tau - op.mixed_step_fraction * extra
        # its own context at the q-quantile: attention reads the request's own cache every
        # step, so a long prompt and output decode slower than the batch's mean sequence
        longer = self.lengths.context_quantile(q) - self.lengths.context_mean()
        if longer > 0:
            seqs = np.maximum(op.decode_seqs_per_step, 1.0)
            own = decode_step(self.c, op.decode_seqs_per_step, op.context_tokens + longer / seqs)
            unmixed = unmixed + np.maximum(own.step_s - op.pure_step.step_s, 0.0)
        chunks = np.maximum(op.n_chunks, 1.0)
        free = 1.0 - np.minimum(rho, MAX_BUSY_RHO)
        # mixed steps per busy period, variance-matched: E[C^2] / E[C] = 1 / (1 - rho)^2
        cluster = self.k.tpot_mix * chunks * (1.0 + self.isl_cs2) / free**self.k.tpot_busy
        mean_per_gap = lam * op.pure_step.step_s * chunks / free
        lead = lam * window_s * chunks / free
        share = busy_share_quantile(
            mean_per_gap / cluster, lead / cluster, cluster, self.decode_gaps, q
        )
        return (unmixed + extra * share) / tau

    # ------------------------------------------------------------------ answers
    def max_rate(self, slo: Slo) -> tuple[np.ndarray, np.ndarray]:
        """Highest Poisson rate per instance (req/s) meeting the SLO percentile and goodput,
        and what binds just above it (object array: ttft, tpot, memory: the KV's hold on the
        tail's in-flight count, throughput; '' for rows that meet nothing, rate 0).

        The largest N in flight that meets them all, by Chandrupatla's bracketing root finder
        (``scipy.optimize.elementwise.find_root``) on the tightest limit's log margin between
        N = 0.001 and the KV's batch limit, each iteration on the rows still open: 7-13
        evaluations a row (the typical bench scenario's), where halving log N took 20 of
        every row.
        The answer is the largest N seen meeting the SLO (its rate), and the binding is
        what the smallest N seen missing it missed."""
        q = max(slo.percentile / 100.0, slo.goodput_target)
        ttft_slo, tpot_slo = slo.ttft_ms / 1e3, slo.tpot_ms / 1e3

        def meets(model: TailModel, n_rank):
            lam, ttft, tpot, rho = model._at(n_rank, (q,))
            # the KV must hold the sequences in flight when requests take their q-quantile
            # residence (Little at the tail): slow periods pile sequences up, and an engine
            # whose KV fills preempts and recomputes them (the module docstring)
            in_flight = lam * (ttft[q] + model.osl * tpot[q])
            ttft_over, tpot_over = ttft[q] > ttft_slo, tpot[q] > tpot_slo
            kv_over = in_flight > model.n_max
            ok = ~ttft_over & ~tpot_over & ~kv_over & (rho < 1.0)
            binds = np.where(ttft_over, "ttft", np.where(kv_over & ~tpot_over, "memory", "tpot"))
            limits = (ttft_slo / ttft[q], tpot_slo / tpot[q], model.n_max / in_flight, 1.0 / rho)
            with np.errstate(divide="ignore", invalid="ignore"):
                margin = np.log(np.fmin.reduce(limits))
            margin = np.nan_to_num(margin, nan=-MAX_MARGIN, posinf=MAX_MARGIN)
            margin = np.where(
                ok, np.clip(margin, 0.0, MAX_MARGIN), np.clip(margin, -MAX_MARGIN, -1e-12)
            )
            return ok, margin, lam, binds

        n = len(self.c)
        low, high = np.full(n, 1e-3), self.n_max.copy()
        ok_low, _, lam_low, at_low = meets(self, low)
        ok_high, _, _, _ = meets(self, high)
        best_n, best_lam = low.copy(), lam_low.copy()  # the largest N seen meeting the SLO
        fail_n, above = high.copy(), np.full(n, "tpot", dtype=object)  # the smallest missing

        def margin(n_rank, rows):
            ok, score, lam, binds = meets(self._rows(rows), n_rank)
            up = ok & (n_rank > best_n[rows])
            best_n[rows[up]], best_lam[rows[up]] = n_rank[up], lam[up]
            down = ~ok & (n_rank < fail_n[rows])
            fail_n[rows[down]], above[rows[down]] = n_rank[down], binds[down]
            return score

        _search_roots(margin, low, high, ok_low & ~ok_high)
        # the same ceiling as the simulated search: the closed-loop saturation throughput
        ceiling = self.saturation_rps() / self.c.dp
        capped = ok_high | (best_lam >= ceiling)  # the ceiling binds before the SLO
        lam = np.where(capped, ceiling, np.where(ok_low, best_lam, 0.0))
        binding = np.where(capped, "throughput", above).astype(object)
        binding = np.where(ok_low, binding, at_low)
        fits = self.fit.fits
        return np.where(fits, lam * self.c.dp, 0.0), np.where(fits, binding, "")

    def saturation_rps(self) -> np.ndarray:
        """Closed-loop request rate at the largest batch that fits (req/s per instance)."""
        return closed_loop(self.c, self.fit, self.isl, self.osl, np.nan).requests_per_s

    def at_rate(self, rate_rps: np.ndarray, quantiles=(0.5, 0.95, 0.99)) -> TailPoint:
        """Tails at ``rate_rps`` per instance (bisection on N for ``N / W(N) = rate``)."""
        target = np.asarray(rate_rps, dtype=np.float64) / self.c.dp
        lam_max, _, _, _ = self._at(self.n_max, ())
        stable = (target < lam_max) & self.fit.fits
        lo = np.full(len(self.c), np.log(1e-6))
        hi = np.log(self.n_max)
        for _ in range(BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            lam, _, _, _ = self._at(np.exp(mid), ())
            below = lam < target
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        n_rank = np.exp(hi)
        lam, ttft, tpot, rho = self._at(n_rank, tuple(quantiles))
        return TailPoint(
            rate_rps=lam * self.c.dp,
            in_flight=n_rank,
            ttft_s=ttft,
            tpot_s=tpot,
            prefill_rho=rho,
            stable=stable,
        )
