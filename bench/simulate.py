"""Speed of the discrete-event simulator: simulated requests per second and bisection time.

    python bench/simulate.py [--requests 100000] [--json]

One replica of Llama 3.1 8B fp8 on one H100 at ~70 % of its throughput, Poisson arrivals,
two length mixes: fixed (isl 1000 / osl 200, the benchmark shape) and lognormal (mean 1000 /
p95 3000 prompts, mean 200 / p95 600 outputs). Then ``max_rate_for_slo`` (p95 TTFT 500 ms,
p95 TPOT 50 ms, 99 % goodput) for the same candidate, timed from scratch (cold step-time memo).
Targets: >= 100,000 requests in <= 10 s on one core; bisection <= 2 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sizing.candidates import CandidateArrays  # noqa: E402
from sizing.simulate import LengthDist, Workload, max_rate_for_slo, simulate  # noqa: E402
from sizing.specs import GpuSpec, ModelSpec  # noqa: E402

LLAMA_8B = ModelSpec("Llama 3.1 8B", 32, 4096, 32, 8, 128, 128256, 8.03e9, 8.03e9, 128256 * 4096)
H100 = GpuSpec("H100 SXM", 80, 3.35, {"bf16": 989.5, "fp8": 1979}, "nvlink", 900, 8, 8)
MIXES = {
    "fixed": (LengthDist(1000), LengthDist(200), 35.0),
    "lognormal": (LengthDist(1000, "lognormal", 3000), LengthDist(200, "lognormal", 600), 25.0),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
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
    return out


if __name__ == "__main__":
    main()
