"""Disaggregated candidates in a plan: separate prefill and decode pools, ranked beside the
aggregated candidates and through the same headroom, cost, band and break-even stages.

A disaggregated candidate is one model on one GPU at one precision and engine; its layout (the
prefill and decode workers' TP, EP = TP for MoE) is the cheapest pair of ``POOL_TP_OPTIONS``
meeting the SLOs (``search_layouts``), each pool sized by ``sizing.disagg.size_pools`` for
``lambda = peak_rps * burst`` requests/s:

- decode: ``y = ceil(lambda / (u * X_d))`` workers, ``X_d = DP_d * b_slo / (osl * TPOT)`` req/s a
  worker carries at the largest batch meeting the TPOT SLO;
- prefill: ``x = ceil(lambda / (u * X_p))``, ``X_p = DP_p * (mu_tok / isl) * rho_max / u``: the
  TTFT budget left after the prompt's own prefill and its KV transfer allows a load of
  ``rho_max <= u`` (M/D/1 wait in full prefill steps), so the headroom stage's ``u`` lands the
  pool at ``rho_max``.

Each pool is then a fleet of its own (``sizing.fleet.size_fleet``: its own spares and its own
warm pool, since either pool can lose a node or fall behind a burst); the deployment's $/hour,
$/month and $/M tokens are the pools' sums (both $/M tokens divide by the same served output
tokens). The band is each pool's band at ``X (1 +- e)`` summed, so it contains the answer. The
break-even counts the deployment in GPUs: it grows by a worker of either pool, and one GPU's
share of the capacity (``lambda / (u * serving GPUs)``) is the finest grain that stays exact
for both.

Latency. The analytic row carries the mean-value TTFT and TPOT at the sized pools
(``latency_statistic`` "mean"): TTFT = front end + the M/D/1 wait at the prefill pool's load +
the prompt's prefill + the exposed transfer + the wait for the decode rank's link; TPOT at the
decode batch the load keeps (Little: ``b * lambda / (y * DP_d * X_rank_d)``). Such a row is
never recommended (``latency_source`` "analytic"); the tail stage (planner.disagg_tails) runs
the two-pool simulator at the peak, grows the pool whose latency misses the percentile, and
re-enters here with the workers it found (``PoolsGiven``).

Worked numbers (tests/sizing/test_disagg_plan.py): Llama 3.1 8B bf16 on H100, 10 req/s of
1,000 + 200 tokens, TTFT 1 s / TPOT 50 ms, u = 0.8: the cheapest layout is 1 prefill worker at
TP1 and 1 decode worker at TP1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sizing.candidates import CandidateArrays, expert_precision_of
from sizing.chain import (
    STAGE_BAND,
    STAGE_BREAKEVEN,
    STAGE_FLEET,
    Candidate,
    PlanRow,
    api_prices,
)
from sizing.derivation import Step, q, staged, step
from sizing.disagg import (
    POOL_TP_OPTIONS,
    STAGE_TRANSFER,
    PoolSizing,
    decode_tpot_s,
    first_token_join_s,
    link_wait_s,
    mean_ttft_s,
    size_pools,
)
from sizing.fleet import Band, Fleet, WarmPool, breakeven, error_band, size_fleet
from sizing.length_law import length_quantile
from sizing.memory import MemoryFit, fit_memory
from sizing.specs import ApiPrice, Policy, Slo, Traffic

MODE = "disagg"
STAGE_LAYOUT = "Disaggregated layout"
STAGE_LATENCY = "Disaggregated latency at the peak"
POOLS = ("prefill", "decode")


@dataclass(frozen=True)
class PoolsGiven:
    """The tail stage's answer for one disaggregated candidate (planner.disagg_tails): the
    serving workers per pool that meet the SLO percentile at the peak, at the layout the
    analytic search chose, and the latencies the simulator measured there."""

    prefill_tp: int
    decode_tp: int
    prefill_workers: int
    decode_workers: int
    latency_ms: dict
    meets_slo: bool
    binding: str
    steps: tuple[Step, ...] = ()
    source: str = "simulated"


def tp_options(candidate: Candidate, allowed: Sequence[int] | None = None) -> list[int]:
    """TP degrees a pool worker may take: ``allowed`` (the scenario's TP options, else
    ``POOL_TP_OPTIONS``) within the scale-up domain and dividing the heads."""
    model, gpu = candidate.model, candidate.gpu
    return [
        t
        for t in (allowed or POOL_TP_OPTIONS)
        if t <= gpu.scale_up_domain_gpus and model.num_attention_heads % t == 0
    ]


def pool_layout(candidate: Candidate, tp: int) -> dict:
    """One worker's layout: TP ``tp``, EP = TP for MoE when it divides the experts."""
    experts = candidate.model.num_experts
    ep = tp if experts and experts % tp == 0 else 1
    return {"tp": tp, "pp": 1, "ep": ep, "dp": 1}


def peak_rate_rps(traffic: Traffic, policy: Policy) -> float:
    """``lambda``: what the serving workers carry at the peak, burst included (req/s)."""
    return float(traffic.peak_rps * policy.burst_factor)


def _size(cands, pairs: Sequence[tuple[int, int, int]], traffic, slo, policy, wait_scales):
    """One vectorized ``size_pools`` over ``pairs`` = (candidate index, prefill TP, decode TP)."""
    of = [cands[i] for i, _, _ in pairs]
    layouts = {
        which: {
            k: np.array([pool_layout(c, pair[j])[k] for c, pair in zip(of, pairs, strict=True)])
            for k in ("tp", "pp", "ep", "dp")
        }
        for j, which in ((1, "prefill"), (2, "decode"))
    }
    return size_pools(
        [c.model for c in of],
        [c.gpu for c in of],
        layouts["prefill"],
        layouts["decode"],
        layouts["decode"],  # the aggregated alternative is not this row's concern
        [c.weight_precision for c in of],
        [c.kv_precision for c in of],
        float(traffic.prompt_tokens_mean),
        float(traffic.output_tokens_mean),
        peak_rate_rps(traffic, policy),
        slo.ttft_ms / 1e3,
        slo.tpot_ms / 1e3,
        engine=[c.engine for c in of],
        calibration=[c.calibration for c in of],
        target_utilization=policy.target_utilization,
        usd_per_gpu_hour=np.array([c.gpu.usd_per_gpu_hour for c in of], dtype=np.float64),
        prefill_wait_scale=np.array([wait_scales[i] for i, _, _ in pairs], dtype=np.float64),
    )


def search_layouts(
    cands: Sequence[Candidate], traffic: Traffic, slo: Slo, policy: Policy, wait_scales,
    allowed_tps: Sequence[Sequence[int] | None] | None = None,
    given: Sequence[PoolsGiven | None] | None = None,
) -> tuple[PoolSizing | None, list[int | None]]:  # fmt: skip
    """Every candidate's (prefill TP, decode TP) pairs sized in one ``size_pools`` call, and
    per candidate the index of its chosen pair: the one whose pools cost least meeting the
    SLOs in the mean-value model (then fewest GPUs, then smallest TPs), or ``given``'s layout
    (the tail stage's); a candidate none meets keeps its fewest-GPU layout (its row says why
    it misses); None when no TP divides the heads."""
    allowed = list(allowed_tps) if allowed_tps is not None else [None] * len(cands)
    given = list(given) if given is not None else [None] * len(cands)
    pairs: list[tuple[int, int, int]] = []
    mine: list[list[int]] = []
    for i, c in enumerate(cands):
        g = given[i]
        if g is not None:  # the tail stage's layout alone (a pair's sizing is its own)
            layouts = [(g.prefill_tp, g.decode_tp)]
        else:
            tps = tp_options(c, allowed[i])
            layouts = [(p, d) for p in tps for d in tps]
        mine.append(list(range(len(pairs), len(pairs) + len(layouts))))
        pairs += [(i, p, d) for p, d in layouts]
    if not pairs:
        return None, [None] * len(cands)
    sized = _size(cands, pairs, traffic, slo, policy, wait_scales)
    usd = np.nan_to_num(sized.disagg_usd_per_hour, nan=np.inf)

    def rank(k: int) -> tuple:
        ok = bool(sized.meets_slo[k])
        return (not ok, usd[k] if ok else 0.0, sized.disagg_gpus[k], pairs[k][1:])

    chosen: list[int | None] = []
    for g, ks in zip(given, mine, strict=True):
        if g is not None:
            chosen.append(next(k for k in ks if pairs[k][1:] == (g.prefill_tp, g.decode_tp)))
        else:
            chosen.append(min(ks, key=rank) if ks else None)
    return sized, chosen


def plan_disagg(
    cands: Sequence[Candidate],
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    api_price: ApiPrice | Sequence[ApiPrice | None] | None = None,
    given: Sequence[PoolsGiven | None] | None = None,
    prefill_wait_scale: Sequence[float] | None = None,
    allowed_tps: Sequence[Sequence[int] | None] | None = None,
) -> list[PlanRow]:
    """Every disaggregated candidate through the chain (unranked), each a ``PlanRow`` with
    ``mode`` "disagg", its ``pools`` and ``kv_transfer_ms``. ``given``: the tail stage's pool
    sizes per candidate (else the mean-value sizing). ``prefill_wait_scale``: the fitted
    scale on the prefill queue's wait per candidate (``sizing.disagg.DisaggFit``; 1 unfitted);
    the candidates' calibrations carry the rest of the fit. ``allowed_tps``: per candidate the
    TP degrees its pools may take (the scenario's TP options; None: ``POOL_TP_OPTIONS``).
    ``api_price``: one for all, or one per candidate (``chain.api_prices``)."""
    prices = api_prices(api_price, len(cands))
    given = list(given) if given is not None else [None] * len(cands)
    scales = list(prefill_wait_scale) if prefill_wait_scale is not None else [1.0] * len(cands)
    sized, chosen = search_layouts(cands, traffic, slo, policy, scales, allowed_tps, given)
    return [
        _unfit(c, "no TP degree divides the attention heads")
        if k is None
        else _row(c, sized, k, traffic, slo, policy, price, g)
        for c, k, g, price in zip(cands, chosen, given, prices, strict=True)
    ]


# ---------------------------------------------------------------------------- one row
def _pool_capacity(sized: PoolSizing, k: int, u: float, lam: float, g: PoolsGiven | None):
    """(X_p, X_d) req/s per worker entering the headroom stage; from the simulated worker
    counts when given (so ``ceil(lambda / (u X))`` gives them back)."""
    if g is not None:
        return lam / (u * g.prefill_workers), lam / (u * g.decode_workers)
    x_p = sized.dp_p[k] * sized.prefill_rps_per_rank[k] / u
    x_d = sized.dp_d[k] * sized.decode_rps_per_rank[k]
    return float(x_p), float(x_d)


def _capacity_steps(sized: PoolSizing, k: int, u: float, x_p: float, x_d: float, g) -> list:
    if g is not None:
        return [
            step(
                f"X_{name}",
                "rate / (u * workers)",
                [
                    q("rate", sized.rate_rps[k], "req/s (peak x burst)"),
                    q("u", u, "target utilization"),
                    q("workers", workers, f"{name} workers the simulation needs"),
                ],
                value,
                "req/s per worker",
                "from the two-pool simulation at the peak",
            )
            for name, workers, value in (
                ("prefill", g.prefill_workers, x_p),
                ("decode", g.decode_workers, x_d),
            )
        ]
    return [
        step(
            "X_prefill",
            "DP_p * prefill_rps_per_rank / u",
            [
                q("DP_p", sized.dp_p[k], ""),
                q("prefill_rps_per_rank", sized.prefill_rps_per_rank[k], "req/s at rho_max"),
                q("u", u, "target utilization"),
            ],
            x_p,
            "req/s per worker",
            "the headroom stage divides by u again, so the pool runs at rho_max",
        ),
        step(
            "X_decode",
            "DP_d * decode_rps_per_rank",
            [
                q("DP_d", sized.dp_d[k], ""),
                q("decode_rps_per_rank", sized.decode_rps_per_rank[k], "req/s at the TPOT SLO"),
            ],
            x_d,
            "req/s per worker",
        ),
    ]


def _latency(sized: PoolSizing, k: int, fleets: dict, workers: dict) -> tuple[dict, list[Step]]:
    """Mean-value TTFT and TPOT at the serving pools carrying ``lambda`` (see the module doc)."""
    pre, xfer = sized.prefill, sized.transfer
    lam = float(sized.rate_rps[k])
    x_w, y_w = float(fleets["prefill"].serving[0]), float(fleets["decode"].serving[0])
    isl, osl = float(sized.isl[k]), float(sized.osl[k])
    mu = float(pre.tokens_per_s_per_rank[k])
    rho = lam * isl / (x_w * float(sized.dp_p[k]) * mu)
    wait = float(pre.wait_s(rho)[k])
    wire = float(xfer.wire_s[k])
    link_u, link_wait = (float(v) for v in link_wait_s(lam / (y_w * float(sized.dp_d[k])), wire))
    b_slo, x_rank = float(sized.decode_batch_per_rank[k]), float(sized.decode_rps_per_rank[k])
    b_load = max(b_slo * lam / (y_w * float(sized.dp_d[k]) * x_rank), 1.0)
    cd = workers["decode"].arrays
    tpot_s = float(decode_tpot_s(cd, np.array([b_load]), sized.isl[k : k + 1],
                                 sized.osl[k : k + 1])[0])  # fmt: skip
    join = float(first_token_join_s(cd, np.array([tpot_s]))[0])
    ttft_s = mean_ttft_s(float(pre.frontend_s[k]), wait, float(pre.prefill_s[k]),
                         float(xfer.exposed_s[k]), link_wait, join)  # fmt: skip
    steps = [
        step(
            "prefill_load",
            "rate * isl / (workers_p * DP_p * mu_tok)",
            [
                q("rate", lam, "req/s"),
                q("isl", isl, "tokens"),
                q("workers_p", x_w, "serving prefill workers"),
                q("DP_p", sized.dp_p[k], ""),
                q("mu_tok", mu, "tokens/s per rank"),
            ],
            rho,
            "",
        ),
        step(
            "decode_link_wait",
            "link_u / (2 * (1 - link_u)) * wire_s",
            [q("link_u", link_u, "decode rank's link busy share"), q("wire_s", wire, "s")],
            link_wait,
            "s",
            "M/D/1 wait behind other requests' transfers",
        ),
        step(
            "ttft_ms",
            "(frontend + wait + prefill_s + transfer_s + link_wait + join) * 1000",
            [
                q("frontend", pre.frontend_s[k], "s"),
                q("wait", wait, "s (M/D/1 in full prefill steps at prefill_load)"),
                q("prefill_s", pre.prefill_s[k], "s"),
                q("transfer_s", xfer.exposed_s[k], "s (exposed)"),
                q("link_wait", link_wait, "s"),
                q("join", join, "s: first_token_decode_steps x the decode step at this load"),
            ],
            ttft_s * 1e3,
            "ms",
            "mean value",
        ),
        step(
            "decode_batch_at_peak",
            "max(b_slo * rate / (workers_d * DP_d * X_rank_d), 1)",
            [
                q("b_slo", b_slo, "sequences per rank at the TPOT SLO"),
                q("rate", lam, "req/s"),
                q("workers_d", y_w, "serving decode workers"),
                q("DP_d", sized.dp_d[k], ""),
                q("X_rank_d", x_rank, "req/s per rank at b_slo"),
            ],
            b_load,
            "sequences per rank",
            "Little: the batch scales with the rate a rank carries",
        ),
        step(
            "tpot_ms",
            "decode_step(b, isl + osl / 2) / tau * 1000",
            [q("b", b_load, "sequences per rank"), q("isl", isl, "tokens"), q("osl", osl, "")],
            tpot_s * 1e3,
            "ms",
            "mean value; sizing.steptime.decode_step",
            kind="model",
        ),
    ]
    table = {"ttft": {"mean": ttft_s * 1e3}, "tpot": {"mean": tpot_s * 1e3}}
    return table, steps


class _Percentile:
    """The analytic TTFT at the SLO percentile of a disaggregated row: the M/D/1 wait's
    quantile (``tail_model.mg1_wait_tail``, service = one full prefill step, times the fitted
    wait scale) plus the prefill and the transfer of the percentile prompt (lognormal from the
    traffic's mean and p95), the front end, the link wait and the decode worker's hand-off at
    the TPOT SLO's step (``PoolSizing.join_s``). A sum of quantiles: it errs high. TPOT's is
    its mean (a decode-only batch steps evenly; the simulator measures it)."""

    def __init__(self, prefill, sized: PoolSizing, k: int, traffic: Traffic, slo: Slo):
        from sizing.steptime import prefill_time

        self.sized, self.k, self.slo = sized, k, slo
        self.q = float(slo.percentile) / 100.0
        self.isl = float(sized.isl[k])
        self.isl_q = length_quantile(traffic.prompt_tokens_mean, traffic.prompt_tokens_p95,
                                     self.q)  # fmt: skip
        self.prefill_q_s = float(prefill_time(prefill, np.array([self.isl_q])).prefill_s[0])
        self.transfer_q_s = float(sized.transfer.exposed_s[k]) * self.isl_q / self.isl

    def ttft_s(self, x_w: int, y_w: int) -> float:
        from sizing.tail_model import mg1_wait_tail

        s, k = self.sized, self.k
        pre, wire = s.prefill, float(s.transfer.wire_s[k])
        lam = float(s.rate_rps[k])
        rho = lam * self.isl / (x_w * float(s.dp_p[k]) * float(pre.tokens_per_s_per_rank[k]))
        if rho >= 1.0:
            return math.inf
        decay, weight = (float(v[0]) for v in mg1_wait_tail(np.array([rho]), 0.0))
        tail = 1.0 - self.q
        wait_q = float(pre.step_full_s[k]) / decay * math.log(weight / tail) if weight > tail \
            else 0.0  # fmt: skip
        _, link_wait = link_wait_s(lam / (y_w * float(s.dp_d[k])), wire)
        return float(pre.frontend_s[k] + pre.wait_scale[k] * wait_q + self.prefill_q_s
                     + self.transfer_q_s + link_wait + s.join_s[k])  # fmt: skip

    def prefill_workers(self, x0: int, y_w: int) -> int:
        """The fewest prefill workers from ``x0`` whose TTFT quantile meets the SLO (up to
        ``4 x0 + 8``; ``x0`` when none does: the row then misses)."""
        budget = self.slo.ttft_ms / 1e3
        lo, hi = max(x0, 1), 4 * max(x0, 1) + 8
        if self.ttft_s(lo, y_w) <= budget:
            return lo
        if self.ttft_s(hi, y_w) > budget:
            return x0
        while hi - lo > 1:  # TTFT falls as workers are added: bisection on whole workers
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.ttft_s(mid, y_w) <= budget else (mid, hi)
        return hi

    def step(self, x0: int, x: int, ttft_q_s: float) -> Step:
        p = f"p{self.slo.percentile:g}"
        return step(
            f"prefill_workers_at_{p}",
            f"fewest workers >= x0 with TTFT_{p} = frontend + wait_q + prefill(isl_q) + "
            "transfer(isl_q) + link_wait + join_s <= TTFT_slo",
            [
                q("x0", x0, "prefill workers of the mean-value sizing"),
                q("isl_q", self.isl_q, f"tokens ({p} prompt, lognormal from mean and p95)"),
                q("prefill_isl_q", self.prefill_q_s, "s"),
                q("transfer_isl_q", self.transfer_q_s, "s"),
                q("join_s", self.sized.join_s[self.k], "s: the decode worker's hand-off"),
                q(f"TTFT_{p}", ttft_q_s * 1e3, "ms"),
                q("TTFT_slo", self.slo.ttft_ms, "ms"),
            ],
            x,
            "workers",
            "wait_q: the M/D/1 waiting-time quantile (sizing.tail_model.mg1_wait_tail) in "
            "full prefill steps, times the fitted wait scale",
            kind="search",
        )


def _row(
    c: Candidate,
    sized: PoolSizing,
    k: int,
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    api_price: ApiPrice | None,
    g: PoolsGiven | None,
) -> PlanRow:
    u, lam = float(policy.target_utilization), float(sized.rate_rps[k])
    gpus_w = {
        "prefill": float(sized.gpus_per_worker_p[k]),
        "decode": float(sized.gpus_per_worker_d[k]),
    }
    price = float(sized.usd_per_gpu_hour[k])
    fits = bool(np.isfinite(sized.prefill_workers[k]) and np.isfinite(sized.decode_workers[k]))
    meets_analytic = bool(sized.meets_slo[k])
    d: list[Step] = []
    d += staged(STAGE_LAYOUT, [_layout_step(c, sized, k)])
    workers = _workers(c, sized, k)
    if not fits and g is None:  # a pool that cannot serve has no sizing to show, only why
        return _unfit(c, _why(sized, k, workers),
                      d + staged(STAGE_TRANSFER, sized.transfer.steps(k)), sized, k)  # fmt: skip
    d += _memory(workers)
    d += sized.steps(k)
    x_p, x_d = _pool_capacity(sized, k, u, lam, g)
    d += staged(STAGE_FLEET, _capacity_steps(sized, k, u, x_p, x_d, g))

    def fleet(name: str, x: float) -> Fleet:
        weights = float(workers[name].fit.weights_gb_per_gpu[0])  # its cold start's warm pool
        return size_fleet(np.array([x]), 0.0, traffic, policy, gpus_w[name], price, True, weights)

    fleets = {"prefill": fleet("prefill", x_p), "decode": fleet("decode", x_d)}
    mean, lat_steps = _latency(sized, k, fleets, workers)
    latency = mean
    if g is None:  # the analytic percentile: grow the prefill pool until its TTFT tail fits
        pct = _Percentile(workers["prefill"].arrays, sized, k, traffic, slo)
        x0 = int(fleets["prefill"].serving[0])
        x_req = pct.prefill_workers(x0, int(fleets["decode"].serving[0]))
        if x_req > x0:
            fleets["prefill"] = fleet("prefill", lam / (u * x_req))
            mean, lat_steps = _latency(sized, k, fleets, workers)
        ttft_q = pct.ttft_s(int(fleets["prefill"].serving[0]), int(fleets["decode"].serving[0]))
        lat_steps += [pct.step(x0, int(fleets["prefill"].serving[0]), ttft_q)]
        key = f"p{slo.percentile:g}"
        latency = {
            "ttft": {**mean["ttft"], key: ttft_q * 1e3},
            "tpot": {**mean["tpot"], key: mean["tpot"]["mean"]},
        }
        meets_analytic = meets_analytic and ttft_q * 1e3 <= slo.ttft_ms
    if g is not None:
        latency, meets, binding, source = g.latency_ms, g.meets_slo, g.binding, g.source
        statistic = f"p{slo.percentile:g}"
        d += staged(STAGE_LATENCY, list(g.steps))
    else:
        meets, source, statistic = meets_analytic, "analytic", f"p{slo.percentile:g}"
        binding = _binding(sized, k)
        d += staged(STAGE_LATENCY, lat_steps)
    for name in POOLS:
        d += staged(f"{STAGE_FLEET} - {name} pool", fleets[name].steps(0))
    total = _totals(fleets)
    d += staged(STAGE_FLEET, total["steps"])
    band, band_steps = _band(fleets, c.calibration.relative_error)
    d += band_steps
    bev = None
    if api_price is not None and price > 0:
        bev, bev_steps = breakeven(_gpu_fleet(fleets, traffic, policy, lam, u), 0, api_price)
        d += staged(STAGE_BREAKEVEN, [_gpu_unit_step()] + bev_steps)
    pools = _pools_json(c, sized, k, fleets)
    stat = statistic if statistic in latency["ttft"] else "mean"
    return PlanRow(
        rank=0,
        label=c.label or f"{c.model.name} on {c.gpu.name} (disaggregated)",
        model=c.model.name,
        gpu=c.gpu.name,
        weight_precision=c.weight_precision,
        kv_precision=c.kv_precision or c.weight_precision,
        tp=pools["decode"]["tp"],
        pp=pools["decode"]["pp"],
        ep=pools["decode"]["ep"],
        dp=pools["decode"]["dp"],
        gpus_per_replica=int(gpus_w["decode"]),
        fits=True,
        reason="" if meets else _why(sized, k) or "misses the SLO",
        weights_gb_per_gpu=float(workers["decode"].fit.weights_gb_per_gpu[0]),
        kv_bytes_per_token=float(sized.transfer.kv_bytes_per_token[k]),
        kv_capacity_tokens=math.nan,
        max_concurrency=math.nan,
        batch=float(sized.decode_batch_per_rank[k]),
        ttft_ms=float(latency["ttft"].get(stat, math.nan) or math.nan),
        tpot_ms=float(latency["tpot"].get(stat, math.nan) or math.nan),
        requests_per_s_per_replica=lam / max(total["serving_workers"], 1),
        output_tok_s_per_replica=lam * float(sized.osl[k]) / max(total["serving_workers"], 1),
        in_flight_at_peak=float(sum(f.in_flight_at_peak[0] for f in fleets.values())),
        serving_replicas=int(total["serving_workers"]),
        warm_pool_replicas=int(sum(f.warm.replicas[0] for f in fleets.values())),
        replicas=int(total["workers"]),
        gpus=int(total["gpus"]),
        utilization=total["utilization"],
        usd_per_hour=total["usd_per_hour"],
        usd_per_month=total["usd_per_month"],
        usd_per_mtok=total["usd_per_mtok"],
        usd_per_mtok_total=total["usd_per_mtok_total"],
        tokens_per_usd=total["tokens_per_usd"],
        binding=binding,
        meets_slo=bool(meets),
        breakeven=bev,
        derivation=tuple(d),
        latency_source=source,
        latency_statistic=statistic,
        latency_ms=latency,
        mean_value_rps=lam / max(total["serving_workers"], 1),
        mean_value_ttft_ms=float(mean["ttft"]["mean"]),
        mean_value_tpot_ms=float(mean["tpot"]["mean"]),
        band=band,
        profile=c.calibration.name or "physics defaults",
        mode=MODE,
        pools=pools,
        kv_transfer_ms=float(sized.kv_transfer_ms[k]),
        expert_precision=expert_precision_of(c.model),  # the pools' (they take no other)
    )


@dataclass(frozen=True)
class _Worker:
    """One pool's worker of a row and its memory fit (built once per row)."""

    arrays: CandidateArrays
    fit: MemoryFit
    tp: int


def _workers(c: Candidate, sized: PoolSizing, k: int) -> dict[str, _Worker]:
    """Row ``k``'s decode worker, fitted at the live context ``isl + osl`` its KV holds, and
    its prefill worker, fitted at ``isl`` (the decode worker first: the memory chart and the
    row's weights read it)."""
    isl, osl = float(sized.isl[k]), float(sized.osl[k])
    out = {}
    for name, per_worker, context in (("decode", sized.gpus_per_worker_d, isl + osl),
                                      ("prefill", sized.gpus_per_worker_p, isl)):  # fmt: skip
        tp = int(per_worker[k])
        arrays = worker_arrays(c, tp)
        out[name] = _Worker(arrays, fit_memory(arrays, np.array([context])), tp)
    return out


def _memory(workers: dict[str, _Worker]) -> list[Step]:
    """Each worker's memory fit, in the chain's own steps."""
    from sizing.chain import STAGE_MEMORY, _memory_steps

    out: list[Step] = []
    for name, w in workers.items():
        out += staged(f"{STAGE_MEMORY} - {name} worker", _memory_steps(w.arrays, w.fit, 0))
    return out


def _layout_step(c: Candidate, sized: PoolSizing, k: int) -> Step:
    return step(
        "layout",
        "cheapest (prefill TP, decode TP) meeting the SLOs in the mean-value model",
        [
            q("tp_options", ", ".join(str(t) for t in tp_options(c)), "TP per worker"),
            q("prefill_tp", sized.gpus_per_worker_p[k], ""),
            q("decode_tp", sized.gpus_per_worker_d[k], ""),
        ],
        f"prefill TP{int(sized.gpus_per_worker_p[k])}, decode TP{int(sized.gpus_per_worker_d[k])}",
        "",
        "EP = TP for MoE when it divides the experts; sizing.disagg_plan.search_layouts",
        kind="search",
    )


def _binding(sized: PoolSizing, k: int) -> str:
    """Which pool's SLO binds in the mean-value sizing: "ttft" (prefill) or "tpot"."""
    return "ttft" if sized.prefill_rho_max[k] < sized.target_utilization else "tpot"


def _why(sized: PoolSizing, k: int, workers: dict[str, _Worker] | None = None) -> str:
    """Why a pool cannot serve: a worker's memory reason in the chain's own words (then
    which worker), else the SLO it cannot meet."""
    for name, pool_workers in (("decode", sized.decode_workers),
                               ("prefill", sized.prefill_workers)):  # fmt: skip
        w = (workers or {}).get(name)
        if w is not None and not np.isfinite(pool_workers[k]) and not w.fit.fits[0]:
            return f"{w.fit.reasons(w.arrays)[0]} ({name} worker, TP{w.tp})"
    if not np.isfinite(sized.decode_workers[k]):
        return "decode pool: no batch meets the TPOT SLO"
    if not np.isfinite(sized.prefill_workers[k]):
        reason = str(sized.transfer.reason[k])
        return reason or "prefill pool: the prompt's prefill and transfer exceed the TTFT SLO"
    return ""


def _totals(fleets: dict[str, Fleet]) -> dict:
    """The deployment's workers, GPUs and money: the pools' sums, each a step."""
    p, dd = fleets["prefill"], fleets["decode"]
    names = ("serving", "replicas", "gpus", "usd_per_hour", "usd_per_month", "usd_per_mtok",
             "usd_per_mtok_total")  # fmt: skip
    sums = {n: float(getattr(p, n)[0] + getattr(dd, n)[0]) for n in names}
    util = (p.utilization[0] * p.gpus[0] + dd.utilization[0] * dd.gpus[0]) / sums["gpus"]
    steps = [
        step(
            f"{n}_total" if n in ("serving", "replicas", "gpus") else n,
            f"{n}_prefill + {n}_decode",
            [q(f"{n}_prefill", getattr(p, n)[0], ""), q(f"{n}_decode", getattr(dd, n)[0], "")],
            sums[n],
            unit,
            note,
        )
        for n, unit, note in (
            ("serving", "workers", "serving workers of both pools"),
            ("replicas", "workers", "workers billed: serving + spares + warm pool, per pool"),
            ("gpus", "GPUs", ""),
            ("usd_per_hour", "$/h", ""),
            ("usd_per_month", "$/month", ""),
            ("usd_per_mtok", "$/M output tokens", "both pools divide by the same tokens"),
            ("usd_per_mtok_total", "$/M tokens", "input + output"),
        )
    ]
    tokens_per_usd = 1e6 / sums["usd_per_mtok"] if sums["usd_per_mtok"] > 0 else math.inf
    steps.append(
        step("tokens_per_usd", "1e6 / usd_per_mtok",
             [q("usd_per_mtok", sums["usd_per_mtok"], "$/M")], tokens_per_usd, "tokens/$")
    )  # fmt: skip
    steps.append(
        step(
            "utilization",
            "(u_prefill * gpus_prefill + u_decode * gpus_decode) / gpus",
            [
                q("u_prefill", p.utilization[0], "mean load of the prefill pool"),
                q("gpus_prefill", p.gpus[0], "GPUs"),
                q("u_decode", dd.utilization[0], "mean load of the decode pool"),
                q("gpus_decode", dd.gpus[0], "GPUs"),
                q("gpus", sums["gpus"], "GPUs"),
            ],
            float(util),
            "",
            "GPU-weighted mean load; headroom = 1 - utilization",
        )
    )
    return {
        "serving_workers": sums["serving"],
        "workers": sums["replicas"],
        "gpus": sums["gpus"],
        "usd_per_hour": sums["usd_per_hour"],
        "usd_per_month": sums["usd_per_month"],
        "usd_per_mtok": sums["usd_per_mtok"],
        "usd_per_mtok_total": sums["usd_per_mtok_total"],
        "tokens_per_usd": tokens_per_usd,
        "utilization": float(util),
        "steps": steps,
    }


def _band(fleets: dict[str, Fleet], e: float) -> tuple[Band, list[Step]]:
    """Each pool's band at ``X (1 +- e)``, summed (both pools err the same way: one profile)."""
    parts = {name: error_band(f, 0, e) for name, f in fleets.items()}
    steps: list[Step] = []
    for name, (_, s) in parts.items():
        steps += staged(f"{STAGE_BAND} - {name} pool", s)
    p, dd = parts["prefill"][0], parts["decode"][0]
    usd = None
    if p.usd_per_month is not None and dd.usd_per_month is not None:
        usd = (p.usd_per_month[0] + dd.usd_per_month[0], p.usd_per_month[1] + dd.usd_per_month[1])
    band = Band(
        relative_error=p.relative_error,
        replicas=(p.replicas[0] + dd.replicas[0], p.replicas[1] + dd.replicas[1]),
        gpus=(p.gpus[0] + dd.gpus[0], p.gpus[1] + dd.gpus[1]),
        usd_per_month=usd,
    )
    steps += staged(
        STAGE_BAND,
        [
            step(
                f"band_workers_{side}",
                "prefill + decode",
                [q("prefill", p.replicas[j], "workers"), q("decode", dd.replicas[j], "workers")],
                band.replicas[j],
                "workers",
            )
            for j, side in ((0, "low"), (1, "high"))
        ],
    )
    return band, steps


def _gpu_fleet(fleets: dict[str, Fleet], traffic, policy, lam: float, u: float) -> Fleet:
    """The deployment as a fleet of single GPUs (for the break-even; see the module doc):
    one GPU carries ``lambda / (u * serving GPUs)``, spares and warm pools in GPUs."""
    p, dd = fleets["prefill"], fleets["decode"]
    serving = float(p.serving[0] * p.gpus_per_replica[0] + dd.serving[0] * dd.gpus_per_replica[0])
    spare_gpus = policy.spare_replicas * float(p.gpus_per_replica[0] + dd.gpus_per_replica[0])
    warm_gpus = float(
        p.warm.replicas[0] * p.gpus_per_replica[0] + dd.warm.replicas[0] * dd.gpus_per_replica[0]
    )
    gpus = float(p.gpus[0] + dd.gpus[0])
    one = np.ones(1)
    return Fleet(
        capacity_rps=np.array([lam / (u * serving)]),
        serving=np.array([serving]),
        replicas=np.array([gpus]),
        warm=WarmPool(np.array([warm_gpus]), False),
        gpus_per_replica=one,
        usd_per_gpu_hour=p.usd_per_gpu_hour[:1],
        utilization=np.array([traffic.mean_rps * u * serving / (lam * gpus)]),
        usd_per_hour=np.array([p.usd_per_hour[0] + dd.usd_per_hour[0]]),
        usd_per_month=np.array([p.usd_per_month[0] + dd.usd_per_month[0]]),
        usd_per_mtok=np.array([p.usd_per_mtok[0] + dd.usd_per_mtok[0]]),
        usd_per_mtok_total=np.array([p.usd_per_mtok_total[0] + dd.usd_per_mtok_total[0]]),
        tokens_per_usd=np.array([1e6 / (p.usd_per_mtok[0] + dd.usd_per_mtok[0])]),
        in_flight_at_peak=one * np.nan,
        residence_s=one * 0.0,
        traffic=traffic,
        policy=dataclasses.replace(policy, spare_replicas=int(round(spare_gpus))),
    )


def _gpu_unit_step() -> Step:
    return step(
        "breakeven_unit",
        "one GPU of the deployment",
        [],
        "GPU",
        "",
        "a disaggregated deployment grows by a worker of either pool; per GPU, X is "
        "lambda / (u * serving GPUs) and spares and warm pools count in GPUs",
        kind="model",
    )


def _pools_json(c: Candidate, sized: PoolSizing, k: int, fleets: dict) -> dict:
    out = {}
    for name, per_worker in (
        ("prefill", sized.gpus_per_worker_p),
        ("decode", sized.gpus_per_worker_d),
    ):
        tp = int(per_worker[k])
        f = fleets[name]
        out[name] = {
            **pool_layout(c, tp),
            "workers": int(f.replicas[0]),
            "serving_workers": int(f.serving[0]),
            "gpus": int(f.gpus[0]),
        }
    return out


def _unfit(c: Candidate, reason: str, d=(), sized=None, k=0) -> PlanRow:
    nan = math.nan
    tp_d = int(sized.gpus_per_worker_d[k]) if sized is not None else 1  # the layout tried
    return PlanRow(
        rank=0,
        label=c.label or f"{c.model.name} on {c.gpu.name} (disaggregated)",
        model=c.model.name,
        gpu=c.gpu.name,
        weight_precision=c.weight_precision,
        kv_precision=c.kv_precision or c.weight_precision,
        tp=tp_d,
        pp=1,
        ep=1,
        dp=1,
        gpus_per_replica=tp_d,
        fits=False,
        reason=reason,
        weights_gb_per_gpu=nan,
        kv_bytes_per_token=nan,
        kv_capacity_tokens=nan,
        max_concurrency=nan,
        batch=0.0,
        ttft_ms=nan,
        tpot_ms=nan,
        requests_per_s_per_replica=0.0,
        output_tok_s_per_replica=0.0,
        in_flight_at_peak=nan,
        serving_replicas=0,
        replicas=0,
        gpus=0,
        utilization=0.0,
        usd_per_hour=nan,
        usd_per_month=nan,
        usd_per_mtok=math.inf,
        usd_per_mtok_total=math.inf,
        tokens_per_usd=0.0,
        binding="memory",
        meets_slo=False,
        breakeven=None,
        derivation=tuple(d),
        profile=c.calibration.name or "physics defaults",
        mode=MODE,
        kv_transfer_ms=float(sized.kv_transfer_ms[k]) if sized is not None else nan,
        expert_precision=expert_precision_of(c.model),
    )


# ---------------------------------------------------------------------------- tail stage
#: Rounds of the two-pool simulation the tail stage may run per candidate; each round that
#: misses grows the pool whose percentile misses by ``GROWTH`` (at least one worker).
MAX_SIM_ROUNDS = 6
GROWTH = 0.2


@dataclass(frozen=True)
class PoolProbe:
    """One simulated deployment at the peak: its workers and what the simulator measured."""

    prefill_workers: int
    decode_workers: int
    ttft_ms: float  # at the SLO percentile
    tpot_ms: float
    goodput: float
    meets_slo: bool


def worker_arrays(c: Candidate, tp: int):
    """One worker of layout TP ``tp`` (``pool_layout``) as single-row ``CandidateArrays``."""
    layout = pool_layout(c, tp)
    return CandidateArrays.build(
        c.model, c.gpu, c.weight_precision, c.kv_precision, layout["tp"], layout["pp"],
        layout["ep"], layout["dp"], engine=c.engine, calibration=c.calibration,
    )  # fmt: skip


def simulate_pools(
    c: Candidate,
    prefill_tp: int,
    decode_tp: int,
    prefill_workers: int,
    decode_workers: int,
    traffic: Traffic,
    slo: Slo,
    policy: Policy,
    requests: int,
    warmup_requests: int,
    seed: int,
) -> tuple[PoolsGiven, list[PoolProbe]]:
    """The tail stage of a disaggregated candidate: Poisson arrivals at ``lambda`` through
    the two-pool simulator (sizing.disagg_sim) with the prompt and output length
    distributions of the traffic; while a percentile misses its SLO (or goodput its target),
    the pool that misses grows (TTFT: prefill, TPOT: decode) and the deployment runs again,
    at most ``MAX_SIM_ROUNDS`` times. Starts from the mean-value sizing, so it only adds."""
    from sizing.disagg_sim import simulate_disagg
    from sizing.simulate import lengths_from_mean_p95

    isl = lengths_from_mean_p95(traffic.prompt_tokens_mean, traffic.prompt_tokens_p95)
    osl = lengths_from_mean_p95(traffic.output_tokens_mean, traffic.output_tokens_p95)
    cp, cd = worker_arrays(c, prefill_tp), worker_arrays(c, decode_tp)
    x, y = max(int(prefill_workers), 1), max(int(decode_workers), 1)
    lam, p = peak_rate_rps(traffic, policy), float(slo.percentile)
    probes: list[PoolProbe] = []
    result = None
    for _ in range(MAX_SIM_ROUNDS):
        result = simulate_disagg(cp, cd, x, y, isl, osl, requests, rate_rps=lam,
                                 warmup_requests=warmup_requests, seed=seed)  # fmt: skip
        ttft, tpot = result.ttft_s * 1e3, np.nan_to_num(result.tpot_s) * 1e3
        ttft_p, tpot_p = float(np.percentile(ttft, p)), float(np.percentile(tpot, p))
        good = float(np.mean((ttft <= slo.ttft_ms) & (tpot <= slo.tpot_ms)))
        ok_ttft, ok_tpot = ttft_p <= slo.ttft_ms, tpot_p <= slo.tpot_ms
        ok = ok_ttft and ok_tpot and good >= slo.goodput_target
        probes.append(PoolProbe(x, y, ttft_p, tpot_p, good, ok))
        if ok:
            break
        grow_p = not ok_ttft
        grow_d = not ok_tpot or ok_ttft  # goodput alone misses: the decode pool grows
        x += max(1, math.ceil(GROWTH * x)) if grow_p else 0
        y += max(1, math.ceil(GROWTH * y)) if grow_d else 0
    last = probes[-1]
    if not last.meets_slo:  # the last grown deployment was not simulated: report the last run
        x, y = last.prefill_workers, last.decode_workers
    table = {
        name: {f"p{q_:g}": float(np.percentile(values, q_)) for q_ in sorted({50, 95, 99, p})}
        for name, values in (("ttft", result.ttft_s * 1e3),
                             ("tpot", np.nan_to_num(result.tpot_s) * 1e3))
    }  # fmt: skip
    binding = "ttft" if last.ttft_ms / slo.ttft_ms >= last.tpot_ms / slo.tpot_ms else "tpot"
    given = PoolsGiven(
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        prefill_workers=x,
        decode_workers=y,
        latency_ms=table,
        meets_slo=last.meets_slo,
        binding=binding,
        steps=tuple(probe_steps(probes, slo, lam, requests, warmup_requests, seed)),
    )
    return given, probes


def probe_steps(probes, slo: Slo, lam: float, requests: int, warmup: int, seed: int) -> list:
    """The tail stage's derivation: one simulation step per round (``PoolProbe``)."""
    p = f"p{slo.percentile:g}"
    return [
        step(
            f"simulated_round_{k}",
            "two-pool discrete-event simulation at the peak (sizing.disagg_sim)",
            [
                q("rate", lam, "req/s (Poisson)"),
                q("prefill_workers", pr.prefill_workers, ""),
                q("decode_workers", pr.decode_workers, ""),
                q(f"ttft_{p}", pr.ttft_ms, f"ms (SLO {slo.ttft_ms:g})"),
                q(f"tpot_{p}", pr.tpot_ms, f"ms (SLO {slo.tpot_ms:g})"),
                q("goodput", pr.goodput, f"(target {slo.goodput_target:g})"),
                q("requests", requests, f"of which {warmup} warm-up; seed {seed}"),
            ],
            "meets" if pr.meets_slo else "misses",
            "",
            "a miss grows the pool whose percentile misses by 20 % (at least one worker)",
            kind="simulation",
        )
        for k, pr in enumerate(probes, start=1)
    ]
