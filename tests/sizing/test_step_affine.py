"""The step time the compiled event loop composes from a row's decomposition (sizing/step_affine.py)
is the core's, and rows whose core does not decompose keep the step-time table."""

import numpy as np
import pytest
from specs_catalog import B200, GPT_OSS_120B, H100, LLAMA_8B, LLAMA_70B

from sizing import simulate as sim
from sizing.candidates import CandidateArrays
from sizing.sim_kernel import A_C0, A_C1, A_GD, A_GM, A_O0, A_O1, A_PO, grid_key
from sizing.simulate import (
    StepTimer,
    Workload,
    engine_for,
    grid_value,
    lengths_from_mean_p95,
    simulate,
)
from sizing.step_affine import affine_step
from sizing.steptime import decode_step, step_overhead_total_s, streamed_nonexpert_bytes_per_gpu

#: Cells off the check's random draw: exact and log-grid contexts, decode-only and mixed steps.
CELLS = [(n, ctx_k, pre_k, p_k) for n in (0, 1, 7, 64, 255)
         for ctx_k in (0, 3, 64, 65, 700, 1000)
         for pre_k, p_k in ((0, 0), (1, 1), (40, 90), (300, 320), (420, 430))]  # fmt: skip


def _core(c, n, ctx_k, pre_k, p_k) -> float:
    """What the step-time table holds for the cell: ``decode_step`` at the cell's values."""
    ctx, pre, p = grid_value(ctx_k, 64), grid_value(pre_k, 32), grid_value(p_k, 32)
    return float(decode_step(c.scalar_row(), np.array([float(n)]), ctx, pre, p).step_s[0])


@pytest.mark.parametrize(
    "c",
    [
        CandidateArrays.build(LLAMA_8B, H100, "bf16"),
        CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2),
        CandidateArrays.build(LLAMA_70B, B200, "fp8", tp=8),
    ],
    ids=["8b tp1", "70b tp2", "70b tp8"],
)
def test_a_dense_rows_composed_step_time_is_the_cores(c):
    # given a dense row on one stage (TP 1, 2, 8)
    affine = affine_step(c.scalar_row(), 256)
    # when its decomposition composes the step of each cell
    assert affine is not None
    cells = np.array(CELLS).T
    composed = affine.step_s(*cells)
    # then each is decode_step at the cell's values, to rounding
    core = np.array([_core(c, *cell) for cell in CELLS])
    np.testing.assert_allclose(composed, core, rtol=1e-12)


def test_the_decompositions_constants_are_the_cores_terms():
    # given Llama 3.1 70B fp8 on two H100s
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=2).scalar_row()
    s = affine_step(c, 256).scalars
    # then the weights' stream is the non-expert bytes per GPU over the achieved bandwidth,
    assert s[A_GM] == pytest.approx(
        float(streamed_nonexpert_bytes_per_gpu(c) / (c.hbm_bytes_s * c.eta_mem)), rel=1e-15
    )
    # one decode's GEMMs are 2 x (params - input embedding) / TP FLOPs at the decode peak,
    matmul = 70.55e9 - 128256 * 8192
    assert s[A_GD] == pytest.approx(
        float(2 * matmul / 2 / (c.peak_flops * c.eta_flop_decode)), rel=1e-12
    )
    # the host cost is the core's fixed part plus its per-sequence part, none per prompt step
    assert s[A_O0] == float(step_overhead_total_s(c))
    assert s[A_O1] == pytest.approx(float(c.step_overhead_per_seq_s), rel=1e-9)
    assert s[A_PO] == 0.0  # dense: no MoE layer's host cost on prompt steps
    # and two all-reduces per layer: a latency each at no tokens, growing with every token
    assert s[A_C0] == pytest.approx(2 * 80 * float(c.allreduce_latency_s), rel=1e-12)
    assert s[A_C1] > 0


def test_a_two_stage_row_keeps_the_table():
    # given a row on two pipeline stages (a step is PP stage passes and the hops between)
    c = CandidateArrays.build(LLAMA_70B, H100, "fp8", tp=4, pp=2)
    # when its decomposition is asked for, then there is none (the check fails): the timer
    # leaves the loop to its step-time table
    assert affine_step(c.scalar_row(), 256) is None
    assert StepTimer(c, 256).affine is None


def test_a_moe_rows_weight_stream_follows_the_tokens_it_routes():
    # given gpt-oss-120b fp8 on two B200s (128 experts, 4 per token)
    row = CandidateArrays.build(GPT_OSS_120B, B200, "fp8", tp=2)
    affine = affine_step(row.scalar_row(), 256)
    # then its weight stream is a table by prompt-token key and decodes, growing with them
    assert affine is not None and affine.weights.shape == (grid_key(8192, 32) + 1, 257)
    # (to rounding: every expert is streamed once a few thousand tokens route)
    assert np.all(np.diff(affine.weights[0]) > 0)
    by_tokens = affine.weights[np.argsort(affine.prompt_values[: len(affine.weights)]), 5]
    assert np.all(np.diff(by_tokens) >= -1e-15)
    assert affine.weights[-1, 5] > 2 * affine.weights[0, 1]
    # and each cell is the core's, a step past the token budget left to the table
    cells = np.array(CELLS).T
    np.testing.assert_allclose(
        affine.step_s(*cells), [_core(row, *cell) for cell in CELLS], rtol=1e-12
    )
    over = affine.step_s([3], [700], [grid_key(20_000, 32)], [grid_key(20_000, 32)])
    assert np.isnan(over[0])


def test_speculative_decoding_keeps_the_table():
    from sizing.specs import EngineSettings

    eagle = EngineSettings(spec_method="eagle", spec_tokens=3, spec_acceptance=0.7,
                           spec_draft_params=1e9, spec_draft_active_params=1e9)  # fmt: skip
    c = CandidateArrays.build(LLAMA_8B, H100, "bf16", engine=eagle)
    assert StepTimer(c, 256).affine is None


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "rate"),
    [(LLAMA_8B, H100, 1, 4.0), (LLAMA_70B, H100, 2, 1.0), (GPT_OSS_120B, B200, 2, 4.0)],
    ids=["8b tp1", "70b tp2", "moe tp2"],
)
def test_a_simulation_with_composed_step_times_is_the_tables_to_rounding(
    monkeypatch, model, gpu, tp, rate
):
    # given a replica with drawn lengths at a moderate load
    c = CandidateArrays.build(model, gpu, "fp8", tp=tp)
    w = Workload(lengths_from_mean_p95(1000, 3000), lengths_from_mean_p95(300, 800),
                 requests=300, rate_rps=rate, warmup_requests=30, seed=5)  # fmt: skip
    eng = engine_for(c, 1000, 300)
    # when simulated with the loop composing the step times, and with the table alone
    composed_timer = StepTimer(c, eng.max_num_seqs)
    composed = simulate(c, w, eng, composed_timer)
    monkeypatch.setattr(sim, "AFFINE_STEPS", False)
    table_timer = StepTimer(c, eng.max_num_seqs)
    table = simulate(c, w, eng, table_timer)
    # then the composed run made no core call and every number is the table's to rounding
    assert composed_timer.affine is not None and table_timer.affine is None
    assert composed_timer.core_calls == 0 and table_timer.core_calls > 10
    assert (composed.steps, composed.preemptions) == (table.steps, table.preemptions)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        np.testing.assert_allclose(getattr(composed, name), getattr(table, name), rtol=1e-9)


@pytest.mark.django_db
def test_every_catalog_model_decomposes_on_one_stage(catalog):
    from fleets.models import GpuSku, ModelArchitecture
    from fleets.selectors import gpu_spec, model_spec

    # given every catalog model on a B200, an L40S and an H100, bf16 TP1 and fp8 TP 2 and 8
    gpus = [gpu_spec(GpuSku.objects.get(slug=s), 5.0) for s in ("b200", "l40s", "h100_sxm")]
    decomposes: dict[str, set[bool]] = {}
    for row in ModelArchitecture.objects.order_by("slug"):
        m = model_spec(row)
        for gpu in gpus:
            for precision, tp in (("bf16", 1), ("fp8", 2), ("fp8", 8)):
                if m.num_attention_heads % tp:
                    continue
                c = CandidateArrays.build(m, gpu, precision, tp=tp).scalar_row()
                found = affine_step(c, 256) is not None
                decomposes.setdefault("moe" if m.num_experts else "dense", set()).add(found)
    # then every row's loop composes its step times, dense or MoE
    assert decomposes == {"dense": {True}, "moe": {True}}


def test_a_moe_row_past_the_weight_table_bound_keeps_the_step_time_table(monkeypatch):
    # given a bound on the weight-stream table below gpt-oss-120b's 482 keys x 257 decodes
    monkeypatch.setattr("sizing.step_affine.MAX_WEIGHT_CELLS", 482 * 257 - 1)
    c = CandidateArrays.build(GPT_OSS_120B, B200, "fp8", tp=2)
    # then its step times come from the table, a dense row's still composed
    assert affine_step(c.scalar_row(), 256) is None
    assert affine_step(CandidateArrays.build(LLAMA_8B, H100, "bf16").scalar_row(), 256)
