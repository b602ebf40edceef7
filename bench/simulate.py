"""Speed of the discrete-event simulator: simulated requests per second and bisection time.

    python bench/simulate.py [--requests 100000] [--json]

One replica of Llama 3.1 8B fp8 on one H100 at ~70 % of its throughput, Poisson arrivals,
two length mixes: fixed (isl 1000 / osl 200, the benchmark shape) and lognormal (mean 1000 /
p95 3000 prompts, mean 200 / p95 600 outputs). Then ``max_rate_for_slo`` (p95 TTFT 500 ms,
p95 TPOT 50 ms, 99 % goodput) for the same candidate, timed from scratch (cold step-time memo).
Last, the runs' own search (``tail_search.max_rate_rps``: 1,500 requests per probe) for
Llama 3.1 70B fp8 TP2 on H100 at the typical scenario's lengths (prompts mean 1000 / p95 3000,
outputs 300 / 800; p95 TTFT 2 s, TPOT 50 ms, 99 % goodput), from a cold step-time memo:
probes per second and engine steps per second.
Then the two-pool simulator (``disagg_sim.simulate_disagg``): ``--two-pool-requests`` Poisson
requests at those lengths through Llama 3.1 70B fp8 TP4 on H100, 2 prefill + 3 decode workers
at 6 req/s, and DeepSeek-V3 fp8 on B200 with attention DP8 / EP8, 1 prefill + 2 decode workers
at 8 req/s; the median of 3 runs after a first one (which loads or compiles the loop).
Targets: >= 100,000 requests in <= 10 s on one core; bisection <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sizing.candidates import CandidateArrays  # noqa: E402
from sizing.disagg_sim import simulate_disagg  # noqa: E402
from sizing.simulate import LengthDist, Workload, max_rate_for_slo, simulate  # noqa: E402
from sizing.specs import GpuSpec, ModelSpec, Slo, Traffic  # noqa: E402
from sizing.tail_search import Replica, max_rate_rps, upper_rps  # noqa: E402

LLAMA_8B = ModelSpec("Llama 3.1 8B", 32, 4096, 32, 8, 128, 128256, 8.03e9, 8.03e9, 128256 * 4096)
LLAMA_70B = ModelSpec(
    "Llama 3.1 70B", 80, 8192, 64, 8, 128, 128256, 70.55e9, 70.55e9, 128256 * 8192
)
DEEPSEEK_V3 = ModelSpec(
    "DeepSeek-V3", 61, 7168, 128, 128, 192, 129280, 671.03e9, 37.55e9, 129280 * 7168,
    kv_lora_rank=512, qk_rope_head_dim=64, num_experts=256, experts_per_token=8,
    shared_experts=1, params_per_expert=3 * 7168 * 2048, num_moe_layers=58, max_context=163840,
)  # fmt: skip
H100 = GpuSpec("H100 SXM", 80, 3.35, {"bf16": 989.5, "fp8": 1979}, "nvlink", 900, 8, 8)
B200 = GpuSpec("B200", 180, 7.7, {"bf16": 2250, "fp8": 4500, "fp4": 9000}, "nvlink", 1800, 8, 8)
MIXES = {
    "fixed": (LengthDist(1000), LengthDist(200), 35.0),
    "lognormal": (LengthDist(1000, "lognormal", 3000), LengthDist(200, "lognormal", 600), 25.0),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--two-pool-requests", type=int, default=3_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    c = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    out: dict = {"requests": args.requests, "runs": {}}
    for name, (isl, osl, rate) in MIXES.items():
        w = Workload(isl, osl, requests=args.requests, rate_rps=rate, seed=1)
        started = time.perf_counter()
        r = simulate(c, w)
        elapsed = time.perf_counter() - started
        out["runs"][name] = {
            "rate_rps": rate,
            "seconds": elapsed,
            "requests_per_s": args.requests / elapsed,
            "steps": r.steps,
            "steps_per_s": r.steps / elapsed,
            "ttft_p95_ms": r.percentiles_ms("ttft")["p95"],
            "tpot_p95_ms": r.percentiles_ms("tpot")["p95"],
        }
    isl, osl, _ = MIXES["fixed"]
    started = time.perf_counter()
    found = max_rate_for_slo(c, isl, osl, ttft_slo_ms=500, tpot_slo_ms=50)
    out["bisection"] = {
        "seconds": time.perf_counter() - started,
        "simulations": found.simulations,
        "max_rate_rps": found.rate_rps,
    }
    out["search"] = _search()
    out["two_pool"] = _two_pools(args.two_pool_requests)
    if args.json:
        print(json.dumps(out))
    else:
        for name, run in out["runs"].items():
            print(f"{name:9s}: {args.requests:,} requests in {run['seconds']:.2f} s = "
                  f"{run['requests_per_s']:,.0f} req/s ({run['steps']:,} steps, "
                  f"{run['steps_per_s']:,.0f} steps/s)")  # fmt: skip
        b = out["bisection"]
        print(f"bisection: {b['max_rate_rps']:.2f} req/s meets the SLO; {b['simulations']} "
              f"simulations in {b['seconds']:.2f} s")  # fmt: skip
        t = out["search"]
        print(f"tail search (70B fp8 TP2, chat lengths): {t['rate_rps']:.3f} req/s; "
              f"{t['probes']} probes in {t['seconds']:.2f} s = {t['probes_per_s']:.2f} probes/s "
              f"({t['steps']:,} steps, {t['steps_per_s']:,.0f} steps/s, "
              f"{t['core_calls']:,} core calls)")  # fmt: skip
        for name, run in out["two_pool"].items():
            print(f"two-pool {name}: {args.two_pool_requests:,} requests in {run['seconds']:.3f} s "
                  f"(median of 3; first run {run['first_seconds']:.2f} s), TTFT p95 "
                  f"{run['ttft_p95_ms']:.1f} ms, TPOT p95 {run['tpot_p95_ms']:.2f} ms")  # fmt: skip
    return out


def _search() -> dict:
    """The runs' rate search on one fixed candidate, cold memo (see the module docstring)."""
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    isl, osl = LengthDist(1000, "lognormal", 3000), LengthDist(300, "lognormal", 800)
    replica = Replica(c, isl, osl, Traffic(20, 10, 1000, 300), Slo(2000, 50), seed=12345)
    ceiling = upper_rps(c, isl.mean, osl.mean)
    steps = 0
    run = replica.run

    def counted(rate_rps):
        nonlocal steps
        result = run(rate_rps)
        steps += result.steps
        return result

    replica.run = counted
    started = time.perf_counter()
    found = max_rate_rps(replica, 0.5 * ceiling, ceiling)
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "probes": len(found.probes),
        "probes_per_s": len(found.probes) / elapsed,
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "core_calls": replica.timer.core_calls,
        "rate_rps": found.rate_rps,
    }


def _two_pools(requests: int) -> dict:
    """The two-pool simulator's time on its two deployments (see the module docstring)."""
    isl, osl = LengthDist(1000, "lognormal", 3000), LengthDist(300, "lognormal", 800)
    llama = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    dep8 = CandidateArrays.build(DEEPSEEK_V3, B200, "fp8", None, 1, 1, 8, 8)
    deployments = {
        "Llama 3.1 70B fp8 TP4 2P3D": (llama, llama, 2, 3, 6.0, 3),
        "DeepSeek-V3 fp8 DP8/EP8 1P2D": (dep8, dep8, 1, 2, 8.0, 5),
    }
    out = {}
    for name, (cp, cd, prefill, decode, rate, seed) in deployments.items():
        seconds = []
        for _ in range(4):
            started = time.perf_counter()
            result = simulate_disagg(cp, cd, prefill, decode, isl, osl, requests, rate_rps=rate,
                                     warmup_requests=requests // 10, seed=seed)  # fmt: skip
            seconds.append(time.perf_counter() - started)
        out[name] = {
            "rate_rps": rate,
            "seconds": statistics.median(seconds[1:]),
            "first_seconds": seconds[0],
            "ttft_p95_ms": result.percentiles_ms("ttft")["p95"],
            "tpot_p95_ms": result.percentiles_ms("tpot")["p95"],
        }
    return out


if __name__ == "__main__":
    main()
