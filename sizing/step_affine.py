"""A candidate row's step time as a few numbers per grid cell, for the compiled event loop.

For a row on one pipeline stage, without drafting or adapters, ``steptime.decode_step`` of
``n`` decodes at context ``ctx`` carrying ``P`` prompt tokens of attention length ``p`` is

``step_s = max(GM, GD n + GP P) + max(n AM(ctx), n AFd(ctx) + P AFp(p)) + C0 + C1 (n + P)
+ O0 + O1 n + [P > 0] PO``

(the GEMMs' roofline, attention's own roofline, the TP all-reduces and EP all-to-alls, the
host cost): every term is a constant, linear in ``n`` or ``P``, or a per-sequence /
per-token cost that depends on the context (``AM``, ``AFd``) or the attention length
(``AFp``) alone; on a MoE row the weights' stream ``GM`` grows with the tokens the step
routes (the experts they hit), so it is a table by prompt-token cell and decode count. This
module reads those numbers **from the core itself** (``decode_step`` at one decode, one
prompt token, every context cell, every token count: no formula is typed twice), and the
compiled loop (``sim_kernel.affine_step_s``) composes them per step instead of returning to
Python for a step-time row, which was most of a simulation's time (16,943 core calls of
8,192 step times each on the typical scenario).

The shape above is a claim about the core, so each row's decomposition is checked against
``decode_step`` on ``CHECK_CELLS`` random cells before the loop uses it; a row whose core
does not decompose so (pipeline stages, drafting, adapters: any term that is not of that
shape) gets ``None`` and keeps the step-time table (sim_kernel's ``NEED_ROW`` path), as does
a cell beyond the arrays (a context past 2^24 tokens, a MoE step past its token budget).
The values agree with the table's to rounding (``CHECK_RTOL``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.sim_kernel import (
    A_C0,
    A_C1,
    A_GD,
    A_GM,
    A_GP,
    A_O0,
    A_O1,
    A_PO,
    AFFINE_SCALARS,
    EXACT_BELOW,
    GRID_PER_OCTAVE,
    PREFILL_GRID_PER_OCTAVE,
    affine_step_cells,
    grid_key,
)
from sizing.speculative import verify_tokens_per_sequence
from sizing.steptime import adds_communication, decode_step, has_experts, weight_stream_s

#: Largest context and prompt length the decomposition covers (tokens): 2^24, 16.8M; a cell
#: beyond it takes the step-time table.
MAX_TOKENS_LOG2 = 24
#: Random cells each row's decomposition is checked on, and the agreement asked of it.
CHECK_CELLS = 512
CHECK_RTOL = 1e-9
#: Most cells of a MoE row's weight-stream table (prompt-token keys x decodes; 32 MB): a
#: larger one (a huge token budget and batch) is left to the step-time table.
MAX_WEIGHT_CELLS = 1 << 22


@dataclass(frozen=True)
class AffineStep:
    """One row's step time by grid cell (see the module docstring), in the compiled loop's
    arrays. ``scalars``: ``GM, GD, GP, C0, C1, O0, O1, PO`` (s, s per decode or prompt token);
    ``per_context[k]``: ``AM, AFd`` at context key ``k`` (s per decode); ``per_prompt[k]``:
    ``AFp`` at attention-length key ``k`` (s per prompt token); ``prompt_values[k]``: the
    prompt-token count key ``k`` stands for."""

    scalars: np.ndarray
    per_context: np.ndarray
    per_prompt: np.ndarray
    prompt_values: np.ndarray
    #: a MoE row's weight stream (s) by prompt-token key x decodes (its routed experts grow
    #: with the tokens); empty (0 x 0) for a dense row, whose stream is ``scalars[A_GM]``
    weights: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return self.scalars, self.per_context, self.per_prompt, self.prompt_values, self.weights

    def step_s(self, n: np.ndarray, ctx_k: np.ndarray, pre_k: np.ndarray, p_k: np.ndarray):
        """The composed step times of many cells (s): the compiled loop's own function."""
        return affine_step_cells(
            *self.arrays(),
            np.asarray(n, dtype=np.int64),
            *(np.asarray(k, dtype=np.int64) for k in (ctx_k, pre_k, p_k)),
        )


@functools.cache
def grid_values(per_octave: int) -> np.ndarray:
    """The value every key stands for, keys 0..the one of 2^MAX_TOKENS_LOG2: the step-time
    table's own ``simulate.grid_value`` (imported here: simulate builds on this module)."""
    from sizing.simulate import grid_value

    top = EXACT_BELOW + 1 + MAX_TOKENS_LOG2 * per_octave
    return np.array([grid_value(k, per_octave) for k in range(top + 1)])


def affine_step(c: CandidateArrays, max_decodes: int, seed: int = 0) -> AffineStep | None:
    """The decomposition of one row's ``decode_step`` (``c``: a one-row candidate), or None
    where the core is not of that shape for this row (checked: see the module docstring)."""
    ctx, prm = grid_values(GRID_PER_OCTAVE), grid_values(PREFILL_GRID_PER_OCTAVE)
    one = np.ones(1)
    zero = np.zeros(1)
    idle = decode_step(c, zero, zero)  # nothing to run: the weights' stream, fixed host cost
    decode = decode_step(c, one, zero)  # one decode at no context: its GEMMs and host cost
    prompt = decode_step(c, zero, zero, one, one)  # one prompt token
    per_context = decode_step(c, one, ctx)  # one decode at every context cell
    per_prompt = decode_step(c, zero, zero, one, prm)  # one prompt token at every length
    scalars = np.zeros(AFFINE_SCALARS)
    scalars[A_GM] = _first(idle.stage.mem_s)
    scalars[A_GD] = _first(decode.stage.flop_s)  # attention at no context is 0
    scalars[A_GP] = _first(prompt.stage.flop_s - prompt.stage.attention_flop_s)
    if adds_communication(c):  # else the core adds no all-reduce (all 0)
        scalars[A_C0] = _first(idle.stage.comm_s)
        scalars[A_C1] = _first(decode.stage.comm_s) - scalars[A_C0]  # per token
    scalars[A_O0] = _first(idle.overhead_s)
    scalars[A_O1] = _first(decode.overhead_s) - scalars[A_O0]
    scalars[A_PO] = _first(prompt.overhead_s) - scalars[A_O0]
    weights = _routed_weights_s(c, max_decodes, prm)
    if weights is None:
        return None
    per_decode = [per_context.stage.attention_mem_s, per_context.stage.attention_flop_s]
    affine = AffineStep(
        scalars=scalars,
        per_context=np.ascontiguousarray(np.stack([_full(x, ctx) for x in per_decode], axis=1)),
        per_prompt=_full(per_prompt.stage.attention_flop_s, prm),
        prompt_values=prm,
        weights=weights,
    )
    return affine if _agrees(c, affine, max_decodes, seed) else None


def _routed_weights_s(c: CandidateArrays, max_decodes: int, prm: np.ndarray) -> np.ndarray | None:
    """A MoE row's weight stream (s) at every prompt-token key up to its token budget x
    0..``max_decodes`` decodes: ``stage_cost``'s GEMM memory time (``steptime.weight_stream_s``:
    the non-expert weights and the experts the step's tokens route to). 0 x 0 for a dense
    row; None past ``MAX_WEIGHT_CELLS``. A step beyond the budget (a whole prompt without
    chunking) takes the table."""
    if not has_experts(c):
        return np.zeros((0, 0))
    budget = float(np.asarray(c.max_num_batched_tokens).reshape(-1)[0])
    keys = min(grid_key(budget, PREFILL_GRID_PER_OCTAVE) + 1, prm.size)
    if keys * (max_decodes + 1) > MAX_WEIGHT_CELLS:
        return None
    # the tokens a step routes: its decodes' verified tokens and its prompt tokens
    decodes = np.arange(max_decodes + 1, dtype=np.float64)[None, :]
    tokens = decodes * verify_tokens_per_sequence(c) + prm[:keys, None]
    return np.ascontiguousarray(weight_stream_s(c, tokens), dtype=np.float64)


def _first(x) -> float:
    return float(np.asarray(x, dtype=np.float64).reshape(-1)[0])


def _full(x, like: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dtype=np.float64), like.shape).copy()


def _agrees(c: CandidateArrays, affine: AffineStep, max_decodes: int, seed: int) -> bool:
    """The composed step time equals ``decode_step`` on random cells, decode-only and
    mixed, up to rounding (cells the decomposition leaves to the table aside)."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, max(max_decodes, 1) + 1, CHECK_CELLS).astype(np.float64)
    n[: CHECK_CELLS // 4] = np.arange(CHECK_CELLS // 4) % (max(max_decodes, 1) + 1)
    ctx, prm = grid_values(GRID_PER_OCTAVE), grid_values(PREFILL_GRID_PER_OCTAVE)
    prompt_keys = affine.weights.shape[0] or len(prm)  # a MoE row covers its token budget
    ctx_k = rng.integers(0, len(ctx), CHECK_CELLS)
    pre_k = rng.integers(0, prompt_keys, CHECK_CELLS)
    pre_k[::2] = 0  # decode-only steps
    p_k = rng.integers(1, len(prm), CHECK_CELLS)
    core = decode_step(c, n, ctx[ctx_k], prm[pre_k], prm[p_k]).step_s
    composed = affine.step_s(n, ctx_k, pre_k, p_k)
    core = np.broadcast_to(core, composed.shape)
    covered = np.isfinite(composed)
    return bool(covered.all() and np.allclose(composed, core, rtol=CHECK_RTOL, atol=0.0))
