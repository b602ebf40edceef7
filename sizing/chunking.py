"""The chunked-prefill budget as a trade between two SLOs: long-prompt TTFT vs running TPOT.

With ``max_num_batched_tokens = b`` and ``D`` sequences decoding, a prompt of ``p`` tokens is
prefilled in chunks of ``chunk = min(p, max(b - D, 64))`` tokens riding on the decode steps:

- every running stream's token waits for that step: ``tpot_stall = step(D, chunk)``
  (steptime.decode_step with the chunk riding along);
- the prompt's first token comes after ``n = ceil(p / chunk)`` such steps, the last holding
  only the remainder: ``ttft_long = (n - 1) * step(D, chunk) + step(D, p - (n - 1) * chunk)``.

A big budget prefills a 20k-token prompt in one step that freezes every active stream for
most of a second (H100, Llama 3.1 70B fp8 TP4: ~0.5 s); a small one keeps TPOT flat and
multiplies the steps the prompt needs. The sweep over ``CHUNK_BUDGETS`` is that frontier; the
recommended budget is the largest whose stall still meets the TPOT SLO (the smallest TTFT
the TPOT SLO allows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sizing.candidates import CandidateArrays
from sizing.operating import prompt_chunk_tokens
from sizing.steptime import decode_step

#: Budgets swept (tokens); the engine's own value is added to them.
CHUNK_BUDGETS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True)
class Frontier:
    """Per budget (list, ascending) arrays over rows: ``chunk_tokens``, ``n_chunks``,
    ``stall_s`` (step time a running stream sees while the long prompt prefills),
    ``last_s`` (the remainder step), ``ttft_long_s``; ``budgets`` the swept values."""

    budgets: tuple[int, ...]
    chunk_tokens: list[np.ndarray]
    n_chunks: list[np.ndarray]
    stall_s: list[np.ndarray]
    last_s: list[np.ndarray]
    ttft_long_s: list[np.ndarray]

    def recommended(self, tpot_slo_s: float) -> np.ndarray:
        """Per row: the largest budget whose stall meets ``tpot_slo_s`` (else the smallest)."""
        stall = np.stack(self.stall_s)  # (budgets, rows)
        ok = stall <= tpot_slo_s
        budgets = np.asarray(self.budgets, dtype=np.float64)[:, None]
        best = np.max(np.where(ok, budgets, -np.inf), axis=0)
        return np.where(np.isfinite(best), best, float(self.budgets[0]))


def chunk_frontier(
    c: CandidateArrays,
    decode_seqs: np.ndarray,
    context_tokens: np.ndarray,
    long_prompt_tokens: float,
    budgets: tuple[int, ...] = CHUNK_BUDGETS,
) -> Frontier:
    """Sweep the chunk budget for every row (see the module docstring)."""
    n = len(c)
    dec = np.broadcast_to(np.asarray(decode_seqs, dtype=np.float64), (n,))
    ctx = np.broadcast_to(np.asarray(context_tokens, dtype=np.float64), (n,))
    p = float(max(long_prompt_tokens, 1.0))
    swept = tuple(sorted({*budgets, *(int(b) for b in np.unique(c.max_num_batched_tokens))}))
    chunks, counts, stalls, lasts, ttfts = [], [], [], [], []
    for b in swept:
        chunk = prompt_chunk_tokens(b, dec, p)
        n_ch = np.ceil(p / chunk)
        stall = decode_step(c, dec, ctx, chunk, p).step_s
        last = decode_step(c, dec, ctx, p - (n_ch - 1.0) * chunk, p).step_s
        chunks.append(chunk)
        counts.append(n_ch)
        stalls.append(stall)
        lasts.append(last)
        ttfts.append((n_ch - 1.0) * stall + last)
    return Frontier(swept, chunks, counts, stalls, lasts, ttfts)
