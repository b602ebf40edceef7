"""InferenceX's closed-loop protocol in the simulator, against what its runs measured.

The protocol (fleets/catalog/MEASUREMENTS.md, method A): N clients, 10 x N prompts, each
request's lengths drawn uniformly from [0.8, 1] x nominal. The first N prompts leave together
(lock step) and wait behind each other's prefill; after one round the drawn output lengths
have spread the clients over ~0.2 x osl decode steps, so later rounds arrive as a stream. The
mean TTFT therefore carries the first round's wave and the median does not: the measured
mean / median of TTFT grows with N (1.0 at one client, ~3.5 at 64), and the simulator, fed
the same protocol, must show the same skew. It also shows what the calibration's fitted
``prefill_wave_fraction`` is not: the simulated median sits on the mean-value model's stream
(coherence 0), so a fitted coherence of 0.1-0.25 on these runs' medians stands for some other
growth of TTFT with load, not for waves (README, calibration section).
"""

import csv
import dataclasses
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.memory import fit_memory
from sizing.operating import closed_loop
from sizing.simulate import LengthDist, Workload, simulate
from sizing.specs import Calibration

MEASURED = Path(__file__).resolve().parents[2] / "fleets" / "catalog" / "measured-concurrency.csv"
NOMINAL_TOKENS = 1024
PROMPTS_PER_CLIENT = 10  # --num-prompts 10 x N
DRAWN_LOW = 0.8  # --random-range-ratio 0.8
SEEDS = (0, 1)
#: an engine with a 10 ms front end and typical efficiencies (the skew is queueing, not them)
CALIBRATION = Calibration(
    name="test", eta_mem=0.8, eta_flop_decode=0.6, eta_flop_prefill=0.55,
    frontend_latency_s=0.010, step_overhead_s=1.5e-3,
)  # fmt: skip


def measured_mean_over_median() -> dict[int, float]:
    """Median over single-node method A rows of mean TTFT / median TTFT, per client count."""
    pairs: dict[tuple, dict[str, float]] = defaultdict(dict)
    with MEASURED.open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            load = r["concurrency_or_rate"]
            if r["metric"] not in ("ttft_ms_median", "ttft_ms_mean"):
                continue
            if not (r["notes"].startswith("method A") and "single node" in r["notes"]):
                continue
            if not load.startswith("concurrency="):
                continue
            key = tuple(r[k] for k in ("source", "source_date_or_version", "model", "gpu",
                                       "num_gpus", "tp", "ep", "engine", "weight_precision",
                                       "isl", "osl", "concurrency_or_rate", "notes"))  # fmt: skip
            pairs[key][r["metric"]] = float(r["value"])
    ratios: dict[int, list[float]] = defaultdict(list)
    for key, v in pairs.items():
        if len(v) == 2:
            ratios[int(key[11].split("=")[1])].append(v["ttft_ms_mean"] / v["ttft_ms_median"])
    return {c: statistics.median(r) for c, r in ratios.items()}


def _protocol(clients: int, seed: int) -> Workload:
    drawn = LengthDist(0.9 * NOMINAL_TOKENS, "uniform", low=DRAWN_LOW * NOMINAL_TOKENS,
                       high=NOMINAL_TOKENS)  # fmt: skip
    return Workload(drawn, drawn, requests=PROMPTS_PER_CLIENT * clients, concurrency=clients,
                    seed=seed)  # fmt: skip


@pytest.fixture(scope="module")
def llama_70b():
    return CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, calibration=CALIBRATION)


@pytest.fixture(scope="module")
def measured():
    return measured_mean_over_median()


@pytest.mark.parametrize("clients", [4, 16, 64])
def test_the_simulated_protocol_is_as_skewed_as_the_measured_runs(llama_70b, measured, clients):
    # given InferenceX's protocol at N clients (10 N prompts, lengths drawn in [0.8, 1] x 1024)
    runs = [simulate(llama_70b, _protocol(clients, seed)) for seed in SEEDS]
    # when the simulator runs it
    skew = np.mean([r.mean_ms("ttft") / r.percentiles_ms("ttft")["p50"] for r in runs])
    # then its mean / median TTFT is the measured one within 25 % (measured on 48-63 rows per
    # N, every GPU and engine: 1.23 at 4 clients, 1.90 at 16, 3.46 at 64; simulated here
    # 1.19, 1.74, 3.56), where a protocol without the lock-step first round gives ~1
    assert measured[clients] > 1.15
    assert skew == pytest.approx(measured[clients], rel=0.25)


@pytest.mark.parametrize("clients", [4, 16, 64])
def test_the_median_misses_the_first_round_wave(llama_70b, clients):
    # given the same protocol
    runs = [simulate(llama_70b, _protocol(clients, seed)) for seed in SEEDS]
    median_ms = np.mean([r.percentiles_ms("ttft")["p50"] for r in runs])
    # when the mean-value model predicts it as a stream (coherence 0) and as one wave (1)
    isl = osl = 0.9 * NOMINAL_TOKENS
    fit = fit_memory(llama_70b, isl + osl)

    def predicted_ms(coherence: float) -> float:
        c = dataclasses.replace(llama_70b, prefill_wave_fraction=np.array([coherence]))
        op = closed_loop(c, fit, isl, osl, clients, lengths_drawn=True)
        return float(op.ttft_s[0]) * 1e3

    # then the simulated median is the stream's within 15 % and below the wave's
    assert median_ms == pytest.approx(predicted_ms(0.0), rel=0.15)
    assert median_ms < predicted_ms(1.0)
