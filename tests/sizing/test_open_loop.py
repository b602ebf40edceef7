"""Open-loop (Poisson arrivals at a request rate) operating points."""

from types import SimpleNamespace

import numpy as np
import pytest
from specs_catalog import H100, LLAMA_8B, LLAMA_70B

from sizing import calibrate as cal
from sizing.candidates import CandidateArrays
from sizing.chain import predict_rows
from sizing.memory import fit_memory
from sizing.operating import closed_loop, open_loop
from sizing.specs import EngineSettings


def _rows(model, n, tp=1):
    c = CandidateArrays.build(model, H100, "bf16", tp=tp)
    return c.take(np.zeros(n, dtype=int))


def test_a_low_rate_holds_little_s_law_and_queues_no_prompt():
    # given Llama 3.1 8B on one H100 at 2 req/s with 467/256-token requests
    c = _rows(LLAMA_8B, 1)
    fit = fit_memory(c, 467 + 256)
    # when the open-loop point is solved
    op = open_loop(c, fit, 467, 256, 2.0)
    # then the requests in flight N serve exactly the offered rate (N / W = lambda)
    assert op.requests_per_s[0] == pytest.approx(2.0, rel=1e-3)
    assert op.batch[0] == pytest.approx(2.0 * op.residence_s[0], rel=1e-3)
    # and TTFT is the front end, half the step in progress and the own prefill: the M/D/1
    # wait behind other prompts is under 1 % of a step at this load
    own = op.frontend_s[0] + op.arrival_residual_s[0] + op.last_prefill_step_s[0]
    assert op.arrival_residual_s[0] == pytest.approx(0.5 * op.tpot_s[0])
    assert op.ttft_s[0] == pytest.approx(own, rel=0.01)
    assert op.queue_s[0] == 0.0


def test_latency_never_falls_as_the_rate_rises():
    # given 70B bf16 TP4 at rates from 0.5 to 60 req/s (past its saturation)
    rates = np.array([0.5, 1, 2, 4, 8, 16, 24, 32, 48, 60.0])
    c = _rows(LLAMA_70B, len(rates), tp=4)
    fit = fit_memory(c, 467 + 256)
    op = open_loop(c, fit, 467, 256, rates, 500.0)
    # then TTFT, TPOT and the requests in flight grow with the rate
    assert np.all(np.diff(op.ttft_s) >= -1e-12)
    assert np.all(np.diff(op.tpot_s) >= -1e-12)
    assert np.all(np.diff(op.batch) >= -1e-9)


def test_above_saturation_a_finite_run_s_queue_grows_through_it():
    # given 70B bf16 TP4, its saturation rate X at the largest batch
    c = _rows(LLAMA_70B, 1, tp=4)
    fit = fit_memory(c, 467 + 256)
    x_max = closed_loop(c, fit, 467, 256, np.nan, envelope=False).requests_per_s[0]
    saturated = open_loop(c, fit, 467, 256, x_max * 2.0)
    # when 500 requests are sent at twice that rate
    run = open_loop(c, fit, 467, 256, x_max * 2.0, 500.0)
    # then request k starts k (1/X - 1/(2X)) late: 250 x 1/(2X) on average, on top of TTFT
    x_at = saturated.requests_per_s[0]
    expected = 0.5 * 500 * (1.0 / x_at - 1.0 / (2.0 * x_max))
    assert run.ttft_s[0] - saturated.ttft_s[0] == pytest.approx(expected, rel=1e-9)
    assert run.queue_s[0] - saturated.queue_s[0] == pytest.approx(expected, rel=1e-9)
    # and an unknown run length adds no backlog (NaN requests)
    assert saturated.ttft_s[0] == open_loop(c, fit, 467, 256, x_max * 2.0, np.nan).ttft_s[0]


def test_open_loop_rows_leave_the_closed_loop_rows_beside_them_unchanged():
    # given closed-loop rows predicted alone, and the same rows beside open-loop ones
    args = dict(num_gpus=4, tp=4, pp=1, ep=1, weight_precision="bf16", kv_precision=None)
    alone = predict_rows(
        [LLAMA_70B] * 2, H100, **args, isl=467, osl=256, concurrency=np.array([1.0, 64.0])
    )
    mixed = predict_rows(
        [LLAMA_70B] * 4, H100, **args, isl=467, osl=256,
        concurrency=np.array([1.0, np.nan, 64.0, np.nan]),
        request_rate=np.array([np.nan, 2.0, np.nan, 8.0]),
    )  # fmt: skip
    # then the closed-loop rows are identical, and the open-loop rows serve their rate
    for column in ("ttft_ms", "tpot_ms", "batch", "total_output_tok_s"):
        assert np.array_equal(getattr(mixed, column)[[0, 2]], getattr(alone, column))
    served = mixed.total_output_tok_s[[1, 3]] / 256
    assert served == pytest.approx([2.0, 8.0], rel=1e-3)
    assert mixed.operating.requests_per_s[[1, 3]] == pytest.approx([2.0, 8.0], rel=1e-3)


def _row(**changes):
    fields = dict(
        model="llama", gpu="h100", num_gpus=4, tp=4, pp=1, ep=None,
        engine="TensorRT-LLM 0.14 via Triton", engine_family="trtllm",
        weight_precision="bf16", kv_precision="", isl=467, osl=256, concurrency=None,
        request_rate=8.0, metric="ttft_ms", value=92.0, row_id="m0884", flags=frozenset(),
        offline=False, source_group="s", model_family="llama-3",
        source_version="data generated with TensorRT-LLM v0.14.0 (500 requests, BF16)",
        notes="",
    )  # fmt: skip
    return SimpleNamespace(**{**fields, **changes})


def _points(*rows):
    specs = {"llama": LLAMA_70B, "h100": H100}
    return cal.points_from_measurements(
        rows, lambda name: (name, specs[name]), lambda name: (name, specs[name]), lambda _: ""
    )


def test_open_loop_rows_are_fitted_on_their_latency_with_the_run_s_length():
    # given a served TTFT and ITL at 8 req/s from a 500-request run, and its throughput
    ttft, itl = _row(), _row(metric="tpot_ms", value=32.0)
    rate_throughput = _row(metric="output_tok_s_per_gpu", value=448.0)
    points, skipped = _points(ttft, itl, rate_throughput)
    # then the latencies become open-loop points that know the rate and the run's length
    assert [(p.metric, p.request_rate, p.run_requests) for p in points] == [
        ("ttft_ms", 8.0, 500.0),
        ("tpot_ms", 8.0, 500.0),
    ]
    assert not points[0].offline and points[0].conditions().endswith("467/256 8 req/s")
    # and the throughput is left out: below saturation it is the offered rate, not the engine
    assert [reason for _, reason in skipped] == [
        "open-loop throughput is the offered rate (and the run's drain), not the engine's"
    ]
    # and the prediction is the open-loop point's: 8 req/s served, TTFT and TPOT from it
    predicted = cal.predict_points(points)
    alone = open_loop_point(LLAMA_70B, 467, 256, 8.0)
    assert predicted == pytest.approx([alone.ttft_s[0] * 1e3, alone.tpot_s[0] * 1e3])


def open_loop_point(model, isl, osl, rate):
    trtllm = EngineSettings(engine="trtllm")
    c = CandidateArrays.build(model, H100, "bf16", tp=4, engine=trtllm, calibration=cal.PHYSICS)
    return open_loop(c, fit_memory(c, isl + osl), isl, osl, rate, 500.0)
