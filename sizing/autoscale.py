"""Autoscaling designed from the SLO: the signal, its thresholds, the warm pool, and the day.

Signal (Little's law at the SLO operating point): a replica serving ``X`` req/s within the
SLO with residence ``W`` s holds ``X * W`` requests in flight; planned at the target
utilization ``u`` the scale-up threshold is ``in_flight_target = X * W * u`` requests per
replica (what vLLM exports as ``vllm:num_requests_running``). The autoscaler wants
``ceil((rate * W + queue) / in_flight_target)`` replicas, the HPA rule
``ceil(current * metric / target)``. Scale down from ``S`` (the peak's serving replicas) to
``S - 1`` only when the rest stays below the scale-up threshold:
``scale_down_in_flight = in_flight_target * (S - 1) / S``.

Cooldowns: scale-up ``>= cold_start_s`` (replicas ordered before the last ones are ready would
be ordered twice); scale-down ``>= max(burst_s, 300 s)``, the burst period, and no shorter
than the Kubernetes HPA's default scale-down stabilization window of 300 s
(https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#stabilization-window).

Warm pool (``sizing.headroom.warm_pool_for_cold_start``): during one cold start ``T`` a burst
ramping at ``r`` req/s per second adds ``r * T`` req/s that no new replica can serve yet, so
``ceil(r * T / X)`` loaded, idle replicas are held. Worked number: r = 0.2 req/s/s, T = 70 s,
X = 1.5 req/s -> ceil(9.33) = 10 warm replicas.

The day (a fluid queue at any step ``dt``): arrivals ``a = rate * dt``; ready capacity
``c = (active + warm) * X * dt``; ``served = min(queue + a, c)``; the queue carries the rest.
A request is outside the SLO when the queue ahead of it takes longer than the TTFT slack to
drain: ``late = min(a, max(queue - (c / dt) * slack_s, 0))``. Replicas ordered at ``t`` are
ready at ``t + cold_start_s`` and billed from ``t``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, fields, replace

import numpy as np

from sizing import headroom
from sizing.cost import HOURS_PER_MONTH
from sizing.derivation import Step, q, step

#: Kubernetes HPA default scale-down stabilization window (s), see the module docstring.
HPA_SCALE_DOWN_WINDOW_S = 300.0
SIGNAL = "vllm:num_requests_running"  # in-flight requests per replica (vLLM Prometheus gauge)


@dataclass(frozen=True)
class AutoscalingInputs:
    """The scenario's ``autoscaling`` block, defaults filled in; where each default comes
    from is in ``SOURCES`` (the output repeats it beside "default")."""

    enabled: bool = True  # design choice (SOURCES)
    min_replicas: int = 1  # design choice (SOURCES)
    burst_ramp_rps_per_s: float | None = None  # derived from the burst factor (SOURCES)
    burst_s: float = 60.0  # assumption from the seed text (SOURCES)
    spot_share: float = 0.0  # design choice: spot is opt-in (SOURCES)
    spot_interruptions_per_hour: float = 0.01  # assumption above AWS's top bucket (SOURCES)
    spot_discount: float = 0.6  # the low end of Google Cloud's 60-91% (SOURCES)
    defaults: tuple[str, ...] = ()


#: Where each default of the block comes from; "assumption" and "design choice" say when a
#: figure is ours.
SOURCES: dict[str, str] = {
    "enabled": "true: design choice (the plan autoscales unless the scenario says not)",
    "min_replicas": (
        "1: design choice, one replica stays up off-peak; 0 scales to zero and the first "
        "request waits a cold start"
    ),
    "burst_ramp_rps_per_s": (
        "derived, not a figure: the policy's burst factor reached within burst_s, "
        "peak_rps * (burst_factor - 1) / burst_s"
    ),
    "burst_s": (
        "60 s: assumption, 'the burst arrives in 60' seconds of the seed material this "
        "product was built on; replace it with your traffic's"
    ),
    "spot_share": "0: design choice, spot is opt-in",
    "spot_interruptions_per_hour": (
        "0.01 per replica-hour (~7 a month): assumption, conservative next to the highest "
        "frequency-of-interruption bucket AWS's Spot Instance Advisor shows ('>20%' of "
        "instances a month, https://aws.amazon.com/ec2/spot/instance-advisor/)"
    ),
    "spot_discount": (
        "0.6: the low end of Google Cloud's 'discount of 60-91%' for Spot VMs "
        "(https://cloud.google.com/compute/docs/instances/spot); AWS advertises 'up to 90%' "
        "(https://aws.amazon.com/ec2/spot/)"
    ),
}


def default_sources(inputs: AutoscalingInputs) -> dict[str, str]:
    """``{field: figure and source}`` for every field the scenario left to its default."""
    return {name: SOURCES[name] for name in inputs.defaults if name in SOURCES}


FIELDS = tuple(f.name for f in fields(AutoscalingInputs) if f.name != "defaults")


def from_block(block: dict | None) -> AutoscalingInputs:
    block = block or {}
    given = {k: v for k, v in block.items() if k in FIELDS and v is not None}
    base = replace(AutoscalingInputs(), **given)
    return replace(base, defaults=tuple(f for f in FIELDS if f not in given))


@dataclass(frozen=True)
class ScalingPolicy:
    signal: str
    in_flight_target: float  # scale-up threshold, requests in flight per replica
    scale_down_in_flight: float
    scale_up_cooldown_s: float
    scale_down_cooldown_s: float
    min_replicas: int
    max_replicas: int  # serving replicas at the peak (burst included)
    warm_pool_replicas: int
    ramp_rps_per_s: float
    first_request_wait_s: float  # scale to zero: the first request waits a cold start

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def burst_ramp_rps_per_s(inputs: AutoscalingInputs, peak_rps: float, burst_factor: float):
    """The burst's ramp (req/s per s): the block's, else the policy's burst factor reached
    within ``burst_s``, ``peak_rps * (burst_factor - 1) / burst_s``. A burst is stated when
    it is above 0."""
    if inputs.burst_ramp_rps_per_s is not None:
        return float(inputs.burst_ramp_rps_per_s)
    return peak_rps * (burst_factor - 1.0) / inputs.burst_s


def design(
    inputs: AutoscalingInputs,
    capacity_rps: float,
    residence_s: float,
    target_utilization: float,
    serving_at_peak: int,
    peak_rps: float,
    burst_factor: float,
    cold_start_s: float,
    warm_pool_replicas: int | None = None,
) -> tuple[ScalingPolicy, list[Step]]:
    """The policy for one candidate, with its derivation steps. ``warm_pool_replicas``: the
    warm pool the fleet was sized with (``sizing.fleet.burst_warm_pool``, which shows its
    step in the fleet stage); None sizes it here from the ramp."""
    x, w, u, s = capacity_rps, residence_s, target_utilization, serving_at_peak
    target = x * w * u
    down = target * (s - 1) / s if s > 1 else 0.0
    ramp_given = inputs.burst_ramp_rps_per_s is not None
    ramp = burst_ramp_rps_per_s(inputs, peak_rps, burst_factor)
    from_fleet = warm_pool_replicas is not None
    if from_fleet:
        warm = int(warm_pool_replicas)
    else:
        warm = int(headroom.warm_pool_for_cold_start(ramp, cold_start_s, x)) if x > 0 else 0
    up_cool = math.ceil(cold_start_s)
    down_cool = max(inputs.burst_s, HPA_SCALE_DOWN_WINDOW_S)
    min_r = min(inputs.min_replicas, s)
    policy = ScalingPolicy(
        signal=SIGNAL,
        in_flight_target=target,
        scale_down_in_flight=down,
        scale_up_cooldown_s=float(up_cool),
        scale_down_cooldown_s=float(down_cool),
        min_replicas=int(min_r),
        max_replicas=int(s),
        warm_pool_replicas=warm,
        ramp_rps_per_s=float(ramp),
        first_request_wait_s=float(cold_start_s) if min_r == 0 and warm == 0 else 0.0,
    )
    ramp_step = (
        step(
            "burst_ramp_rps_per_s",
            "r",
            [q("r", ramp, "req/s per s")],
            ramp,
            "req/s per s",
            "given in the scenario",
        )  # fmt: skip
        if ramp_given
        else step(
            "burst_ramp_rps_per_s",
            "peak_rps * (burst - 1) / burst_s",
            [
                q("peak_rps", peak_rps, "req/s"),
                q("burst", burst_factor, ""),
                q("burst_s", inputs.burst_s, "s"),
            ],  # fmt: skip
            ramp,
            "req/s per s",
            "default: the policy's burst factor reached within burst_s",
        )
    )
    steps = [
        step(
            "in_flight_target",
            "X * W * target_utilization",
            [q("X", x, "req/s per replica"), q("W", w, "s"), q("target_utilization", u, "")],
            target,
            "requests in flight per replica",
            f"scale-up threshold on {SIGNAL} (Little's law at the SLO operating point)",
        ),
        step(
            "scale_down_in_flight",
            "in_flight_target * (S - 1) / S if S > 1 else 0",
            [q("in_flight_target", target, "requests"), q("S", s, "replicas at the peak")],
            down,
            "requests in flight per replica",
            "below it, one replica fewer stays under the scale-up threshold",
        ),
        step(
            "scale_up_cooldown_s",
            "ceil(cold_start_s)",
            [q("cold_start_s", cold_start_s, "s")],
            up_cool,
            "s",
        ),
        step(
            "scale_down_cooldown_s",
            "max(burst_s, hpa_default_window_s)",
            [
                q("burst_s", inputs.burst_s, "s"),
                q("hpa_default_window_s", HPA_SCALE_DOWN_WINDOW_S, "s"),
            ],  # fmt: skip
            down_cool,
            "s",
        ),
        ramp_step,
    ]
    if not from_fleet:
        steps.append(
            step(
                "warm_pool_replicas",
                "ceil(ramp * cold_start_s / X)",
                [
                    q("ramp", ramp, "req/s per s"),
                    q("cold_start_s", cold_start_s, "s"),
                    q("X", x, "req/s per replica"),
                ],  # fmt: skip
                warm,
                "replicas",
                "what the ramp needs while a new replica boots (Little on the ramp)",
            )
        )
    return policy, steps


# ---------------------------------------------------------------------------- the day
def minute_rates(hourly_rps, burst_ramp_rps_per_s: float = 0.0, burst_s: float = 0.0):
    """1,440 per-minute rates (req/s): the 24 hourly rates linearly interpolated between hour
    centres (periodic), plus one burst at the start of the busiest hour whose extra rate ramps
    at ``burst_ramp_rps_per_s`` for ``burst_s`` (its minute mean). Returns (rates, burst
    minute)."""
    hourly = np.asarray(hourly_rps, dtype=np.float64)
    t = (np.arange(1440) + 0.5) / 60.0  # hours, minute centres
    centres = np.arange(24) + 0.5
    rates = np.interp(t, np.concatenate([[-0.5], centres, [24.5]]),
                      np.concatenate([[hourly[-1]], hourly, [hourly[0]]]))  # fmt: skip
    start = int(np.argmax(hourly)) * 60
    if burst_ramp_rps_per_s > 0 and burst_s > 0:
        seconds = np.arange(int(math.ceil(burst_s)))
        extra = burst_ramp_rps_per_s * (seconds + 0.5)
        for minute in range(int(math.ceil(burst_s / 60.0))):
            chunk = extra[minute * 60 : (minute + 1) * 60]
            rates[(start + minute) % 1440] += chunk.sum() / 60.0
    return rates, start


@dataclass(frozen=True)
class DayResult:
    """Per step: active, warm and cold-starting (ordered, not ready) replicas; queue; and the
    requests that arrived and that were late (outside the SLO)."""

    dt_s: float
    rate_rps: np.ndarray
    active: np.ndarray
    warm: np.ndarray
    starting: np.ndarray
    queue: np.ndarray
    arrived: np.ndarray
    late: np.ndarray

    @property
    def billed_replicas(self) -> np.ndarray:
        return self.active + self.warm + self.starting

    @property
    def slo_share(self) -> float:
        total = float(self.arrived.sum())
        return 1.0 - float(self.late.sum()) / total if total > 0 else 1.0


def simulate(
    rate_rps,
    dt_s: float,
    policy: ScalingPolicy,
    capacity_rps: float,
    residence_s: float,
    cold_start_s: float,
    slack_s: float,
    warm_pool_replicas: int | None = None,
) -> DayResult:
    """Run ``rate_rps`` (req/s per step of ``dt_s``) through the policy (fluid queue, see the
    module docstring). Starts in steady state at the first step's rate."""
    rates = np.asarray(rate_rps, dtype=np.float64)
    warm = policy.warm_pool_replicas if warm_pool_replicas is None else warm_pool_replicas
    x, w = capacity_rps, residence_s
    target = policy.in_flight_target if policy.in_flight_target > 0 else math.inf

    def wanted(rate: float, queue: float) -> int:
        want = math.ceil((rate * w + queue) / target - 1e-9) if rate > 0 or queue > 0 else 0
        return min(max(want, policy.min_replicas), policy.max_replicas)

    active = wanted(rates[0], 0.0)
    # orders in flight as (ready time, replicas): one entry per order, not per replica, so a
    # fleet of millions of replicas costs no memory here
    booting: deque[tuple[float, int]] = deque()
    starting = 0
    last_up = -math.inf
    window: deque[tuple[float, int]] = deque()  # (time, desired) for the scale-down window
    queue = 0.0
    out: dict[str, list] = {
        k: [] for k in ("active", "warm", "starting", "queue", "arrived", "late")
    }
    for i, rate in enumerate(rates.tolist()):  # Python floats: a 1,440-step loop stays ~ms
        now = i * dt_s
        while booting and booting[0][0] <= now:
            active += booting[0][1]
            starting -= booting.popleft()[1]
        desired = wanted(rate, queue)
        # the stabilization window's maximum, kept as a decreasing deque (O(1) per step)
        while window and window[-1][1] <= desired:
            window.pop()
        window.append((now, desired))
        while window[0][0] < now - policy.scale_down_cooldown_s:
            window.popleft()
        pending = active + starting
        if desired > pending and now - last_up >= policy.scale_up_cooldown_s:
            booting.append((now + cold_start_s, desired - pending))
            starting += desired - pending
            last_up = now
        floor = window[0][1]
        if floor < active and not booting:
            active = max(floor, policy.min_replicas)
        arrived = rate * dt_s
        capacity = (active + warm) * x * dt_s
        served = min(queue + arrived, capacity)
        queue = queue + arrived - served
        drain = (active + warm) * x * slack_s
        out["late"].append(min(arrived, max(queue - drain, 0.0)))
        out["active"].append(active)
        out["warm"].append(warm)
        out["starting"].append(starting)
        out["queue"].append(queue)
        out["arrived"].append(arrived)
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}
    return DayResult(dt_s=dt_s, rate_rps=rates, **arrays)


def burst_window_rates(base_rps: float, ramp_rps_per_s: float, burst_s: float, tail_s: float):
    """Per-second rates of the worst burst window: 10 s of the base rate, the burst ramping
    at ``ramp`` for ``burst_s``, then ``tail_s`` of the base rate again."""
    seconds = int(math.ceil(burst_s))
    ramp = base_rps + ramp_rps_per_s * (np.arange(seconds) + 0.5)
    return np.concatenate([np.full(10, base_rps), ramp, np.full(int(math.ceil(tail_s)), base_rps)])


def spot_usd_per_hour(
    elastic_replicas: float,
    usd_per_replica_hour: float,
    spot_share: float,
    spot_discount: float,
    interruptions_per_hour: float,
    cold_start_s: float,
) -> float:
    """$/h of the elastic replicas with a spot share: on-demand for ``1 - share``, spot at
    ``(1 - discount)`` for ``share``, and an on-demand fallback replica while an interrupted
    one restarts: ``share * R * interruptions_per_hour * cold_start_s / 3600`` replicas.

    Worked number: 10 replicas at $20/h, half on spot at 60% off, 0.01/h, 90 s cold start ->
    5 * 20 + 5 * 8 + 5 * 0.01 * 90 / 3600 * 20 = 100 + 40 + 0.025 = $140.025/h.
    """
    spot = elastic_replicas * spot_share
    fallback = spot * interruptions_per_hour * cold_start_s / 3600.0
    return (
        (elastic_replicas - spot) * usd_per_replica_hour
        + spot * usd_per_replica_hour * (1.0 - spot_discount)
        + fallback * usd_per_replica_hour
    )


def autoscaled_usd_per_month(
    day: DayResult,
    spare_replicas: int,
    usd_per_replica_hour: float,
    inputs: AutoscalingInputs,
    cold_start_s: float,
) -> tuple[float, list[Step]]:
    """Mean billed replicas over the day (active + warm + cold-starting, + spares, which stay
    on demand) x $/replica-hour x 730, spot priced in."""
    elastic = float(day.billed_replicas.mean())
    elastic_usd_h = spot_usd_per_hour(
        elastic, usd_per_replica_hour, inputs.spot_share, inputs.spot_discount,
        inputs.spot_interruptions_per_hour, cold_start_s,
    )  # fmt: skip
    usd_month = (elastic_usd_h + spare_replicas * usd_per_replica_hour) * HOURS_PER_MONTH
    formula = (
        "((R - R * share) * K + R * share * K * (1 - discount) "
        "+ R * share * lam * T / 3600 * K + spares * K) * 730"
    )
    inputs_q = [
        q("R", elastic, "mean replicas billed over the day (active + warm + starting)"),
        q("K", usd_per_replica_hour, "$/replica-hour"),
        q("share", inputs.spot_share, "spot share"),
        q("discount", inputs.spot_discount, ""),
        q("lam", inputs.spot_interruptions_per_hour, "interruptions/h per replica"),
        q("T", cold_start_s, "s"),
        q("spares", spare_replicas, "replicas"),
    ]
    return usd_month, [
        step(
            "autoscaled_usd_per_month",
            formula,
            inputs_q,
            usd_month,
            "$/month",
            "the day at minute resolution through the policy",
        )  # fmt: skip
    ]
