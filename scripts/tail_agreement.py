"""Fit the analytic percentile model to the simulator and publish their agreement.

    python scripts/tail_agreement.py [--simulate] [--fit] [--jobs 2]

1. ``--simulate``: for every point of the grid below (dense, GQA, MoE and MLA models; TP 1-8;
   prompts 128-32k tokens; SLOs that put the operating batch anywhere from 1 to 512), the
   simulator's highest Poisson rate per replica meeting the SLO percentile and goodput
   (``sizing.tail_search.max_rate_rps``, the search a sizing run does) is saved to
   docs/tail-agreement.json (resumable: points already there are skipped).
2. ``--fit``: the four constants of ``sizing.tail_model.TailConstants`` are fitted on those
   points (least squares on log rate ratios, Nelder-Mead), and docs/tail-agreement.md gets the
   table: per point, the replicas each sizes for 50 req/s at 70 % target utilization and
   whether they agree within 10 % or 1 replica.

Needs the catalog (``manage.py load_catalog``) for model and GPU specs and the shipped
calibration profiles.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
OUT_JSON = ROOT / "docs" / "tail-agreement.json"
OUT_MD = ROOT / "docs" / "tail-agreement.md"
NOISE_JSON = ROOT / "docs" / "tail-agreement-noise.json"

PEAK_RPS, TARGET_UTILIZATION = 50.0, 0.7
# model, gpu, weight precision, TP
DEPLOYMENTS = [
    ("llama-3.1-8b", "h100_sxm", "fp8", 1),
    ("llama-3.1-8b", "l40s", "fp8", 1),
    ("llama-3.1-8b", "b200", "bf16", 2),
    ("Mistral-7B-v0.3", "a100_80gb", "bf16", 1),
    ("Qwen3-8B", "h200_sxm", "bf16", 1),
    ("Llama-3.1-70B", "h100_sxm", "fp8", 2),
    ("Llama-3.1-70B", "h200_sxm", "bf16", 4),
    ("Llama-3.1-70B", "b200", "fp8", 8),
    ("Qwen3-32B", "h100_sxm", "bf16", 2),
    ("Mixtral-8x7B", "h100_sxm", "bf16", 4),
    ("Qwen3-30B-A3B", "h200_sxm", "bf16", 1),
    ("gpt-oss-120b", "b200", "fp8", 2),
    ("DeepSeek-V3", "b200", "fp8", 8),
    ("Llama-3.1-405B", "b200", "fp8", 8),
]
# prompt mean, p95 (None: fixed), output mean, p95
SHAPES = [
    (128, None, 512, None),
    (1000, 3000, 300, 800),
    (4000, 8000, 250, 600),
    (32000, None, 200, None),
]
# TTFT ms, TPOT ms, percentile, goodput
SLOS = [
    (500, 20, 95, 0.0),
    (2000, 50, 95, 0.99),
    (10000, 100, 99, 0.0),
    (30000, 250, 90, 0.95),
]


def setup():
    import django

    django.setup()


def grid() -> list[dict]:
    points = []
    for model, gpu, precision, tp in DEPLOYMENTS:
        for isl, isl_p95, osl, osl_p95 in SHAPES:
            for ttft, tpot, pct, goodput in SLOS:
                points.append(
                    dict(
                        model=model, gpu=gpu, precision=precision, tp=tp,
                        isl=isl, isl_p95=isl_p95, osl=osl, osl_p95=osl_p95,
                        ttft_ms=ttft, tpot_ms=tpot, percentile=pct, goodput=goodput,
                    )
                )  # fmt: skip
    return points


def key(point: dict) -> str:
    return json.dumps(point, sort_keys=True)


def candidate(point: dict):
    from fleets.calibration import calibration_for
    from fleets.selectors import gpu_spec, model_spec, resolve_gpu, resolve_model
    from sizing.chain import Candidate, candidate_arrays
    from sizing.specs import Parallelism

    gpu = resolve_gpu(point["gpu"])
    calibration, label = calibration_for(gpu.slug, "vllm", point["precision"])
    spec = Candidate(
        model_spec(resolve_model(point["model"])),
        gpu_spec(gpu, 1.0),
        point["precision"],
        Parallelism(tp=point["tp"]),
        calibration=calibration,
    )
    return candidate_arrays([spec]), label


def slo_of(point: dict):
    from sizing.specs import Slo

    return Slo(point["ttft_ms"], point["tpot_ms"], point["percentile"], point["goodput"])


def traffic_of(point: dict):
    from sizing.specs import Traffic

    return Traffic(
        PEAK_RPS, PEAK_RPS / 2, point["isl"], point["osl"], point["isl_p95"], point["osl_p95"]
    )


def simulate_point(point: dict, seed_offset: int = 0) -> dict:
    """The simulated search at one grid point; ``seed_offset`` > 0 repeats it with another
    seed (the noise check)."""
    setup()
    import numpy as np

    from sizing.memory import fit_memory
    from sizing.simulate import lengths_from_mean_p95
    from sizing.tail_model import Lengths, TailModel
    from sizing.tail_search import Replica, max_rate_rps, seed_for, upper_rps

    c, label = candidate(point)
    fit = fit_memory(c, np.array([point["isl"] + point["osl"]]))
    if not fit.fits[0]:
        return {**point, "fits": False, "reason": fit.reason(c, 0)}
    slo, traffic = slo_of(point), traffic_of(point)
    isl = lengths_from_mean_p95(point["isl"], point["isl_p95"])
    osl = lengths_from_mean_p95(point["osl"], point["osl_p95"])
    lengths = Lengths(point["isl"], point["osl"], point["isl_p95"], point["osl_p95"])
    hint, _ = TailModel(c, fit, lengths).max_rate(slo)
    started = time.perf_counter()
    replica = Replica(c, isl, osl, traffic, slo, seed_for(key(point)) + seed_offset)
    found = max_rate_rps(replica, float(hint[0]), upper_rps(c, isl.mean, osl.mean))
    return {
        **point,
        "fits": True,
        "profile": label,
        "sim_rate_rps": found.rate_rps,
        "sim_binding": found.binding,
        "sim_bracket": [found.low_rps, found.high_rps],
        "sim_seconds": time.perf_counter() - started,
        "sim_probes": len(found.probes),
        # each probe's rate and simulated tails: what a fit of the latency terms can use
        "probes": [
            {
                "rate_rps": p.rate_rps,
                "ttft_ms": p.ttft_ms_at_percentile,
                "tpot_ms": p.tpot_ms_at_percentile,
                "goodput": p.goodput,
                "score": p.score,
                "meets": p.meets,
            }
            for p in found.probes
        ],
    }


def run_simulations(jobs: int) -> None:
    _simulate_into(OUT_JSON, grid(), simulate_point, jobs)


def _simulate_into(path: Path, points: list[dict], simulate, jobs: int) -> None:
    """``simulate`` every point not yet in ``path`` (resumable; saved every 5 points)."""
    done = json.loads(path.read_text()) if path.exists() else {}
    todo = [p for p in points if key(p) not in done]
    print(f"{path.name}: {len(done)} points saved, {len(todo)} to simulate", flush=True)
    with ProcessPoolExecutor(jobs) as pool:
        for i, result in enumerate(pool.map(simulate, todo), start=1):
            point = {k: result[k] for k in grid()[0]}
            done[key(point)] = result
            if i % 5 == 0 or i == len(todo):
                path.write_text(json.dumps(done, indent=1, sort_keys=True))
                print(f"  {i}/{len(todo)}", flush=True)


def noise_points(count: int) -> list[dict]:
    """Every k-th grid point, ``count`` of them: the sample the noise check re-simulates."""
    points = grid()
    step = max(len(points) // max(count, 1), 1)
    return points[::step][:count]


def _reseeded(point: dict) -> dict:
    return simulate_point(point, seed_offset=1)


def run_noise_check(count: int, jobs: int) -> None:
    """The same search with another seed at ``count`` grid points (resumable)."""
    _simulate_into(NOISE_JSON, noise_points(count), _reseeded, jobs)


def noise_agreement(saved: dict) -> tuple[int, int]:
    """(points where the reseeded simulation sizes within 10 % or 1 replica of the first
    seed's, points compared): how well the simulator agrees with itself."""
    if not NOISE_JSON.exists():
        return 0, 0
    noise = json.loads(NOISE_JSON.read_text())
    pairs = [(saved[k], v) for k, v in noise.items() if k in saved and v.get("fits")]
    agree = sum(agrees(b["sim_rate_rps"], a["sim_rate_rps"]) for a, b in pairs)
    return agree, len(pairs)


# ---------------------------------------------------------------------------- fit


def replicas(rate: float) -> float:
    if not rate > 0:
        return math.inf
    return max(math.ceil(PEAK_RPS / (rate * TARGET_UTILIZATION) - 1e-9), 1)


def agrees(analytic: float, simulated: float) -> bool:
    ra, rs = replicas(analytic), replicas(simulated)
    if math.isinf(ra) or math.isinf(rs):
        return ra == rs
    return abs(ra - rs) <= max(1.0, 0.1 * rs)


def analytic_rates(points: list[dict], constants) -> list[float]:
    """The analytic model's rate for each point, vectorized per (shape, SLO) group."""
    import numpy as np

    from sizing.chain import candidate_arrays
    from sizing.memory import fit_memory
    from sizing.tail_model import Lengths, TailModel

    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(
            tuple(
                p[k]
                for k in (
                    "isl",
                    "isl_p95",
                    "osl",
                    "osl_p95",
                    "ttft_ms",
                    "tpot_ms",
                    "percentile",
                    "goodput",
                )
            ),  # fmt: skip
            [],
        ).append(i)
    out = [0.0] * len(points)
    for members in groups.values():
        p0 = points[members[0]]
        specs = [_CANDIDATES[key_of_deployment(points[i])] for i in members]
        c = candidate_arrays(specs)
        fit = fit_memory(c, np.full(len(c), p0["isl"] + p0["osl"]))
        lengths = Lengths(p0["isl"], p0["osl"], p0["isl_p95"], p0["osl_p95"])
        rate, _ = TailModel(c, fit, lengths, constants).max_rate(slo_of(p0))
        for i, r in zip(members, rate, strict=True):
            out[i] = float(r)
    return out


_CANDIDATES: dict = {}


def key_of_deployment(p: dict) -> tuple:
    return (p["model"], p["gpu"], p["precision"], p["tp"])


def load_candidates(points: list[dict]) -> None:
    from fleets.calibration import calibration_for
    from fleets.selectors import gpu_spec, model_spec, resolve_gpu, resolve_model
    from sizing.chain import Candidate
    from sizing.specs import Parallelism

    for p in points:
        k = key_of_deployment(p)
        if k in _CANDIDATES:
            continue
        gpu = resolve_gpu(p["gpu"])
        calibration, _ = calibration_for(gpu.slug, "vllm", p["precision"])
        _CANDIDATES[k] = Candidate(
            model_spec(resolve_model(p["model"])),
            gpu_spec(gpu, 1.0),
            p["precision"],
            Parallelism(tp=p["tp"]),
            calibration=calibration,
        )


def fit_constants(points: list[dict]):
    import numpy as np
    from scipy.optimize import minimize

    from sizing.tail_model import TailConstants

    sim = np.array([p["sim_rate_rps"] for p in points])

    def loss(x):
        k = TailConstants(*np.exp(x))
        rates = np.array(analytic_rates(points, k))
        both = (rates > 0) & (sim > 0)
        err = np.log(np.where(both, rates, 1.0) / np.where(both, sim, 1.0))
        # a point one model finds feasible and the other not costs as much as a 2x miss
        miss = np.sum((rates > 0) != (sim > 0)) * math.log(2) ** 2
        return float(np.sum(np.minimum(err**2, math.log(3) ** 2)) + miss)

    start = np.log([1.3, 1.0, 1.0, 1.5])
    best = minimize(loss, start, method="Nelder-Mead", options={"maxfev": 60, "xatol": 0.03})
    return TailConstants(*np.exp(best.x)), best


def bound_ratio(points: list[dict], rates: list[float]) -> float:
    """Largest simulated rate over max(analytic, mean-value) rate: the pruning bound's margin
    (``planner.runner.BOUND_MARGIN``) must stay above it."""
    from sizing.chain import plan
    from sizing.specs import Policy

    worst = 0.0
    for p, rate in zip(points, rates, strict=True):
        cand = _CANDIDATES[key_of_deployment(p)]
        row = plan(traffic_of(p), slo_of(p), Policy(), [cand], tails=None).rows[0]
        ref = max(rate, row.requests_per_s_per_replica)
        if p["sim_rate_rps"] > 0:
            worst = max(worst, p["sim_rate_rps"] / ref if ref > 0 else math.inf)
    return worst


def write_report(points: list[dict], constants, before) -> None:
    rates = analytic_rates(points, constants)
    worst = bound_ratio(points, rates)
    rows, agree = [], 0
    for p, rate in zip(points, rates, strict=True):
        ok = agrees(rate, p["sim_rate_rps"])
        agree += ok
        rows.append(
            f"| {p['model']} | {p['gpu']} | {p['precision']} | {p['tp']} | {p['isl']} | "
            f"{p['osl']} | {p['ttft_ms']}/{p['tpot_ms']} p{p['percentile']} g{p['goodput']} | "
            f"{p['sim_rate_rps']:.3g} | {rate:.3g} | {replicas(p['sim_rate_rps'])} | "
            f"{replicas(rate)} | {'yes' if ok else 'no'} |"
        )
    share = agree / len(points)
    before_share = sum(
        agrees(r, p["sim_rate_rps"]) for p, r in zip(points, before, strict=True)
    ) / len(points)
    lines = [
        "# Analytic percentile model vs the simulator",
        "",
        "Generated by `scripts/tail_agreement.py`. Each point is one deployment, request "
        "shape and SLO; `sim` is the highest Poisson rate per replica whose SLO percentile "
        "and goodput the simulator meets (the search a sizing run does), `analytic` the "
        "closed-form model's (`sizing/tail_model.py`). Replicas are sized for "
        f"{PEAK_RPS:g} req/s at {TARGET_UTILIZATION:.0%} target utilization; they agree "
        "within 10 % or 1 replica.",
        "",
        f"**{agree} of {len(points)} points agree ({share:.1%}); with every constant at 1 "
        f"{before_share:.1%}.** Constants: tpot_spread={constants.tpot_spread:.3f}, "
        f"ttft_wait={constants.ttft_wait:.3f}, ttft_base={constants.ttft_base:.3f}, "
        f"tpot_mix={constants.tpot_mix:.3f}.",
        "",
        f"Pruning bound: the simulated rate is at most {worst:.3f}x the larger of the analytic "
        "and mean-value rates on this grid; runs bound a candidate's cost at 1.5x "
        "(`planner/runner.py` BOUND_MARGIN).",
        "",
        noise_line(saved_points_by_key(points)),
        "",
        "Where they disagree: points whose tail is made by rare events, which is also where "
        "the simulator disagrees with itself: variable prompts (lognormal, p95 3x the mean: "
        "the p99.9 prompt is ~11x the mean and one such prefill stalls every stream for most "
        "of a second) under p99 or 99 %-goodput SLOs, and 32k-token prompts at p99 TTFT "
        "(1,350 measured requests: ~14 decide a p99). There the simulated rate moves "
        "10-30 % with the seed (at one such point p99 TPOT ranges 51-94 ms over six seeds at "
        "the same rate, and 76-112 ms at 6,000 requests), so no closed form can sit within "
        "10 % of one seed's answer at more points than another seed does. Sizing never rests "
        "on the analytic number when tails are on: it warm-starts the simulated search and "
        "ranks candidates for pruning.",
        "",
        "| model | GPU | precision | TP | isl | osl | SLO (ms) | sim req/s | analytic req/s "
        "| sim replicas | analytic replicas | agree |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ]
    OUT_MD.write_text("\n".join(lines) + "\n")
    print(f"agreement {share:.1%} ({agree}/{len(points)}), before {before_share:.1%}")


def saved_points_by_key(points: list[dict]) -> dict:
    return {key({k: p[k] for k in grid()[0]}): p for p in points}


def noise_line(saved: dict) -> str:
    agree, count = noise_agreement(saved)
    if not count:
        return "The noise check (`--noise N`) has not been run."
    return (
        f"**The simulator against itself:** the same search with another seed sizes within "
        f"10 % or 1 replica of the first seed's answer at {agree} of {count} points "
        f"({agree / count:.1%}; every {len(grid()) // count}th grid point, `--noise {count}`). "
        "That is the ceiling for any model judged against one seed's simulation: the 95 % "
        "target cannot be met against a 1,500-request simulation, only against a converged "
        "one (many more requests per probe, which a sizing run cannot afford today)."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--fit", action="store_true")
    parser.add_argument(
        "--report", action="store_true", help="the table for the shipped constants, no fit"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--noise", type=int, default=0, metavar="N",
        help="re-simulate N grid points with another seed: the simulator against itself",
    )  # fmt: skip
    args = parser.parse_args()
    if args.simulate:
        run_simulations(args.jobs)
    if args.noise:
        run_noise_check(args.noise, args.jobs)
    if args.fit or args.report:
        setup()
        from sizing.tail_model import DEFAULT_TAILS, TailConstants

        saved = json.loads(OUT_JSON.read_text())
        points = [p for p in saved.values() if p.get("fits")]
        load_candidates(points)
        before = analytic_rates(points, TailConstants(1.0, 1.0, 1.0, 1.0))
        constants = DEFAULT_TAILS
        if args.fit:
            fitted, result = fit_constants(points)
            print(f"fit: {fitted} loss {result.fun:.3f} after {result.nfev} evaluations")
            # the least-squares fit minimizes log error; keep it only if more points agree
            rates = analytic_rates(points, fitted)
            shipped = analytic_rates(points, DEFAULT_TAILS)
            share = [
                sum(agrees(r, p["sim_rate_rps"]) for p, r in zip(points, x, strict=True))
                for x in (rates, shipped)
            ]
            constants = fitted if share[0] > share[1] else DEFAULT_TAILS
        write_report(points, constants, before)


if __name__ == "__main__":
    main()
