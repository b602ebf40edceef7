"""Closed-loop and SLO operating points."""

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B, LLAMA_70B

from sizing.candidates import CandidateArrays
from sizing.memory import fit_memory
from sizing.operating import (
    MIN_CHUNK_TOKENS,
    admitted_context_tokens,
    batch_limit,
    closed_loop,
    kv_sequences_live,
    prefill_group_tokens,
    prompt_chunk_tokens,
    slo_operating_point,
)
from sizing.specs import Calibration, EngineSettings


def _cand(n=1, **kw):
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=8, **kw)
    return c.take(np.zeros(n, dtype=int))


def test_kv_capacity_holds_sequences_at_their_live_context():
    # given 70B fp8 TP8, whose KV budget holds 1,414 sequences of 2,048 tokens
    c = _cand(engine=EngineSettings(max_num_seqs=4096))
    fit = fit_memory(c, 2048)
    # when the batch limit is sized at the live context, 1024 + 1024 / 2 = 1,536 tokens
    live = kv_sequences_live(c, fit, 1024, 1024)
    # then it holds floor(budget / (1,536 x per-token bytes)) = 1,885 (not 1,414)
    per_token = fit.kv_bytes_per_token_per_gpu[0]
    assert fit.max_concurrency[0] == 1414
    assert live[0] == np.floor(fit.kv_budget_bytes_per_gpu[0] / (1536 * per_token)) == 1885
    assert batch_limit(c, fit, 1024, 1024)[0] == 1885
    assert batch_limit(c, fit)[0] == 1414  # without lengths: the context fit_memory used


def test_trtllm_admits_sequences_at_their_whole_context_since_it_reserves_the_output():
    # given the same row under TensorRT-LLM, whose default scheduler (GUARANTEED_NO_EVICT)
    # admits a sequence only with the blocks for its prompt and whole output free
    trt = _cand(engine=EngineSettings(engine="trtllm", max_num_seqs=4096))
    vllm = _cand(engine=EngineSettings(max_num_seqs=4096))
    fit = fit_memory(trt, 4224)
    per_token = fit.kv_bytes_per_token_per_gpu[0]
    budget = fit.kv_budget_bytes_per_gpu[0]
    # when 128-token prompts write 4,096 tokens: 4,224 reserved, 2,176 live
    assert admitted_context_tokens(trt, 128, 4096)[0] == 4224
    assert admitted_context_tokens(vllm, 128, 4096)[0] == 2176
    # then it holds floor(budget / (4,224 x per-token bytes)) sequences, the count at the full
    # context; the same pool admitting on the live context would hold 1.94x as many
    held = kv_sequences_live(trt, fit, 128, 4096)[0]
    assert held == np.floor(budget / (4224 * per_token)) == fit.max_concurrency[0]
    live_vllm = kv_sequences_live(vllm.take(np.array([0])), fit, 128, 4096)[0]
    assert live_vllm == np.floor(budget / (2176 * per_token))
    assert live_vllm / held == pytest.approx(4224 / 2176, rel=0.01)


def test_max_throughput_is_the_throughput_maximum_over_batch():
    # given short prompts the largest admitted batch is also the fastest (max_num_seqs 1,024)
    c = _cand()
    op = closed_loop(c, fit_memory(c, 2048), 1024, 1024, np.nan)
    assert op.batch[0] == 1024
    # given 2k prompts with re-arrival waves, every batch up to the limit is scanned: the
    # chosen batch beats all of them
    c2 = _cand(300, calibration=Calibration(prefill_wave_fraction=1.0))
    fit2 = fit_memory(c2, 2200)
    one = c2.take(np.array([0]))
    best = closed_loop(one, fit_memory(one, 2200), 2000, 200, np.nan)
    scan = closed_loop(c2, fit2, 2000, 200, np.linspace(1, best.batch_max[0], 300))
    assert best.requests_per_s[0] >= scan.requests_per_s.max() * (1 - 1e-9)


def test_steady_state_prefill_share_and_mixed_steps():
    # B=64, isl 1024, osl 1024: chunk 1024 -> 1 step per prompt; per step
    # 64*1024/(1+1024) = 63.94 decodes and 63.94 prefill tokens; mixed fraction 63.94/1024
    c = _cand()
    op = closed_loop(c, fit_memory(c, 2048), 1024, 1024, 64)
    assert op.n_chunks[0] == 1
    assert op.decode_seqs_per_step[0] == pytest.approx(64 * 1024 / 1025)
    assert op.prefill_tokens_per_step[0] == pytest.approx(64 * 1024 / 1025)
    f = op.mixed_step_fraction[0]
    assert f == pytest.approx(64 * 1024 / 1025 / 1024)
    tpot = (1 - f) * op.pure_step.step_s[0] + f * op.mixed_step.step_s[0]
    assert op.tpot_s[0] == pytest.approx(tpot)
    # and Little: X = B / (TTFT + osl * TPOT)
    assert op.requests_per_s[0] == pytest.approx(64 / (op.ttft_s[0] + 1024 * op.tpot_s[0]))
    assert op.output_tokens_per_s[0] == pytest.approx(op.requests_per_s[0] * 1024)


def test_closed_loop_beyond_capacity_queues_by_littles_law():
    c = _cand(2, engine=EngineSettings(max_num_seqs=32))
    fit = fit_memory(c, 2048)
    op = closed_loop(c, fit, 1024, 1024, np.array([32.0, 96.0]))
    # same batch, same service; the 64 extra clients wait (96 - 32) / X
    assert op.batch.tolist() == [32, 32]
    assert op.tpot_s[1] == pytest.approx(op.tpot_s[0])
    assert op.queue_s[1] == pytest.approx(64 / op.requests_per_s[1])
    assert op.ttft_s[1] == pytest.approx(op.ttft_s[0] + op.queue_s[1])
    # residence = C / X in closed loop
    assert op.residence_s[1] == pytest.approx(96 / op.requests_per_s[1])


def test_ttft_at_batch_1_is_one_mixed_step():
    c = _cand()
    op = closed_loop(c, fit_memory(c, 2048), 1024, 1024, 1)
    assert op.ttft_s[0] == pytest.approx(op.mixed_step.step_s[0] * (1 + op.prefill_wait_steps[0]))


def test_slo_point_is_the_largest_batch_meeting_tpot():
    c = _cand()
    fit = fit_memory(c, 3000)
    sp = slo_operating_point(c, fit, 2000, 1000, 0.030, 10.0)
    b = sp.point.batch[0]
    assert sp.meets_slo[0]
    assert sp.binding[0] == "tpot"
    assert sp.point.tpot_s[0] <= 0.030
    above = closed_loop(c, fit, 2000, 1000, b + 1)
    assert above.tpot_s[0] > 0.030


def test_slo_point_binding_memory_throughput_and_unmeetable():
    c = CandidateArrays.build([LLAMA_70B, LLAMA_8B, LLAMA_70B], H100, "fp8", tp=[8, 1, 8])
    fit = fit_memory(c, 33_000)
    sp = slo_operating_point(c, fit, 32_000, 1000, np.array([10.0, 10.0, 0.001]), 1e6)
    # loose SLOs: the KV budget (70B, long context) or max_num_seqs (8B short) bounds the batch
    assert sp.binding[0] == "memory"
    assert sp.point.batch[0] == kv_sequences_live(c, fit, 32_000, 1000)[0] == 89  # at 32,500
    c2 = CandidateArrays.build(LLAMA_8B, H100, "fp8")
    sp2 = slo_operating_point(c2, fit_memory(c2, 600), 500, 100, 10.0, 1e6)
    assert sp2.binding[0] == "throughput"
    assert sp2.point.batch[0] == 1024
    # a 1 ms TPOT cannot be met even at batch 1
    assert not sp.meets_slo[2]
    assert sp.binding[2] == "tpot"
    assert sp.point.batch[2] == 1


def test_prefill_group_is_the_wave_in_lock_step_and_own_chunk_plus_arrivals_apart():
    # given 64 clients of 1,000-token prompts, 100 prompt tokens arriving per step and a
    # budget leaving 8,000 tokens beside the decodes
    wave, chunk, arriving, room = np.array([64_000.0]), np.array([1_000.0]), 100.0, 8_000.0
    # when the group is taken at coherence 1, 0 and 0.25
    lock, apart, quarter = (
        prefill_group_tokens(wave, chunk, arriving, room, q)[0] for q in (1.0, 0.0, 0.25)
    )
    # then lock step fills the room, drifted-apart clients add one step's arrivals to the
    # own chunk, and a partial coherence lies between, linearly
    assert lock == 8_000.0
    assert apart == 1_100.0
    assert quarter == pytest.approx(1_100.0 + 0.25 * 6_900.0)


def test_drawn_lengths_shrink_the_closed_loop_prefill_step_and_equal_lengths_keep_it():
    # given a 70B replica whose profile says waves keep 20 % of their coherence
    c = CandidateArrays.build(
        LLAMA_70B, H100, "fp8", tp=4, calibration=Calibration(prefill_wave_fraction=0.2)
    )
    fit = fit_memory(c, 2000.0)
    # when 64 clients send 1,000-token prompts of equal and of drawn lengths
    equal = closed_loop(c, fit, 1000.0, 1000.0, 64)
    drawn = closed_loop(c, fit, 1000.0, 1000.0, 64, lengths_drawn=True)
    # then equal lengths keep the whole lock-step group (coherence 1, no mid-step arrival)
    assert equal.prefill_group_coherence[0] == 1.0
    assert equal.arrival_residual_s[0] == 0.0
    # and drawn ones prefill in a smaller step, so the first token comes sooner
    assert drawn.prefill_group_coherence[0] == pytest.approx(0.2)
    assert drawn.prefill_step_tokens[0] < 0.5 * equal.prefill_step_tokens[0]
    assert drawn.ttft_s[0] < equal.ttft_s[0]
    # (max throughput keeps a backlog filling the budget: drawn or not, the same numbers)
    best = [closed_loop(c, fit, 1000.0, 1000.0, lengths_drawn=d).ttft_s[0] for d in (0, 1)]
    assert best[0] == best[1]


def test_recv_interval_adds_half_the_polls_decode_steps_to_ttft_when_others_decode():
    # given one row polling for requests every decode step (the default) and one polling
    # every 30 (SGLang --scheduler-recv-interval 30), at 32 clients and alone
    every = _cand(engine=EngineSettings())
    sparse = _cand(engine=EngineSettings(scheduler_recv_interval=30))
    fit = fit_memory(every, 2048)
    # when both are evaluated at the same closed-loop concurrency
    a32, b32 = (closed_loop(c, fit, 1024, 256, 32.0, envelope=False) for c in (every, sparse))
    a1, b1 = (closed_loop(c, fit, 1024, 256, 1.0, envelope=False) for c in (every, sparse))
    # then at 32 clients a request waits (30 - 1) / 2 = 14.5 pure decode steps more, the steps
    # themselves unchanged
    step = a32.pure_step.step_s[0]
    assert b32.pure_step.step_s[0] == step
    assert a32.recv_wait_s[0] == 0.0
    assert b32.recv_wait_s[0] == pytest.approx(14.5 * step)
    assert b32.ttft_s[0] - a32.ttft_s[0] == pytest.approx(14.5 * step)
    # and the wait costs throughput through the residence (Little): X = B / W
    assert b32.requests_per_s[0] == pytest.approx(32 / b32.residence_s[0])
    assert b32.requests_per_s[0] < a32.requests_per_s[0]
    # alone, the request finds the engine idle, which polls at once
    assert b1.recv_wait_s[0] == 0.0
    assert b1.ttft_s[0] == pytest.approx(a1.ttft_s[0])


def test_a_prompt_chunk_is_what_the_decoding_sequences_leave_of_the_budget():
    # given 8,192 tokens a step
    budget = np.array([8192.0, 8192.0, 8192.0])
    # when 256 sequences decode beside a 20,000- and a 2,000-token prompt, and 8,192 beside one
    chunk = prompt_chunk_tokens(budget, np.array([256.0, 256.0, 8192.0]),
                                np.array([20000.0, 2000.0, 20000.0]))  # fmt: skip
    # then the first gets 7,936 tokens a step (3 chunks), the second all of itself, and a full
    # budget still leaves the engine's minimum
    assert chunk.tolist() == [7936.0, 2000.0, MIN_CHUNK_TOKENS]
    assert np.ceil(20000.0 / chunk[0]) == 3
    # and without a prompt the room alone, never below 1
    assert prompt_chunk_tokens(np.array([8192.0]), np.array([0.0]))[0] == 8192.0
