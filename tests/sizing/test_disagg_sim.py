"""The two-pool discrete-event simulator (sizing/disagg_sim.py) against the mean-value model."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sizing.candidates import CandidateArrays
from sizing.disagg import predict_disagg
from sizing.disagg_sim import WAVE_FLOOR_STEPS, closed_loop_wait_factors, simulate_disagg
from sizing.simulate import LengthDist
from sizing.specs import Calibration, EngineSettings
from tests.sizing.specs_catalog import B200, DEEPSEEK_V3, H100, LLAMA_70B

TP4 = dict(tp=4, pp=1, ep=1, dp=1)


def _worker(layout=TP4):
    return CandidateArrays.build(LLAMA_70B, H100, "bf16", None, layout["tp"], layout["pp"],
                                 layout["ep"], layout["dp"])  # fmt: skip


@pytest.mark.parametrize("concurrency", [4, 32])
def test_closed_loop_simulation_matches_the_mean_value_model(concurrency):
    # given 2 prefill + 1 decode TP4 workers, fixed 4,096 / 512-token requests
    cp, cd = _worker(), _worker()
    sim = simulate_disagg(cp, cd, 2, 1, LengthDist(4096), LengthDist(512),
                          requests=10 * concurrency, concurrency=concurrency,
                          warmup_requests=2 * concurrency)  # fmt: skip
    p = predict_disagg(LLAMA_70B, H100, {**TP4, "workers": 2}, {**TP4, "workers": 1}, "bf16",
                       None, 4096, 512, concurrency)  # fmt: skip
    # then TPOT (decode-only steps at the same batch) and throughput agree within 5 %
    assert sim.mean_ms("tpot") == pytest.approx(p.tpot_ms[0], rel=0.05)
    assert sim.output_tok_s_per_gpu == pytest.approx(p.output_tok_s_per_gpu[0], rel=0.07)
    # and TTFT is never below the prompt's own prefill + transfer; the M/D/1 wait the
    # analytic model adds is an upper bound for synchronized closed-loop clients
    floor = (p.prefill.prefill_s[0] + p.transfer.exposed_s[0]) * 1e3
    assert floor * 0.97 <= sim.mean_ms("ttft") <= p.ttft_ms[0] * 1.03


def test_the_simulated_hand_off_waits_the_decode_ranks_latest_steps():
    # given 2 prefill + 1 decode TP4 workers and 16 closed-loop clients, the decode worker's
    # hand-off before the first token at 0 and at 3 of its steps
    def run(steps):
        cal = Calibration(first_token_decode_steps=steps)
        cd = CandidateArrays.build(LLAMA_70B, H100, "bf16", None, 4, calibration=cal)
        return simulate_disagg(_worker(), cd, 2, 1, LengthDist(4096), LengthDist(512),
                               requests=160, concurrency=16, warmup_requests=32)  # fmt: skip

    none, some = run(0.0), run(3.0)
    # then TTFT grows by about 3 decode steps (the rank steps at its batch, ~ TPOT each)
    step_ms = none.mean_ms("tpot")
    assert some.mean_ms("ttft") - none.mean_ms("ttft") == pytest.approx(3 * step_ms, rel=0.25)
    assert some.mean_ms("tpot") == pytest.approx(step_ms, rel=0.05)


def test_ttft_tails_come_from_the_prefill_queue():
    # given Poisson arrivals at 2.5 req/s of 4,096-token prompts (one TP4 prefill worker
    # prefills about 3.3 per s), then one and two prefill workers
    cp, cd = _worker(), _worker()
    args = (LengthDist(4096), LengthDist(128))
    one = simulate_disagg(cp, cd, 1, 1, *args, requests=400, rate_rps=2.5, warmup_requests=50)
    two = simulate_disagg(cp, cd, 2, 1, *args, requests=400, rate_rps=2.5, warmup_requests=50)
    p_one, p_two = one.percentiles_ms("ttft"), two.percentiles_ms("ttft")
    assert p_one["p95"] > 1.5 * p_one["p50"]
    assert p_two["p95"] < 0.6 * p_one["p95"]
    # decode is the same pool either way
    assert np.median(one.tpot_s) == pytest.approx(np.median(two.tpot_s), rel=0.1)


def test_refuses_both_or_neither_load():
    cp, cd = _worker(), _worker()
    with pytest.raises(ValueError, match="exactly one"):
        simulate_disagg(cp, cd, 1, 1, LengthDist(100), LengthDist(10), requests=10)


@pytest.mark.parametrize("workers", [(0, 1), (1, 0)])
def test_refuses_a_pool_without_workers(workers):
    # given no prefill or no decode worker, then a ValueError (the callers' "cannot simulate")
    cp, cd = _worker(), _worker()
    with pytest.raises(ValueError, match="each pool needs a rank"):
        simulate_disagg(cp, cd, *workers, LengthDist(100), LengthDist(10), requests=10,
                        concurrency=1)  # fmt: skip


@pytest.mark.parametrize("moe", [False, True])
def test_the_step_memo_gives_each_call_its_own_core_numbers(moe):
    # given a prefill and a decode worker (dense Llama 3.1 70B TP4, or gpt-oss-120b TP2)
    from sizing.disagg_sim import _Timer
    from sizing.simulate import grid_key, grid_value
    from sizing.steptime import decode_step
    from tests.sizing.specs_catalog import B200, GPT_OSS_120B

    def _grid(x, per_octave):
        return grid_value(grid_key(x, per_octave), per_octave)

    c = CandidateArrays.build(GPT_OSS_120B, B200, "fp8", tp=2) if moe else _worker()
    timer = _Timer(c, c, 256)
    # when steps are timed through the memo (rows of counts in blocks of context cells, bands
    # of prefill cells) in a scattered order
    for n, ctx in ((3, 1500.0), (1, 1500.0), (70, 1500.0), (200, 900.5), (0, 10.0), (64, 1501.0)):
        # then each is the core's own number for that count and the context's grid value
        alone = decode_step(c, np.array([float(n)]), np.array([_grid(ctx, 64)])).step_s[0]
        assert timer.decode_s(n, ctx) == float(alone)
    for tokens, p_eq in ((2000.0, 1800.0), (2000.0, 2000.0), (30.0, 30.0), (8000.0, 9000.0)):
        grid = (np.array([_grid(tokens, 32)]), np.array([_grid(p_eq, 32)]))
        alone = decode_step(c, np.array([0.0]), np.array([0.0]), *grid).step_s[0]
        assert timer.prefill_s(tokens, p_eq) == float(alone)


def test_a_lone_prompt_on_an_expert_parallel_prefill_rank_is_the_mean_value_models():
    # given DeepSeek-V3 fp8 on B200: one attention-DP 8 x EP 8 prefill worker, one TP8 x EP8
    # decode worker, one client at a time (the prompt is always alone on its worker)
    from tests.sizing.specs_catalog import B200, DEEPSEEK_V3

    dep8 = dict(tp=1, pp=1, ep=8, dp=8)
    tep8 = dict(tp=8, pp=1, ep=8, dp=1)

    def worker(layout):
        return CandidateArrays.build(DEEPSEEK_V3, B200, "fp8", None, layout["tp"], layout["pp"],
                                     layout["ep"], layout["dp"])  # fmt: skip

    cp, cd = worker(dep8), worker(tep8)
    sim = simulate_disagg(cp, cd, 1, 1, LengthDist(4096), LengthDist(16), requests=12,
                          concurrency=1, warmup_requests=2)  # fmt: skip
    p = predict_disagg(DEEPSEEK_V3, B200, {**dep8, "workers": 1}, {**tep8, "workers": 1}, "fp8",
                       None, 4096, 16, 1)  # fmt: skip
    # then its TTFT is the model's lone prompt: front end + prefill alone + exposed transfer
    lone = (p.prefill.frontend_s[0] + p.prefill.prefill_s[0] + p.transfer.exposed_s[0]) * 1e3
    assert sim.mean_ms("ttft") == pytest.approx(lone, rel=0.03)
    # and not the step under full load, where every GPU runs its own rank's routed experts
    from sizing.steptime import decode_step

    full = decode_step(cp, np.array([0.0]), np.array([0.0]), np.array([4096.0]),
                       np.array([4096.0])).step_s[0]  # fmt: skip
    assert p.prefill.prefill_s[0] < 0.9 * full


def test_step_tables_emptied_over_and_over_change_no_number(monkeypatch):
    # given a 2P3D deployment of Llama 3.1 70B fp8 at drawn lengths under Poisson load, and
    # a count of the cells the compiled loop asks Python to fill
    from sizing import disagg_sim, simulate
    from sizing.simulate import lengths_from_mean_p95

    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4)
    isl, osl = lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(300, 800)
    fills = []
    fill = disagg_sim._Timer.fill

    def counted(timer, st):
        fills.append(int(st[disagg_sim.K.S_NEED_POOL]))
        fill(timer, st)

    monkeypatch.setattr(disagg_sim._Timer, "fill", counted)

    def run():
        fills.clear()
        result = simulate_disagg(c, c, 2, 3, isl, osl, 600, rate_rps=6.0, warmup_requests=60,
                                 seed=3)  # fmt: skip
        return result, len(fills)

    # when simulated with tables that keep every cell, and with tables of the least room
    # (4,096 step times: emptied whenever a fill would pass it, so cells are asked again)
    kept, kept_fills = run()
    monkeypatch.setattr(disagg_sim, "TABLE_BYTES", 0)
    monkeypatch.setattr(simulate, "TABLE_BYTES", 0)  # the decode pool's (``StepTimer``)
    refilled, refills = run()
    # then the loop stopped for more cells, resumed each time where it stopped, and every
    # latency is identical
    assert refills > kept_fills
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        assert np.array_equal(getattr(kept, name), getattr(refilled, name)), name


def _reference_deployments() -> dict:
    """The deployments whose outputs were recorded from the pure-Python event loop (before
    the loop was compiled): dense and MoE, the EP > TP prefill worker (``alone`` steps), DP
    decode ranks, closed loop and Poisson, prompts chunked over several steps, and a decode
    rank whose slots bind (transferred requests wait for a slot)."""
    from sizing.simulate import lengths_from_mean_p95
    from tests.sizing.specs_catalog import B200, DEEPSEEK_V3, LLAMA_8B

    def worker(model, gpu, precision, tp=1, ep=1, dp=1):
        return CandidateArrays.build(model, gpu, precision, None, tp, 1, ep, dp)

    chat = (lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(300, 800))
    llama_70b = worker(LLAMA_70B, H100, "fp8", 4)
    llama_70b_bf16 = worker(LLAMA_70B, H100, "bf16", 4)
    dep8 = worker(DEEPSEEK_V3, B200, "fp8", ep=8, dp=8)
    llama_8b = worker(LLAMA_8B, H100, "bf16")
    mixed = (LengthDist(1000, "lognormal", 3000), LengthDist(200, "lognormal", 600))
    return {
        "llama_70b_fp8_tp4_2p3d_poisson": (llama_70b, llama_70b, 2, 3, *chat, 600,
                                           dict(rate_rps=6.0, warmup_requests=60, seed=3)),
        "deepseek_v3_fp8_dp8_ep8_1p2d_poisson": (dep8, dep8, 1, 2, *chat, 600,
                                                 dict(rate_rps=8.0, warmup_requests=60, seed=5)),
        "llama_8b_tp1_closed_loop": (llama_8b, llama_8b, 1, 1, *mixed, 400,
                                     dict(concurrency=40, warmup_requests=40, seed=1)),
        "llama_70b_fp8_chunked_long_prompts": (
            llama_70b, llama_70b, 1, 2, LengthDist(20000, "lognormal", 40000), LengthDist(100),
            150, dict(rate_rps=0.5, warmup_requests=10, seed=4)),
        "llama_70b_bf16_decode_slots_bind": (
            llama_70b_bf16, llama_70b_bf16, 3, 1, LengthDist(8000), LengthDist(400), 300,
            dict(concurrency=120, warmup_requests=30, seed=6)),
    }  # fmt: skip


#: What the pure-Python event loop gave for each reference deployment (s; repr precision).
REFERENCE_OUTPUTS = {
    "llama_70b_fp8_tp4_2p3d_poisson": {
        "kept": 540,
        "output_tokens": 163714,
        "window_s": 107.75648735742588,
        "ttft_sum_s": 36.168443797446606,
        "ttft_p50_s": 0.046397758750805096,
        "ttft_max_s": 0.47618953204437275,
        "tpot_sum_s": 6.559963565384211,
        "tpot_p50_s": 0.012137508311227504,
        "tpot_max_s": 0.012476040114005773,
        "e2e_sum_s": 2021.6588788521149,
        "e2e_p50_s": 2.92038970191582,
        "e2e_max_s": 32.610409266195674,
    },
    "deepseek_v3_fp8_dp8_ep8_1p2d_poisson": {
        "kept": 540,
        "output_tokens": 176220,
        "window_s": 87.98427265242549,
        "ttft_sum_s": 24.539247358947595,
        "ttft_p50_s": 0.03074094517545234,
        "ttft_max_s": 0.3313996022955763,
        "tpot_sum_s": 7.195085519172326,
        "tpot_p50_s": 0.013106335020273264,
        "tpot_max_s": 0.015880766953430468,
        "e2e_sum_s": 2357.3126379285945,
        "e2e_p50_s": 3.3460007319725307,
        "e2e_max_s": 31.069271110055,
    },
    "llama_8b_tp1_closed_loop": {
        "kept": 360,
        "output_tokens": 73530,
        "window_s": 30.502801055618303,
        "ttft_sum_s": 28.26547334023938,
        "ttft_p50_s": 0.03920283792888668,
        "ttft_max_s": 1.1372687246233095,
        "tpot_sum_s": 4.265687498082463,
        "tpot_p50_s": 0.011868252775923266,
        "tpot_max_s": 0.013540824307423855,
        "e2e_sum_s": 890.9514985654939,
        "e2e_p50_s": 1.638389511029922,
        "e2e_max_s": 18.19800602738937,
    },
    "llama_70b_fp8_chunked_long_prompts": {
        "kept": 140,
        "output_tokens": 14000,
        "window_s": 288.4925488160575,
        "ttft_sum_s": 272.97720918537357,
        "ttft_p50_s": 1.6238222812521048,
        "ttft_max_s": 8.583882670634779,
        "tpot_sum_s": 1.7084334245626278,
        "tpot_p50_s": 0.01216432309161121,
        "tpot_max_s": 0.012772452355335417,
        "e2e_sum_s": 443.82055164163637,
        "e2e_p50_s": 2.8493638824792473,
        "e2e_max_s": 9.850173724802602,
    },
    "llama_70b_bf16_decode_slots_bind": {
        "kept": 270,
        "output_tokens": 108000,
        "window_s": 84.86987571548217,
        "ttft_sum_s": 3772.562457825614,
        "ttft_p50_s": 13.036935687114287,
        "ttft_max_s": 26.793229336025895,
        "tpot_sum_s": 11.033654729197364,
        "tpot_p50_s": 0.041464342674525576,
        "tpot_max_s": 0.05160527883783459,
        "e2e_sum_s": 8186.02434950456,
        "e2e_p50_s": 30.349669247163774,
        "e2e_max_s": 41.81209634148917,
    },
}


@pytest.mark.parametrize("name", sorted(REFERENCE_OUTPUTS))
def test_each_reference_deployment_gives_the_recorded_latencies(name):
    # given a deployment whose outputs the pure-Python event loop recorded
    cp, cd, x, y, isl, osl, requests, load = _reference_deployments()[name]
    # when it is simulated again
    sim = simulate_disagg(cp, cd, x, y, isl, osl, requests, **load)
    # then the same requests are kept and every statistic of every latency is the recorded
    # one (to the last bits: sums over hundreds of requests see any changed latency)
    expected = REFERENCE_OUTPUTS[name]
    assert (len(sim.ttft_s), sim.output_tokens) == (expected["kept"], expected["output_tokens"])
    got = {"window_s": sim.window_s}
    for latency in ("ttft", "tpot", "e2e"):
        values = getattr(sim, f"{latency}_s")
        got[f"{latency}_sum_s"] = float(np.sum(values))
        got[f"{latency}_p50_s"] = float(np.percentile(values, 50))
        got[f"{latency}_max_s"] = float(np.max(values))
    for key, value in got.items():
        assert value == pytest.approx(expected[key], rel=1e-12, abs=0), key


# ------------------------------------------------------------------ the closed loop's wave factor
DEP8 = dict(workers=1, tp=1, pp=1, ep=8, dp=8)
TEP8 = dict(workers=1, tp=8, pp=1, ep=8, dp=1)


def _wave_case(model, gpu, precision, prefill, decode, isl, osl, clients, **extra):
    args = dict(models=model, gpus=gpu, prefill=prefill, decode=decode,
                weight_precision=precision, kv_precision=None, isl=isl, osl=osl,
                concurrency=clients, **extra)  # fmt: skip
    waves = closed_loop_wait_factors(**args)
    return waves, predict_disagg(**args), predict_disagg(**args, prefill_wait_factor=waves.factor)


def test_a_light_closed_loop_waits_in_waves_longer_than_md1_says():
    # given DeepSeek-V3 fp8 on B200: one prefill worker of 8 attention-DP ranks, one TP8
    # decode worker, 32 clients of 8,192 / 1,024 tokens: 4 clients per prefill rank, load 0.09
    waves, md1, with_factor = _wave_case(DEEPSEEK_V3, B200, "fp8", DEP8, TEP8, 8192, 1024, 32)
    assert waves.simulated[0] and md1.prefill_load[0] == pytest.approx(0.094, abs=0.005)
    # when the benchmark is replayed (clients released together, lengths drawn in [0.8, 1])
    # then the prompts, which come back together, wait ~4x M/D/1's mean for each other
    floor = WAVE_FLOOR_STEPS * waves.step_full_s[0]
    expected = (waves.simulated_wait_s[0] + floor) / (waves.md1_wait_s[0] + floor)
    assert waves.factor[0] == pytest.approx(expected, rel=1e-12)
    assert 3.0 < waves.factor[0] < 5.0
    # and the mean-value TTFT moves from M/D/1's toward the simulated median
    sim_ms = waves.simulated_ttft_s[0] * 1e3
    assert abs(with_factor.ttft_ms[0] - sim_ms) < 0.6 * abs(md1.ttft_ms[0] - sim_ms)


def test_near_saturation_the_median_waits_a_fraction_of_md1s_mean():
    # given Llama 3.1 70B, one TP4 prefill and one TP4 decode worker on H100, 64 clients of
    # 1,024 / 256 tokens: the prefill pool at load 0.78
    waves, md1, with_factor = _wave_case(LLAMA_70B, H100, "bf16", {**TP4, "workers": 1},
                                         {**TP4, "workers": 1}, 1024, 256, 64)  # fmt: skip
    assert md1.prefill_load[0] == pytest.approx(0.78, abs=0.02)
    # then the closed loop bounds the queue: the median waits under half the M/D/1 mean
    assert 0.05 < waves.factor[0] < 0.5
    # and the prediction moves toward the simulated median (the closed loop re-balances:
    # less wait, more throughput, more load; so it does not land on it)
    sim_ms = waves.simulated_ttft_s[0] * 1e3
    assert sim_ms < with_factor.ttft_ms[0] < md1.ttft_ms[0]


def test_open_loop_and_slot_bound_rows_keep_the_md1_wait():
    # given the same deployment at blank concurrency (max throughput) and with 2 decode slots
    # for 16 clients (every slot taken: the slot queue, not the prefill's, sets the wait)
    pools = dict(prefill={**TP4, "workers": 2}, decode={**TP4, "workers": 1})
    args = dict(models=LLAMA_70B, gpus=H100, weight_precision="bf16", kv_precision=None,
                isl=4096, osl=512, **pools)  # fmt: skip
    blank = closed_loop_wait_factors(**args, concurrency=np.nan)
    full = closed_loop_wait_factors(**args, concurrency=16, engine=EngineSettings(max_num_seqs=2))
    # then neither is simulated and both keep factor 1
    for waves in (blank, full):
        assert not waves.simulated[0] and waves.factor[0] == 1.0
        assert np.isnan(waves.simulated_ttft_s[0])


@settings(max_examples=10, deadline=None)
@given(
    workers=st.integers(1, 4),
    concurrency=st.sampled_from([3, 16, 100, 700]),
    isl=st.sampled_from([256, 2000, 9000]),
)
@example(workers=4, concurrency=16, isl=2000)
def test_law_more_prefill_workers_never_hurt_with_the_wave_factor(workers, concurrency, isl):
    # given Llama 3.1 70B on H100, x TP4 prefill workers and one TP8 decode worker, each
    # prediction with the wave factor its own replays give
    def predicted(x):
        args = dict(models=LLAMA_70B, gpus=H100, prefill={**TP4, "workers": x},
                    decode={**TP4, "tp": 8, "workers": 1}, weight_precision="bf16",
                    kv_precision=None, isl=isl, osl=256, concurrency=concurrency)  # fmt: skip
        return predict_disagg(**args, prefill_wait_factor=closed_loop_wait_factors(**args).factor)

    a, b = predicted(workers), predicted(workers + 1)
    # then one more prefill worker never slows TTFT nor throughput (a single replay's median
    # moves ~10 % with its length draws, which broke this at 4 -> 5 workers, 16 clients)
    assert b.requests_per_s[0] >= a.requests_per_s[0] * (1 - 1e-6)
    assert b.ttft_ms[0] <= a.ttft_ms[0] * (1 + 1e-6)


def test_rows_repeating_a_deployment_replay_it_once(monkeypatch):
    # given three rows of which the first and last describe one deployment (a CSV with a row
    # per measured metric repeats it) and the middle one has more clients
    import sizing.disagg_sim as module

    calls = []
    real = module.simulate_disagg
    monkeypatch.setattr(module, "simulate_disagg", lambda *a, **k: calls.append(1) or real(*a, **k))
    one = {k: np.full(3, v) for k, v in {**TP4, "workers": 1}.items()}
    # when their wave factors are computed
    waves = closed_loop_wait_factors(models=[LLAMA_70B] * 3, gpus=[H100] * 3, prefill=one,
                                     decode=one, weight_precision="bf16", kv_precision=None,
                                     isl=1024,
                                     osl=256, concurrency=np.array([64.0, 96.0, 64.0]))  # fmt: skip
    # then the repeated deployment shares one set of replays (4 of 640 requests each for 64
    # clients, 3 of 960 for 96) and gets the same factor, the other its own
    assert waves.simulated.all() and len(calls) == 4 + 3
    assert waves.factor[0] == waves.factor[2] != waves.factor[1]
