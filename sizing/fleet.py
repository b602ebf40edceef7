"""Steps 5-7 of the chain from a replica's capacity: headroom, cost, break-even, error band.

Everything after the operating point depends on one number per candidate, the request rate
one replica serves within the SLO (``capacity_rps``, req/s). The mean-value chain gets it from
``operating.slo_operating_point``, the tail sizing from the simulator (``planner.tails``) or
the analytic percentile model (``sizing.tails``); all of them enter here, so replicas, money,
break-even and the band are computed once, by these functions, with their derivation steps.

Worked numbers (tests/sizing/test_fleet.py): peak 20 req/s, burst 1.2, target utilization
0.7, capacity 1.5 req/s per replica -> ``ceil(24 / 1.05) = 23`` serving replicas, + 1 spare = 24;
TP2 at $2.50/GPU-hour -> $120/h, $87,600/month.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing import autoscale, coldstart, cost, headroom, littles
from sizing import breakeven as be
from sizing.derivation import Step, q, step
from sizing.specs import ApiPrice, Policy, Traffic


@dataclass(frozen=True)
class BurstWarmPool:
    """The scenario's ``cold_start`` and ``autoscaling`` blocks, as ``Policy.burst_warm_pool``.

    When they state a burst (``autoscale.burst_ramp_rps_per_s`` > 0: a ramp given, or a
    burst factor above 1 reached within ``burst_s``), every candidate's warm pool is what the
    ramp needs during its own cold start, ``ceil(ramp * cold_start_s / X)`` (Little on the
    ramp, ``headroom.warm_pool_for_cold_start``), and the fixed fleet's replicas, $/month,
    break-even and band carry it instead of the typed ``warm_pool_replicas``.
    """

    cold_start: coldstart.ColdStartInputs
    autoscaling: autoscale.AutoscalingInputs


@dataclass(frozen=True)
class WarmPool:
    """Per candidate: the warm pool, and (when sized from the burst) its inputs."""

    replicas: np.ndarray
    from_burst: bool
    ramp_rps_per_s: float = 0.0
    cold_start_s: np.ndarray | None = None


def warm_pool(
    policy: Policy, traffic: Traffic, weights_gb_per_gpu, gpus_per_replica, capacity_rps
) -> WarmPool:
    """The warm pool of n candidates: from the burst when the policy states one, else the
    typed ``policy.warm_pool_replicas`` (see ``BurstWarmPool``). Misfits (no capacity) get 0."""
    x = np.asarray(capacity_rps, dtype=np.float64)
    spec = policy.burst_warm_pool
    ramp = (
        autoscale.burst_ramp_rps_per_s(spec.autoscaling, traffic.peak_rps, policy.burst_factor)
        if spec is not None
        else 0.0
    )
    if not ramp > 0:
        return WarmPool(np.full(x.shape, float(policy.warm_pool_replicas)), False)
    weights = np.nan_to_num(np.asarray(weights_gb_per_gpu, dtype=np.float64))
    t_cold = coldstart.cold_start_s(spec.cold_start, weights, gpus_per_replica)
    t_cold = np.broadcast_to(t_cold, x.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        warm = headroom.warm_pool_for_cold_start(ramp, t_cold, x)
    warm = np.where((x > 0) & np.isfinite(warm), warm, 0.0)
    return WarmPool(warm, True, float(ramp), t_cold)


@dataclass(frozen=True)
class Fleet:
    """Replicas and money per candidate (arrays of n). Misfits: inf replicas, inf $/M."""

    capacity_rps: np.ndarray  # req/s one replica serves within the SLO
    serving: np.ndarray  # replicas carrying the peak (inf: cannot serve)
    replicas: np.ndarray  # serving + spares + warm pool
    warm: WarmPool  # the warm pool per candidate (from the burst, or the typed number)
    gpus_per_replica: np.ndarray
    usd_per_gpu_hour: np.ndarray
    utilization: np.ndarray  # mean load / provisioned capacity
    usd_per_hour: np.ndarray
    usd_per_month: np.ndarray
    usd_per_mtok: np.ndarray  # per million output tokens
    usd_per_mtok_total: np.ndarray  # per million input + output tokens
    tokens_per_usd: np.ndarray  # output tokens per dollar
    in_flight_at_peak: np.ndarray  # requests in flight at the peak (Little)
    residence_s: np.ndarray
    traffic: Traffic
    policy: Policy

    @property
    def gpus(self) -> np.ndarray:
        return self.replicas * self.gpus_per_replica

    def _warm_steps(self, i: int) -> list[Step]:
        """The warm pool's own step when it is sized from the burst (else it is typed)."""
        w = self.warm
        if not w.from_burst:
            return []
        typed = self.policy.warm_pool_replicas
        return [
            step(
                "warm_pool_replicas",
                "ceil(ramp * cold_start_s / X)",
                [
                    q("ramp", w.ramp_rps_per_s, "req/s per s"),
                    q("cold_start_s", float(w.cold_start_s[i]), "s"),
                    q("X", self.capacity_rps[i], "req/s per replica"),
                ],
                w.replicas[i],
                "replicas",
                "sized from the burst: what the ramp needs while a new replica boots (Little "
                "on the ramp)" + (f"; the typed warm pool of {typed} is not used" if typed else ""),
            )
        ]

    def fixed_replicas(self, i: int) -> float:
        """Spares + warm pool of row ``i``: the replicas that do not scale with load."""
        return self.policy.spare_replicas + float(self.warm.replicas[i])

    def steps(self, i: int) -> list[Step]:
        """The derivation of row ``i``: every formula evaluates on its inputs."""
        t, p = self.traffic, self.policy
        x, total, usd_h = self.capacity_rps[i], self.replicas[i], self.usd_per_hour[i]
        osl = t.output_tokens_mean
        return self._warm_steps(i) + [
            step(
                "in_flight_at_peak",
                "peak_rps * W",
                [q("peak_rps", t.peak_rps, "req/s"), q("W", self.residence_s[i], "s")],
                self.in_flight_at_peak[i],
                "requests",
                "Little's law at the peak",
            ),
            step(
                "serving_replicas",
                "max(ceil(peak_rps * burst / (X * target_utilization) - 1e-9), 1)",
                [
                    q("peak_rps", t.peak_rps, "req/s"),
                    q("burst", p.burst_factor, ""),
                    q("X", x, "req/s per replica"),
                    q("target_utilization", p.target_utilization, ""),
                ],
                self.serving[i],
                "replicas",
            ),
            step(
                "replicas",
                "serving + spare + warm_pool",
                [
                    q("serving", self.serving[i], "replicas"),
                    q("spare", p.spare_replicas, "replicas"),
                    q("warm_pool", self.warm.replicas[i], "replicas"),
                ],
                total,
                "replicas",
                "N+k spares survive a failed replica; the warm pool covers a cold start",
            ),
            step(
                "usd_per_hour",
                "replicas * gpus_per_replica * usd_per_gpu_hour",
                [
                    q("replicas", total, ""),
                    q("gpus_per_replica", self.gpus_per_replica[i], ""),
                    q("usd_per_gpu_hour", self.usd_per_gpu_hour[i], "$/GPU-h"),
                ],
                usd_h,
                "$/h",
            ),
            step(
                "usd_per_month",
                "usd_per_hour * hours_per_month",
                [
                    q("usd_per_hour", usd_h, "$/h"),
                    q("hours_per_month", cost.HOURS_PER_MONTH, "h"),
                ],
                self.usd_per_month[i],
                "$/month",
            ),
            step(
                "utilization",
                "mean_rps / (replicas * X)",
                [
                    q("mean_rps", t.mean_rps, "req/s"),
                    q("replicas", total, ""),
                    q("X", x, "req/s per replica"),
                ],
                self.utilization[i],
                "",
            ),
            step(
                "usd_per_mtok",
                "usd_per_hour / 3600 / (replicas * X * osl * utilization) * 1e6",
                [
                    q("usd_per_hour", usd_h, "$/h"),
                    q("replicas", total, ""),
                    q("X", x, "req/s per replica"),
                    q("osl", osl, "tokens"),
                    q("utilization", self.utilization[i], ""),
                ],
                self.usd_per_mtok[i],
                "$/M output tokens",
            ),
            step(
                "tokens_per_usd",
                "1e6 / usd_per_mtok",
                [q("usd_per_mtok", self.usd_per_mtok[i], "$/M output tokens")],
                self.tokens_per_usd[i],
                "output tokens/$",
            ),
        ]


def size_fleet(
    capacity_rps,
    residence_s,
    traffic: Traffic,
    policy: Policy,
    gpus_per_replica,
    usd_per_gpu_hour,
    serves=True,
    weights_gb_per_gpu=0.0,
) -> Fleet:
    """Headroom and cost for n candidates from their per-replica capacity (req/s).

    ``serves`` (bool array) marks rows that can carry load at all (fit and a positive
    capacity); the others get inf replicas and inf $/M tokens. ``weights_gb_per_gpu`` sizes
    each candidate's cold start, hence its warm pool when the policy states a burst
    (``warm_pool``).
    """
    x = np.asarray(capacity_rps, dtype=np.float64)
    ok = np.asarray(serves, dtype=bool) & (x > 0)
    gpi = np.broadcast_to(np.asarray(gpus_per_replica, dtype=np.float64), x.shape)
    price = np.broadcast_to(np.asarray(usd_per_gpu_hour, dtype=np.float64), x.shape)
    serving = headroom.serving_replicas(
        traffic.peak_rps, x, policy.target_utilization, policy.burst_factor
    )
    serving = np.where(ok, serving, np.inf)
    warm = warm_pool(policy, traffic, weights_gb_per_gpu, gpi, np.where(ok, x, 0.0))
    total = headroom.total_replicas(serving, policy.spare_replicas, warm.replicas)
    isl, osl = traffic.prompt_tokens_mean, traffic.output_tokens_mean
    with np.errstate(invalid="ignore"):  # misfits: inf replicas x 0 req/s
        usd_h = cost.usd_per_hour(total, gpi, price)
        util = np.where(ok, headroom.utilization(traffic.mean_rps, total, x), 0.0)
        usd_mtok = np.where(ok, cost.usd_per_mtok(usd_h, total * x * osl, util), np.inf)
        usd_mtok_total = np.where(
            ok, cost.usd_per_mtok(usd_h, total * x * (isl + osl), util), np.inf
        )
    residence = np.broadcast_to(np.asarray(residence_s, dtype=np.float64), x.shape)
    return Fleet(
        capacity_rps=x,
        serving=serving,
        replicas=total,
        warm=warm,
        gpus_per_replica=gpi,
        usd_per_gpu_hour=price,
        utilization=util,
        usd_per_hour=usd_h,
        usd_per_month=cost.usd_per_month(usd_h),
        usd_per_mtok=usd_mtok,
        usd_per_mtok_total=usd_mtok_total,
        tokens_per_usd=cost.tokens_per_usd(usd_mtok),
        in_flight_at_peak=np.where(ok, littles.in_flight(traffic.peak_rps, residence), np.nan),
        residence_s=residence,
        traffic=traffic,
        policy=policy,
    )


# ============================================================================ break-even
@dataclass(frozen=True)
class BreakEvenResult:
    """API vs self-hosting for one candidate at the plan's traffic mix."""

    api_usd_per_mtok: float  # blended over input/output
    api_usd_per_month: float  # at the traffic's mean rate
    selfhost_usd_per_month: float
    crossing_tokens_per_month: float  # inf: self-hosting never wins
    traffic_tokens_per_month: float
    utilization_to_win: float  # > 1: cannot win at any utilization
    hybrid: be.HybridSplit


def breakeven(fleet: Fleet, i: int, api_price: ApiPrice) -> tuple[BreakEvenResult, list[Step]]:
    """Break-even of row ``i`` against ``api_price``, with its derivation steps."""
    t, p = fleet.traffic, fleet.policy
    isl, osl = t.prompt_tokens_mean, t.output_tokens_mean
    x = float(fleet.capacity_rps[i])
    usd_replica_h = float(fleet.gpus_per_replica[i] * fleet.usd_per_gpu_hour[i])
    k_month = usd_replica_h * cost.HOURS_PER_MONTH
    fixed = fleet.fixed_replicas(i)
    peak_to_mean = t.peak_rps / t.mean_rps if t.mean_rps > 0 else 1.0
    api_p = be.api_usd_per_token(api_price, t)
    v_r = (
        x
        * p.target_utilization
        * (isl + osl)
        * be.SECONDS_PER_MONTH
        / (peak_to_mean * p.burst_factor)
    )
    v_traffic = t.mean_rps * (isl + osl) * be.SECONDS_PER_MONTH
    result = BreakEvenResult(
        api_usd_per_mtok=api_p * 1e6,
        api_usd_per_month=float(be.api_usd_per_month(v_traffic, api_p)),
        selfhost_usd_per_month=float(fleet.usd_per_month[i]),
        crossing_tokens_per_month=float(be.crossing_tokens_per_month(v_r, k_month, fixed, api_p)),
        traffic_tokens_per_month=v_traffic,
        utilization_to_win=float(be.utilization_to_win(usd_replica_h, x * (isl + osl), api_p)),
        hybrid=be.hybrid_split(
            be.daily_profile_rps(t),
            x,
            p.target_utilization,
            k_month,
            fixed,
            isl + osl,
            api_p,
            p.burst_factor,
        ),
    )
    steps = _breakeven_steps(result, api_price, t, v_r, k_month, fixed, x, usd_replica_h)
    return result, steps + _hybrid_steps(result, k_month, fixed, p.burst_factor)


def _breakeven_steps(bev, api_price, t: Traffic, v_r, k_month, fixed, x, usd_replica_h):
    isl, osl = t.prompt_tokens_mean, t.output_tokens_mean
    cached = min(t.shared_prefix_tokens * t.prefix_hit_rate, isl)
    cached_price = (
        api_price.cached_input_usd_per_mtok
        if api_price.cached_input_usd_per_mtok is not None
        else api_price.input_usd_per_mtok
    )
    p_mtok = bev.api_usd_per_mtok
    return [
        step(
            "api_usd_per_mtok",
            "((isl - cached) * p_in + cached * p_cached + osl * p_out) / (isl + osl)",
            [
                q("isl", isl, "tokens"),
                q("osl", osl, "tokens"),
                q("cached", cached, "tokens (shared prefix x hit rate)"),
                q("p_in", api_price.input_usd_per_mtok, "$/M"),
                q("p_cached", cached_price, "$/M"),
                q("p_out", api_price.output_usd_per_mtok, "$/M"),
            ],
            p_mtok,
            "$/M tokens",
            api_price.label,
        ),
        step(
            "crossing_tokens_per_month",
            "n* = max(ceil((s*K + p*v_r) / (p*v_r - K)) - 1, 1); "
            "V* = max((n* - 1) * v_r, (n* + s) * K / p); never if p*v_r <= K",
            [
                q("v_r", v_r, "tokens/month per replica"),
                q("K", k_month, "$/month per replica"),
                q("s (spare + warm)", fixed, "replicas"),
                q("p", p_mtok, "$/M"),
            ],
            bev.crossing_tokens_per_month,
            "tokens/month",
            "sizing.breakeven: the volume from which self-hosting stays no dearer",
            kind="model",
        ),
        step(
            "utilization_to_win",
            "usd_per_replica_hour / 3600 / (X * (isl + osl)) / (p / 1e6)",
            [
                q("usd_per_replica_hour", usd_replica_h, "$/h"),
                q("X", x, "req/s per replica"),
                q("isl", isl, "tokens"),
                q("osl", osl, "tokens"),
                q("p", p_mtok, "$/M"),
            ],
            bev.utilization_to_win,
            "",
            "> 1: a replica costs more than the API even when fully used",
        ),
    ]


def _hybrid_steps(bev, k_month, fixed, t_burst) -> list[Step]:
    return [
        step(
            "hybrid_selfhost_replicas",
            "argmin over R of (R + s*[R>0]) * K + API cost of the hourly overflow past "
            "R * X * target_utilization / burst",
            [
                q("K", k_month, "$/month per replica"),
                q("s (spare + warm)", fixed, "replicas"),
                q("burst", t_burst, ""),
                q("api_token_share", bev.hybrid.api_token_share, ""),
                q("hybrid usd_per_month", bev.hybrid.usd_per_month, "$/month"),
            ],
            bev.hybrid.selfhost_replicas,
            "replicas",
            "daily profile: the scenario's 24 hourly rates, else a cosine day peaking at 14:00",
            kind="search",
        ),
    ]


# ============================================================================ error band
@dataclass(frozen=True)
class Band:
    """Replicas and cost if the capacity per replica is off by the profile's error ``e``."""

    relative_error: float
    replicas: tuple[int, int]
    gpus: tuple[int, int]
    usd_per_month: tuple[float, float] | None


def error_band(fleet: Fleet, i: int, relative_error: float) -> tuple[Band, list[Step]]:
    """The band on the final sizing: the same headroom formula at ``X (1 + e)`` and
    ``X (1 - e)``. Serving replicas fall as capacity rises, so the answer (at ``X``) always
    lies inside; spares and the warm pool are fixed; cost scales with the replicas.

    Worked numbers: S = 23 serving at X = 1.5 req/s, e = 0.2 -> X in [1.2, 1.8] ->
    serving in [ceil(24 / 1.26), ceil(24 / 0.84)] = [20, 29], + 1 spare -> [21, 30].
    """
    e = min(max(float(relative_error), 0.0), 0.9)
    t, p = fleet.traffic, fleet.policy
    x = float(fleet.capacity_rps[i])
    spares = int(fleet.fixed_replicas(i))  # the warm pool at X (the answer's): fixed here
    high_x, low_x = x * (1 + e), x * (1 - e)
    low = int(headroom.serving_replicas(t.peak_rps, high_x, p.target_utilization, p.burst_factor))
    high = int(headroom.serving_replicas(t.peak_rps, low_x, p.target_utilization, p.burst_factor))
    gpi = int(fleet.gpus_per_replica[i])
    price = float(fleet.usd_per_gpu_hour[i])

    def month(replicas: int) -> float:
        # the fleet's own cost functions, so the band's edge equals the answer to the last bit
        return float(cost.usd_per_month(cost.usd_per_hour(replicas, gpi, price)))

    usd = (month(low + spares), month(high + spares)) if price > 0 else None
    band = Band(
        relative_error=e,
        replicas=(low + spares, high + spares),
        gpus=((low + spares) * gpi, (high + spares) * gpi),
        usd_per_month=usd,
    )
    inputs = [
        q("peak_rps", t.peak_rps, "req/s"),
        q("burst", p.burst_factor, ""),
        q("X", x, "req/s per replica"),
        q("e", e, "fraction"),
        q("target_utilization", p.target_utilization, ""),
        q("spares", spares, "replicas"),
    ]
    note = (
        f"band {low + spares}-{high + spares} replicas; e is the calibration profile's "
        "cross-validated error on held-out measurements"
    )
    steps = [
        step(
            f"band_replicas_{side}",
            f"max(ceil(peak_rps * burst / (X * (1 {sign} e) * target_utilization) - 1e-9), 1)"
            " + spares",
            inputs,
            value + spares,
            "replicas",
            note,
        )
        for side, sign, value in (("low", "+", low), ("high", "-", high))
    ]
    return band, steps


def band_json(band: Band) -> dict:
    return {
        "relative_error": band.relative_error,
        "replicas": list(band.replicas),
        "gpus": list(band.gpus),
        "usd_per_month": list(band.usd_per_month) if band.usd_per_month else None,
    }
