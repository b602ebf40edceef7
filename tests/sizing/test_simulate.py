"""The discrete-event simulator against queueing theory, the roofline, and the MVA."""

import math

import numpy as np
import pytest
from specs_catalog import B200, GPT_OSS_120B, H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.memory import fit_memory
from sizing.operating import closed_loop
from sizing.simulate import (
    LengthDist,
    SimEngine,
    StepTimer,
    Workload,
    engine_for,
    lengths_from_mean_p95,
    lognormal_sigma,
    max_rate_for_slo,
    rate_sweep,
    simulate,
)
from sizing.specs import EngineSettings
from sizing.steptime import decode_step, prefill_time


def _8b():
    return CandidateArrays.build(LLAMA_8B, H100, "fp8")


class ConstantStep:
    """A timer whose step costs ``step_s`` whatever the batch (isolates the queueing)."""

    def __init__(self, step_s):
        self.step = step_s

    def step_s(self, n_dec, ctx, pre, p_eq):
        return self.step


def test_one_slot_with_exponential_service_matches_mm1_waiting_time():
    # given one slot (max_num_seqs 1), constant steps and exponential output lengths,
    # i.e. M/M/1 with mean service E[S] = (1 + E[osl]) steps (prefill step + decode steps)
    step_s, mean_osl, rho = 0.01, 30.0, 0.6
    service_s = step_s * mean_osl
    eng = SimEngine(max_num_seqs=1, max_num_batched_tokens=8192, kv_blocks=10**7)
    osl = LengthDist(mean=mean_osl)  # unused: the trace carries exponential lengths
    rng = np.random.default_rng(3)
    n = 30_000
    gaps = rng.exponential(service_s / rho, n)
    out = np.maximum(1, np.ceil(rng.exponential(mean_osl, n))).astype(int)
    w = Workload(isl=LengthDist(10), osl=osl, arrival="trace", trace_s=np.cumsum(gaps),
                 trace_prompt_tokens=np.full(n, 10), trace_output_tokens=out,
                 warmup_requests=2000)  # fmt: skip
    # when simulated
    r = simulate(_8b(), w, eng, ConstantStep(step_s))
    # then the mean wait before service (TTFT minus its own prefill step) matches
    # Pollaczek-Khinchine, Wq = lambda E[S^2] / (2 (1 - rho)), which for exponential service
    # is M/M/1's rho E[S] / (1 - rho); S = osl steps (the prefill step emits token 1)
    service = step_s * out
    lam = 1.0 / np.mean(gaps)
    theory = lam * np.mean(service**2) / (2 * (1 - lam * np.mean(service)))
    mm1 = lam * np.mean(service) ** 2 / (1 - lam * np.mean(service))
    assert theory == pytest.approx(mm1, rel=0.05)  # the lengths are near-exponential
    wait = np.mean(r.ttft_s[r.measured]) - step_s
    assert wait == pytest.approx(theory, rel=0.05)


def test_very_low_load_ttft_is_prefill_and_tpot_is_the_batch_1_step():
    # given a trickle of requests (each alone in the engine)
    c = _8b()
    w = Workload(LengthDist(2000), LengthDist(100), requests=30, rate_rps=0.05, seed=1)
    r = simulate(c, w)
    # then TTFT -> the prefill of one prompt and TPOT -> a batch-1 decode step
    assert np.median(r.ttft_s) == pytest.approx(prefill_time(c, 2000.0).prefill_s[0], rel=0.02)
    batch1 = decode_step(c, 1.0, 2000.0 + 50).step_s[0]
    assert np.median(r.tpot_s) == pytest.approx(batch1, rel=0.02)


def _long_prompt_among_60_streams(chunked: bool):
    """60 streams decoding, then one 20k-token prompt arrives 1 s later (70B fp8 TP4)."""
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    eng = engine_for(c, 20_000, 500, chunked_prefill=chunked)
    n = 61
    t = np.zeros(n)
    t[-1] = 1.0
    prompts = np.full(n, 200)
    prompts[-1] = 20_000
    outs = np.full(n, 400)
    outs[-1] = 2
    w = Workload(LengthDist(200), LengthDist(400), arrival="trace", trace_s=t,
                 trace_prompt_tokens=prompts, trace_output_tokens=outs)  # fmt: skip
    return c, simulate(c, w, eng)


def test_a_20k_prompt_stalls_60_streams_by_its_prefill_without_chunking_and_one_chunk_with():
    # given 60 decoding streams and a 20k-token prompt arriving among them
    c, whole = _long_prompt_among_60_streams(chunked=False)
    _, chunked = _long_prompt_among_60_streams(chunked=True)
    # then without chunking the streams stop for about the prompt's whole prefill
    # (most of a second: the seed's answer)
    unchunked = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, engine=_budget(32_768))
    alone = prefill_time(unchunked, 20_000.0).prefill_s[0]
    assert whole.longest_step_s == pytest.approx(alone, rel=0.10)
    assert whole.longest_step_s > 0.5
    # and with 8,192-token chunks by about one chunk's step
    one_chunk = decode_step(c, 60.0, 400.0, 8192.0 - 60, 2 * 12_000.0).step_s[0]
    assert chunked.longest_step_s == pytest.approx(one_chunk, rel=0.25)
    assert chunked.longest_step_s < 0.5 * whole.longest_step_s


def _budget(tokens):
    from sizing.specs import EngineSettings

    return EngineSettings(max_num_batched_tokens=tokens)


def test_same_seed_gives_identical_numbers_and_another_seed_does_not():
    c = _8b()
    isl, osl = LengthDist(800, "lognormal", 2400), LengthDist(150, "uniform")
    w = Workload(isl, osl, requests=800, rate_rps=20.0, arrival="gamma", cv=2.0, seed=7)
    a, b = simulate(c, w), simulate(c, w)
    assert a.summary(300, 40) == b.summary(300, 40)
    assert np.array_equal(a.ttft_s, b.ttft_s)
    other = simulate(c, Workload(isl, osl, requests=800, rate_rps=20.0, arrival="gamma",
                                 cv=2.0, seed=8))  # fmt: skip
    assert other.summary() != a.summary()


def test_lognormal_lengths_hit_mean_and_p95():
    rng = np.random.default_rng(0)
    x = LengthDist(1000, "lognormal", 3000).sample(200_000, rng)
    assert np.mean(x) == pytest.approx(1000, rel=0.02)
    assert np.percentile(x, 95) == pytest.approx(3000, rel=0.03)
    with pytest.raises(ValueError):
        lognormal_sigma(1000, 900)


def test_kv_pressure_preempts_by_recompute_and_still_finishes_every_request():
    # given a tiny KV pool: 40 blocks = 640 tokens for prompts of 200 growing by 300
    c = _8b()
    eng = SimEngine(max_num_seqs=64, max_num_batched_tokens=2048, kv_blocks=40)
    w = Workload(LengthDist(200), LengthDist(300), requests=40, concurrency=8, seed=2)
    r = simulate(c, w, eng)
    assert r.preemptions > 0
    assert np.all(np.isfinite(r.e2e_s))
    assert r.kv_used_fraction.max() <= 1.0


def test_reserving_the_output_at_admission_never_preempts_and_runs_fewer_at_once():
    # given the same tiny pool: 40 blocks; a request claims ceil(500 / 16) = 32 of them when
    # the engine reserves its whole output up front (TensorRT-LLM's GUARANTEED_NO_EVICT)
    c = _8b()
    w = Workload(LengthDist(200), LengthDist(300), requests=40, concurrency=8, seed=2)
    paged = SimEngine(max_num_seqs=64, max_num_batched_tokens=2048, kv_blocks=40)
    reserved = SimEngine(max_num_seqs=64, max_num_batched_tokens=2048, kv_blocks=40,
                         reserve_output=True)  # fmt: skip
    # when both are simulated
    a, b = simulate(c, w, paged), simulate(c, w, reserved)
    # then the reserving engine never preempts, runs one sequence at a time (40 // 32 = 1),
    # finishes every request, and its pool is back to empty at the end
    assert a.preemptions > 0 and b.preemptions == 0
    assert b.running.max() == 1 < a.running.max()
    assert np.all(np.isfinite(b.e2e_s))
    assert b.kv_used_fraction.max() == pytest.approx(32 / 40)
    assert b.kv_used_fraction[-1] == 0.0


def test_a_trtllm_candidate_reserves_and_a_vllm_one_does_not():
    from sizing.simulate import engine_for
    from sizing.specs import EngineSettings

    trt = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=EngineSettings(engine="trtllm"))
    assert engine_for(trt, 1000, 300).reserve_output
    assert not engine_for(_8b(), 1000, 300).reserve_output


def test_prefix_cache_hits_cut_ttft():
    c = _8b()
    base = dict(isl=LengthDist(4000), osl=LengthDist(50), requests=200, rate_rps=2.0, seed=3)
    cold = simulate(c, Workload(**base))
    warm = simulate(c, Workload(**base, shared_prefix_tokens=3000, prefix_hit_rate=1.0))
    assert np.median(warm.ttft_s) < 0.5 * np.median(cold.ttft_s)


def test_queue_and_kv_series_are_downsampled():
    c = _8b()
    w = Workload(LengthDist(500), LengthDist(100), requests=3000, rate_rps=40.0)
    r = simulate(c, w, max_points=100)
    assert 100 <= len(r.series_t_s) < 200
    assert np.all(np.diff(r.series_t_s) >= 0)


MVA_CANDIDATES = {
    "llama-8b fp8 H100": lambda: CandidateArrays.build(LLAMA_8B, H100, "fp8"),
    "llama-70b fp8 TP4 H100": lambda: CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4),
    "gpt-oss-120b fp4 B200 (MoE)": lambda: CandidateArrays.build(GPT_OSS_120B, B200, "fp4"),
}


@pytest.mark.parametrize("name", sorted(MVA_CANDIDATES))
def test_mean_value_closed_loop_within_10_percent_of_the_simulator(name):
    # given a candidate and closed-loop clients from 1 to 512 (isl 1000, osl 200)
    c = MVA_CANDIDATES[name]()
    isl, osl = 1000.0, 200.0
    fit = fit_memory(c, isl + osl)
    for conc in (1, 4, 16, 64, 128, 256, 512):
        w = Workload(LengthDist(isl), LengthDist(osl), requests=max(8 * conc, 100),
                     concurrency=conc, warmup_requests=3 * conc)  # fmt: skip
        sim = simulate(c, w)
        op = closed_loop(c, fit, isl, osl, conc)
        # then the MVA's TTFT and TPOT are within 10 % of the simulated means
        assert op.ttft_s[0] * 1e3 == pytest.approx(sim.mean_ms("ttft"), rel=0.10), conc
        # (worst: +10.5 % at 70B C=16, where a request never sees its own group's prefill
        # step in its TPOT while the MVA charges every step; see operating.py)
        assert op.tpot_s[0] * 1e3 == pytest.approx(sim.mean_ms("tpot"), rel=0.11), conc
        assert op.output_tokens_per_s[0] == pytest.approx(sim.output_tokens_per_s, rel=0.15)


def test_rate_sweep_shows_the_knee_and_bisection_finds_the_slo_rate():
    c = _8b()
    isl, osl = LengthDist(1000), LengthDist(200)
    curve = rate_sweep(c, isl, osl, [2.0, 20.0, 60.0], requests=600)
    # throughput grows with rate until saturation; p95 TTFT climbs at the knee
    assert curve["throughput_tok_s"][1] > curve["throughput_tok_s"][0]
    assert curve["ttft_ms"][2] > 3 * curve["ttft_ms"][0]
    found = max_rate_for_slo(c, isl, osl, ttft_slo_ms=500, tpot_slo_ms=30, requests=800)
    assert found.rate_rps > 0 and found.result is not None
    assert found.result.percentiles_ms("ttft")["p95"] <= 500
    assert found.high_rps / found.low_rps <= 1.031 or math.isclose(found.high_rps, found.rate_rps)


def test_step_timer_rounds_inputs_by_at_most_about_one_percent():
    c = _8b()
    timer = StepTimer(c, 256)
    for n_dec, ctx, pre, p in ((1, 1234.0, 0.0, 0.0), (100, 3000.0, 3333.0, 5000.0)):
        exact = decode_step(c, float(n_dec), ctx, pre, p).step_s[0]
        assert timer.step_s(n_dec, ctx, pre, p) == pytest.approx(exact, rel=0.012)


def test_front_end_latency_delays_every_first_token_in_both_models():
    # given one 70B replica whose engine front end adds 50 ms to every request
    from sizing.specs import Calibration

    slow = Calibration(frontend_latency_s=0.050)
    base = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8)
    front = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8, calibration=slow)
    w = Workload(LengthDist(1024), LengthDist(64), requests=40, concurrency=1)
    # when simulated closed loop at concurrency 1, and by the mean-value model
    t0, t1 = (np.median(simulate(c, w).ttft_s) for c in (base, front))
    m0, m1 = (closed_loop(c, fit_memory(c, 1088), 1024, 64, 1).ttft_s[0] for c in (base, front))
    # then both TTFTs grow by the 50 ms (one request in flight: nothing else moves)
    assert t1 - t0 == pytest.approx(0.050, rel=1e-6)
    assert m1 - m0 == pytest.approx(0.050, rel=1e-9)


@pytest.mark.parametrize("isl", [9_000, 20_000, 33_000])
def test_mean_value_ttft_of_one_multi_chunk_prompt_matches_the_simulator(isl):
    # given one prompt of several 8,192-token chunks, alone on a 70B replica
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8)
    # when its TTFT is taken from the mean-value model and from the simulator
    mean_value = closed_loop(c, fit_memory(c, isl + 64), isl, 64, 1).ttft_s[0]
    w = Workload(LengthDist(isl), LengthDist(64), requests=10, concurrency=1)
    simulated = np.median(simulate(c, w).ttft_s)
    # then they agree within 1 % (the last chunk holds only the prompt's remainder; the
    # simulator's step-time grid rounds by up to ~1 %); it was +79 % at 9,000 tokens
    assert mean_value == pytest.approx(simulated, rel=0.01)


@pytest.mark.parametrize(
    "workload",
    [
        dict(rate_rps=2.0, shared_prefix_tokens=512, prefix_hit_rate=0.5),
        dict(rate_rps=12.0),
        dict(concurrency=64),
    ],
)
def test_the_decode_only_fast_loop_changes_no_number(monkeypatch, workload):
    # given one replica of Llama 3.1 70B fp8 TP2 on H100 with variable lengths
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    w = Workload(
        lengths_from_mean_p95(1000, 3000),
        lengths_from_mean_p95(300, 800),
        requests=300,
        warmup_requests=30,
        seed=11,
        **workload,
    )
    # when it is simulated with the fast loop and again with every step through the general one
    fast = simulate(c, w)
    monkeypatch.setattr("sizing.simulate.DECODE_RUNS", False)
    general = simulate(c, w)
    # then every per-request time, the step count and the series are identical
    for name in ("ttft_s", "tpot_s", "e2e_s", "series_t_s", "queue_len", "kv_used_fraction"):
        assert np.array_equal(getattr(fast, name), getattr(general, name), equal_nan=True), name
    assert (fast.steps, fast.preemptions, fast.longest_step_s) == (
        general.steps,
        general.preemptions,
        general.longest_step_s,
    )


def _varied_candidates():
    from sizing.specs import EngineSettings

    eagle = EngineSettings(
        spec_method="eagle", spec_tokens=3, spec_acceptance=0.7, spec_draft_params=1e9,
        spec_draft_active_params=1e9,
    )  # fmt: skip
    return {
        "dense": _8b(),
        "tp4 pp2": CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, pp=2),
        "moe": CandidateArrays.build(GPT_OSS_120B, B200, "fp8", tp=2),
        "speculative": CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=eagle),
    }


@pytest.mark.parametrize("name", ["dense", "tp4 pp2", "moe", "speculative"])
def test_a_context_block_per_core_call_gives_every_cell_its_own_numbers(name):
    # given one timer filling a block of context cells per core call, one filling a single cell
    c = _varied_candidates()[name]
    blocked, single = StepTimer(c, 600), StepTimer(c, 600, context_block=1)
    # when both are asked for the same steps (exact and log-grid contexts, rows that grow)
    asked = [(n, ctx, pre, p) for n in (0, 1, 5, 63, 64, 200, 600)
             for ctx in (0.0, 7.0, 63.6, 64.0, 65.0, 999.0, 1001.5, 4100.0)
             for pre, p in ((0, 0.0), (37, 37.0), (2048, 3100.0))]  # fmt: skip
    # then every step time is identical, from fewer core calls
    assert [blocked.step_s(*a) for a in asked] == [single.step_s(*a) for a in asked]
    assert blocked.core_calls < single.core_calls


@pytest.mark.parametrize("name", ["dense", "tp4 pp2", "moe", "speculative"])
def test_a_prompt_band_per_core_call_gives_every_cell_its_own_numbers(name):
    # given one timer filling a band of prompt-token cells per core call, one a single cell
    c = _varied_candidates()[name]
    banded, single = StepTimer(c, 600), StepTimer(c, 600, context_block=1, prompt_band=1)
    # when the compiled loop's table is filled for mixed steps on and off the diagonal
    asked = [((ctx, pre, pre + d), n) for n in (0, 5, 63, 200)
             for ctx in (3, 64, 700, 930) for pre in (1, 2, 40, 300, 413)
             for d in (0, -1, -20) if pre + d >= 1]  # fmt: skip
    given = [banded.fill_table(key, n) for key, n in asked]
    # then each step time is the single cell's
    assert given == [single.fill_table(key, n) for key, n in asked]
    # and so is every other cell the bands put in the table (a sample of 200 rows)
    keys, rows, starts, lengths, values = banded.table.arrays()
    held = np.flatnonzero(keys != -1)
    assert held.size > 4 * len(asked)  # the bands filled more cells than were asked
    for slot in np.random.default_rng(0).choice(held, 200, replace=False):
        k, row = int(keys[slot]), rows[slot]
        cell = (k >> 40, (k >> 20) & 0xFFFFF, k & 0xFFFFF)
        n = int(lengths[row]) - 1
        assert values[starts[row] + n] == single.fill_table(cell, n), cell


def test_decode_cell_holds_one_step_time_up_to_its_edge():
    c = _8b()
    timer, plain = StepTimer(c, 256), StepTimer(c, 256, context_block=1)
    for n_dec, ctx in ((1, 3.0), (1, 63.7), (40, 64.2), (40, 1000.0), (200, 2999.9)):
        value, high = timer.decode_cell(n_dec, ctx)
        assert high > ctx or high == 64
        for x in np.linspace(ctx, high, 50, endpoint=False):
            assert plain.step_s(n_dec, float(x), 0, 0.0) == value


def test_block_filled_simulation_equals_one_cell_per_core_call(monkeypatch):
    # given a 70B replica with variable lengths at a moderate load, its steps from the table
    # (the loop composes a dense row's step times itself otherwise: sizing.step_affine)
    monkeypatch.setattr("sizing.simulate.AFFINE_STEPS", False)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    w = Workload(lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(300, 800),
                 requests=300, rate_rps=2.0, warmup_requests=30, seed=5)  # fmt: skip
    eng = engine_for(c, 1000, 300)
    # when simulated with the default timer (blocks of context x prompt-token cells) and with
    # one filling a single cell per call
    fast = simulate(c, w, eng, StepTimer(c, eng.max_num_seqs))
    plain = simulate(c, w, eng, StepTimer(c, eng.max_num_seqs, context_block=1, prompt_band=1))
    # then every number is identical
    for name in ("ttft_s", "tpot_s", "e2e_s", "series_t_s", "queue_len", "kv_used_fraction"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name), equal_nan=True), name
    assert (fast.steps, fast.preemptions) == (plain.steps, plain.preemptions)


@pytest.mark.parametrize("name", ["dense", "tp4 pp2", "moe", "speculative"])
def test_the_core_gives_a_scalar_row_the_rows_own_numbers(name):
    # given one candidate row and the same row as numpy scalars (what the timer's core uses)
    c = _varied_candidates()[name]
    decodes, ctx = np.arange(70.0)[None, :], np.array([0.0, 5.0, 700.0, 9000.0])[:, None]
    # when a grid of steps is timed with either, then every number is identical
    for pre, p_eq in ((0.0, 0.0), (512.0, 1500.0)):
        rows = decode_step(c, decodes, ctx, pre, p_eq).step_s
        scalars = decode_step(c.scalar_row(), decodes, ctx, pre, p_eq).step_s
        assert np.array_equal(rows, scalars)
    assert len(c.scalar_row()) == 1


def test_a_bounded_block_cache_changes_no_step_time(monkeypatch):
    # given a timer whose block cache holds about two blocks of 32 x 64 step times
    monkeypatch.setattr("sizing.simulate.BLOCK_CACHE_BYTES", 2 * 32 * 64 * 8)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2)
    small, single = StepTimer(c, 300), StepTimer(c, 300, context_block=1)
    # when it is asked for steps over many cells (blocks are dropped and computed again)
    asked = [(n, ctx, pre, pre * 1.5) for n in (1, 30, 90) for ctx in (70.0, 900.0, 5000.0)
             for pre in (0, 100, 3000)] * 2  # fmt: skip
    # then every step time is still the one-cell timer's, and the cache stays within its bound
    assert [small.step_s(*a) for a in asked] == [single.step_s(*a) for a in asked]
    assert small.block_bytes <= 2 * 32 * 128 * 8 and len(small.blocks) <= 2


def test_the_compiled_loop_runs_where_no_cache_folder_is_writable(tmp_path):
    # given a process where no folder is writable for numba's on-disk cache
    script = tmp_path / "no_cache.py"
    script.write_text(
        "import tempfile\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('read-only')\n"
        "tempfile.TemporaryFile = refuse\n"
        "from sizing.sim_kernel import compiled, grid_key\n"
        "add = compiled(lambda x: x + 1)\n"
        "print(add(1), type(add._cache).__name__)\n"
    )
    # when the kernel module is imported and a function is compiled there
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True,
                         env={"PYTHONPATH": str(root), "PATH": ""}, timeout=120)  # fmt: skip
    # then it compiles in memory instead of failing
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "NullCache"]


@pytest.mark.parametrize("model,tp", [(LLAMA_8B, 1), (LLAMA_70B, 4)], ids=["8b", "70b-tp4"])
def test_mean_value_ttft_with_drawn_lengths_follows_the_simulator_not_the_lock_step(model, tp):
    # given closed-loop clients drawing prompt and output lengths in [0.8, 1] x 1,024 tokens
    # (InferenceX's random range ratio) through a 10 ms front end, so they drift apart
    from sizing.specs import Calibration

    spread = Calibration(frontend_latency_s=0.010, prefill_wave_fraction=0.0)
    c = CandidateArrays.build(model, H100, "fp8", tp=tp, calibration=spread)
    lengths = LengthDist(921.6, kind="uniform", low=819.2, high=1024.0)
    fit = fit_memory(c, 2 * 921.6)
    for conc in (4, 16, 64):
        w = Workload(lengths, lengths, requests=10 * conc, concurrency=conc,
                     warmup_requests=3 * conc)  # fmt: skip
        simulated = simulate(c, w).mean_ms("ttft")
        drawn = closed_loop(c, fit, 921.6, 921.6, conc, lengths_drawn=True).ttft_s[0] * 1e3
        lock_step = closed_loop(c, fit, 921.6, 921.6, conc).ttft_s[0] * 1e3
        # then the mean-value TTFT with drawn lengths (coherence 0: own chunk plus one step's
        # arrivals, after half the step in progress) is within 20 % of the simulated one
        assert drawn == pytest.approx(simulated, rel=0.20), conc
        # while the lock-step group (equal lengths) would be far off once clients outnumber 4
        if conc >= 16:
            assert lock_step > 1.8 * simulated, conc


def test_the_step_table_keeps_a_longer_row_over_a_shorter_one():
    # given a table holding a cell's row of 4 decode counts
    from sizing.sim_kernel import StepTable, row_value, table_key

    table = StepTable(1 << 20)
    key = table_key(70, 3, 3)
    table.put(np.array([key]), np.array([[1.0, 2.0, 3.0, 4.0]]))
    # when a later block puts a row of 2 for the same cell, and one of 6
    table.put(np.array([key]), np.array([[1.0, 2.0]]))
    kept = row_value(*table.arrays(), key, 3)
    table.put(np.array([key]), np.array([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]))
    # then the shorter row left the longer in place, and the longer one replaced it
    assert kept == 4.0
    assert row_value(*table.arrays(), key, 5) == 6.0


def test_a_scheduler_polling_every_30_decode_steps_delays_ttft_as_the_mean_value_model_says():
    # given Llama 8B fp8 on one H100 polling for requests every step and every 30 decode
    # steps (SGLang --scheduler-recv-interval 30), closed loop with drawn lengths
    every = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    sparse = CandidateArrays.build(
        LLAMA_8B, H100, "fp8", engine=EngineSettings(scheduler_recv_interval=30)
    )
    isl, osl = lengths_from_mean_p95(1000, 1500), lengths_from_mean_p95(300, 450)
    fit = fit_memory(every, 1000 + 300)
    for conc in (1, 32):
        w = Workload(isl, osl, requests=40 * conc + 200, concurrency=conc,
                     warmup_requests=5 * conc)  # fmt: skip
        # when both are simulated with the same draws and sized by the mean-value model
        simulated_ms = simulate(sparse, w).mean_ms("ttft") - simulate(every, w).mean_ms("ttft")
        a, b = (closed_loop(c, fit, 1000, 300, conc, lengths_drawn=True) for c in (every, sparse))
        modelled_ms = (b.ttft_s[0] - a.ttft_s[0]) * 1e3
        if conc == 1:
            # then a lone client finds the engine idle, which polls at once
            assert simulated_ms == pytest.approx(0.0, abs=1e-9)
            assert b.recv_wait_s[0] == 0.0 and modelled_ms == pytest.approx(0.0, abs=1e-9)
        else:
            # at 32 clients a request waits for the next poll, 14.5 decode steps on average,
            # and shares its prefill step with the prompts that arrived over the interval;
            # the mean-value model's TTFT grows as the simulated one does, within 15 %
            assert b.recv_wait_s[0] == pytest.approx(14.5 * b.pure_step.step_s[0])
            assert b.prefill_step_tokens[0] > a.prefill_step_tokens[0]
            assert modelled_ms == pytest.approx(simulated_ms, rel=0.15)


def _one_waiting_prompt(tokens: int, free_blocks: int):
    """Kernel state with one prompt of ``tokens`` waiting and ``free_blocks`` free."""
    from sizing import sim_kernel as K

    cfg = np.zeros(K.CONFIG_SLOTS, dtype=np.int64)
    cfg[K.C_BLOCK], cfg[K.C_MAX_SEQS], cfg[K.C_CHUNKED] = 16, 8, 1
    st = np.zeros(K.INT_SLOTS, dtype=np.int64)
    st[K.S_FREE], st[K.S_WAIT_LEN], st[K.S_PREEMPT] = free_blocks, 1, 3
    ri = np.zeros((1, K.REQUEST_INTS), dtype=np.int64)
    ri[0, K.R_ISL] = ri[0, K.R_TARGET] = tokens
    arrays = (
        np.zeros(2, dtype=np.int64),  # waiting: request 0 at the head
        np.zeros(8, dtype=np.int64),  # running
        np.zeros(16, dtype=np.int64),  # prefilling (a copy above)
        np.zeros((16, 2), dtype=np.int64),  # chunks
        np.zeros(16, dtype=np.int64),  # decodes by block phase
    )
    return cfg, st, ri, arrays


def test_a_step_that_preempted_admits_no_waiting_prompt():
    # given one 100-token prompt waiting, 10 free blocks (7 needed) and 2,048 tokens of budget
    from sizing import sim_kernel as K

    for preempted_this_step, admitted in ((False, 1), (True, 0)):
        cfg, st, ri, (waiting, running, prefilling, chunks, phase) = _one_waiting_prompt(100, 10)
        before = st[K.S_PREEMPT] - (1 if preempted_this_step else 0)
        # when the step's prompts are scheduled
        ok = K._schedule_prefill(cfg, st, ri, waiting, running, prefilling, chunks, phase,
                                 2048, before)  # fmt: skip
        # then a step without a preemption admits it whole; a step that preempted (vLLM V1's
        # scheduler skips its waiting queue then) leaves it waiting and the blocks free
        assert ok
        assert (st[K.S_CHUNKS], st[K.S_RUN_LEN], st[K.S_WAIT_LEN]) == (admitted, admitted,
                                                                      1 - admitted)  # fmt: skip
        assert st[K.S_FREE] == 10 - 7 * admitted


def _two_running_prompts(free_blocks: int):
    """Kernel state with prompts 0 and 1 prefilling, admitted in that order: 0 has 32 of
    its 200 tokens done (2 blocks), 1 has 80 of 200 (5 blocks)."""
    from sizing import sim_kernel as K

    cfg = np.zeros(K.CONFIG_SLOTS, dtype=np.int64)
    cfg[K.C_BLOCK], cfg[K.C_MAX_SEQS], cfg[K.C_CHUNKED] = 16, 8, 1
    st = np.zeros(K.INT_SLOTS, dtype=np.int64)
    st[K.S_FREE], st[K.S_RUN_LEN], st[K.S_PRE_LEN] = free_blocks, 2, 2
    ri = np.zeros((2, K.REQUEST_INTS), dtype=np.int64)
    ri[:, K.R_ISL] = ri[:, K.R_TARGET] = 200
    ri[:, K.R_RUNNING] = 1
    ri[0, K.R_DONE], ri[1, K.R_DONE] = 32, 80
    running, prefilling = np.zeros(8, dtype=np.int64), np.zeros(16, dtype=np.int64)
    running[:2] = prefilling[:2] = (0, 1)
    waiting, phase = np.zeros(3, dtype=np.int64), np.zeros(16, dtype=np.int64)
    return cfg, st, ri, waiting, running, prefilling, phase


def test_a_chunk_short_of_blocks_preempts_the_latest_admitted_then_itself():
    from sizing import sim_kernel as K

    # given prompt 0's next 100 tokens need 7 more blocks (2 -> 9: 132 tokens) and 3 are free
    cfg, st, ri, waiting, running, prefilling, phase = _two_running_prompts(3)
    # when its chunk is fitted
    k = K._fit_blocks(cfg, st, ri, waiting, running, prefilling, phase, 0, 100)
    # then the later prompt 1 is preempted (its 5 blocks freed, back at the queue's front,
    # to start over) and the chunk goes whole, not cut to the 3 blocks free (vLLM V1)
    assert k == 100
    assert (st[K.S_RUN_LEN], st[K.S_WAIT_LEN], waiting[st[K.S_WAIT_HEAD]]) == (1, 1, 1)
    assert (ri[1, K.R_RUNNING], ri[1, K.R_DONE], st[K.S_PREEMPT]) == (0, 0, 1)
    assert st[K.S_FREE] == 3 + 5 - 7
    # and when prompt 1 is the one short of blocks (it is the latest admitted), it preempts
    # itself: -1, back in the queue with its blocks freed, prompt 0 untouched
    cfg, st, ri, waiting, running, prefilling, phase = _two_running_prompts(3)
    k = K._fit_blocks(cfg, st, ri, waiting, running, prefilling, phase, 1, 120)
    assert k == -1
    assert (st[K.S_RUN_LEN], running[0], ri[0, K.R_DONE], st[K.S_FREE]) == (1, 0, 32, 8)


def test_a_decode_preempted_for_a_chunk_returns_the_block_its_token_opened_this_step():
    from sizing import sim_kernel as K

    # given prompt 0 prefilling (32 of 200 tokens: 2 blocks) and sequence 1, admitted after it,
    # decoding with 32 tokens held before this step (2 blocks), its token this step opening a
    # third that the step's decode growth already took; 4 blocks free
    cfg, st, ri, waiting, running, prefilling, phase = _two_running_prompts(4)
    st[K.S_STEP], st[K.S_PRE_LEN], st[K.S_NDEC], st[K.S_ASUM] = 1, 1, 1, 32
    ri[1, K.R_DECODING], ri[1, K.R_A] = 1, 32  # held before step s: A + s - 1 = 32
    phase[32 % 16] = 1
    # when prompt 0's next 100 tokens (7 more blocks) are fitted
    k = K._fit_blocks(cfg, st, ri, waiting, running, prefilling, phase, 0, 100)
    # then sequence 1 is preempted with all 3 of its blocks back in the pool (4 + 3 = 7), so
    # the chunk fits whole and prompt 0 keeps running
    assert k == 100
    assert (st[K.S_FREE], st[K.S_NDEC], st[K.S_RUN_LEN], running[0]) == (0, 0, 1, 0)
