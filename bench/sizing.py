"""Throughput of the sizing core: operating points per second, vectorized vs a Python loop.

    python bench/sizing.py --points 2000000 [--json] [--loop-sample 2000]

Each point is a (model, GPU, precision, TP/PP/EP, batch, ISL, OSL) row taken through the whole
public core: memory fit, decode/mixed step time, closed-loop operating point, Little's law,
headroom (replicas for a peak rate) and cost ($/h, $/M tokens). ``scalar_point`` below is the
same chain written as a plain per-candidate Python function (no numpy); it is timed on a
sample, and tests/sizing/test_bench_reference.py checks it agrees with the vectorized core.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sizing import cost, headroom, littles  # noqa: E402
from sizing.candidates import CandidateArrays  # noqa: E402
from sizing.memory import fit_memory  # noqa: E402
from sizing.operating import closed_loop  # noqa: E402
from sizing.precision import PRECISIONS  # noqa: E402
from sizing.specs import (  # noqa: E402
    Calibration,
    EngineSettings,
    GpuSpec,
    ModelSpec,
)

MODELS = (
    ModelSpec("Llama 3.1 8B", 32, 4096, 32, 8, 128, 128256, 8.03e9, 8.03e9, 128256 * 4096),
    ModelSpec("Llama 3.1 70B", 80, 8192, 64, 8, 128, 128256, 70.55e9, 70.55e9, 128256 * 8192),
    ModelSpec(
        "Llama 3.1 405B", 126, 16384, 128, 8, 128, 128256, 405.85e9, 405.85e9, 128256 * 16384
    ),
    ModelSpec(
        "DeepSeek-V3",
        61,
        7168,
        128,
        128,
        192,
        129280,
        671.03e9,
        37.55e9,
        129280 * 7168,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        num_experts=256,
        experts_per_token=8,
        shared_experts=1,
        params_per_expert=3 * 7168 * 2048,
        num_moe_layers=58,
        max_context=163840,
    ),
    ModelSpec(
        "gpt-oss-120b",
        36,
        2880,
        64,
        8,
        64,
        201088,
        116.83e9,
        5.71e9,
        201088 * 2880,
        full_attention_layers=18,
        sliding_window_layers=18,
        sliding_window=128,
        num_experts=128,
        experts_per_token=4,
        params_per_expert=3 * 2880 * 2880,
        num_moe_layers=36,
    ),
    ModelSpec(
        "Mixtral 8x7B",
        32,
        4096,
        32,
        8,
        128,
        32000,
        46.7e9,
        12.88e9,
        32000 * 4096,
        num_experts=8,
        experts_per_token=2,
        params_per_expert=3 * 4096 * 14336,
        num_moe_layers=32,
        max_context=32768,
    ),
)
GPUS = (
    GpuSpec(
        "H100 SXM", 80, 3.35, {"bf16": 989.5, "fp8": 1979, "int8": 1979}, "nvlink", 900, 8, 8, 2.5
    ),
    GpuSpec(
        "H200 SXM", 141, 4.8, {"bf16": 989.5, "fp8": 1979, "int8": 1979}, "nvlink", 900, 8, 8, 3.5
    ),
    GpuSpec("B200", 180, 7.7, {"bf16": 2250, "fp8": 4500, "fp4": 9000}, "nvlink", 1800, 8, 8, 6.0),
    GpuSpec("L40S", 48, 0.864, {"bf16": 362.05, "fp8": 733}, "pcie", 64, 8, 8, 1.0),
)
WEIGHT_PRECISIONS = ("bf16", "fp8", "int4", "fp4")
TP_CHOICES = (1, 2, 4, 8)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LENGTHS = (128, 512, 1024, 2048, 4096, 8192)


def random_points(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A realistic mix of n operating points (index arrays into the tables above)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(0, len(WEIGHT_PRECISIONS), n)
    tp = np.asarray(TP_CHOICES)[rng.integers(0, len(TP_CHOICES), n)]
    model = rng.integers(0, len(MODELS), n)
    moe = np.array([m.num_experts > 0 for m in MODELS])[model]
    ep = np.where(moe & (rng.random(n) < 0.5), tp, 1)
    return {
        "model": model,
        "gpu": rng.integers(0, len(GPUS), n),
        "weight": np.array([PRECISIONS.index(p) for p in WEIGHT_PRECISIONS])[w],
        "tp": tp,
        "pp": np.where(rng.random(n) < 0.1, 2, 1),
        "ep": ep,
        "batch": np.asarray(BATCHES, dtype=np.float64)[rng.integers(0, len(BATCHES), n)],
        "isl": np.asarray(LENGTHS, dtype=np.float64)[rng.integers(0, len(LENGTHS), n)],
        "osl": np.asarray(LENGTHS, dtype=np.float64)[rng.integers(0, len(LENGTHS), n)],
        "peak_rps": rng.uniform(1.0, 200.0, n),
    }


def evaluate(pts: dict[str, np.ndarray], lo: int = 0, hi: int | None = None) -> dict:
    """The whole public core for rows [lo, hi): returns the headline arrays."""
    sl = slice(lo, hi)
    c = CandidateArrays.from_tables(
        MODELS,
        GPUS,
        pts["model"][sl],
        pts["gpu"][sl],
        pts["weight"][sl],
        -1,
        pts["tp"][sl],
        pts["pp"][sl],
        pts["ep"][sl],
        1,
    )
    isl, osl = pts["isl"][sl], pts["osl"][sl]
    fit = fit_memory(c, isl + osl)
    op = closed_loop(c, fit, isl, osl, pts["batch"][sl], envelope=False)
    w = littles.residence_s(op.ttft_s - op.queue_s, osl, op.tpot_s)  # in service, no queue
    x = littles.requests_per_s_per_replica(op.batch, w)
    with np.errstate(divide="ignore", invalid="ignore"):
        serving = headroom.serving_replicas(pts["peak_rps"][sl], x, 0.7, 1.0)
        replicas = headroom.total_replicas(serving, 1, 0)
        usd_h = cost.usd_per_hour(replicas, c.gpus_per_instance, c.usd_per_gpu_hour)
        util = headroom.utilization(pts["peak_rps"][sl] * 0.5, replicas, x)
        usd_mtok = cost.usd_per_mtok(usd_h, replicas * op.output_tokens_per_s, util)
    return {
        "fits": fit.fits,
        "tpot_s": op.tpot_s,
        "ttft_s": op.ttft_s,
        "output_tokens_per_s": op.output_tokens_per_s,
        "replicas": replicas,
        "usd_per_mtok": usd_mtok,
    }


# ---------------------------------------------------------------------------- scalar chain
def scalar_point(
    m: ModelSpec,
    g: GpuSpec,
    weight: str,
    tp: int,
    pp: int,
    ep: int,
    batch: float,
    isl: float,
    osl: float,
    eng: EngineSettings | None = None,
    cal: Calibration | None = None,
) -> dict:
    """The same chain for one point in plain Python (DP = 1). See the core modules for the
    formulas; this copy exists to time a per-candidate loop and to cross-check the arrays."""
    eng = eng or EngineSettings()
    cal = cal or Calibration()
    from sizing.precision import (
        attention_peak_flops,
        default_kv_precision,
        kv_bytes_per_element,
        peak_flops,
        weight_bytes_per_param,
    )

    b_w = weight_bytes_per_param(weight)
    kv = default_kv_precision(weight)
    b_kv = kv_bytes_per_element(kv)
    peak = peak_flops(g, weight)
    peak_attention = attention_peak_flops(g, kv)
    p_routed = m.num_experts * m.params_per_expert * m.num_moe_layers
    p_hp = m.embedding_params * (1 if m.tie_word_embeddings else 2)
    nonexp = (m.total_params - p_routed - p_hp) * b_w + p_hp * max(b_w, 2.0)
    shards = ep if ep > 1 else tp
    w_gpu = nonexp / (tp * pp) + p_routed * b_w / (shards * pp)
    mla = m.kv_lora_rank > 0
    per_layer_gpu = (
        (m.kv_lora_rank + m.qk_rope_head_dim)
        if mla
        else (2.0 * m.head_dim * max(m.num_kv_heads / tp, 1.0))
    )
    win = m.sliding_window

    def kv_seq(ctx: float) -> float:
        cw = min(ctx, win) if win > 0 else ctx
        elems = (m.n_full_layers * ctx + m.sliding_window_layers * cw) * per_layer_gpu
        return (elems + m.linear_attention_layers * m.linear_state_elements / tp) * b_kv / pp

    usable = g.memory_gb * 1e9 * eng.gpu_memory_utilization
    workspace = eng.max_num_batched_tokens * m.hidden_size * eng.workspace_bytes_per_token_hidden
    budget = usable - w_gpu - workspace - eng.runtime_overhead_gb * 1e9
    ctx_alloc = math.ceil((isl + osl) / eng.block_size) * eng.block_size
    kv_ok = m.num_kv_heads % tp == 0 if m.num_kv_heads >= tp else tp % m.num_kv_heads == 0
    layout_ok = (
        m.num_attention_heads % tp == 0
        and (mla or kv_ok)
        and tp <= g.scale_up_domain_gpus
        and (ep == 1 or (m.num_experts > 0 and m.num_experts % ep == 0 and ep <= tp))
        and pp <= m.num_layers
        and isl + osl <= m.max_context
        and peak > 0
    )
    max_conc = math.floor(max(budget, 0.0) / kv_seq(ctx_alloc)) if layout_ok else 0.0
    fits = layout_ok and w_gpu <= usable and budget > 0 and max_conc >= 1
    if not fits:
        return {"fits": False}
    # the batch limit holds sequences at their live context, prompt + half the output
    live_alloc = math.ceil((isl + 0.5 * osl) / eng.block_size) * eng.block_size
    max_live = max(math.floor(max(budget, 0.0) / kv_seq(live_alloc)), max_conc)
    b = min(batch, max_live, eng.max_num_seqs)
    link = g.scale_up_bw_gb_s * 1e9 / 2.0
    untied = 0.0 if m.tie_word_embeddings else m.embedding_params
    stream_nonexp = (nonexp - untied * max(b_w, 2.0)) / (tp * pp)
    matmul = m.active_params - untied

    def stage(dec: float, ctx: float, pre: float, prompt: float) -> float:
        tokens = dec + pre
        t_group = tokens
        distinct = 0.0
        if m.num_experts:
            distinct = m.num_experts * (1 - (1 - m.experts_per_token / m.num_experts) ** t_group)
        w_bytes = stream_nonexp + distinct * m.params_per_expert * b_w * m.num_moe_layers / (
            pp * shards
        )
        byts = w_bytes + dec * kv_seq(ctx)
        cw = min(ctx, win) if win > 0 else ctx
        a_dec = (
            2.0 * m.num_attention_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
            if mla
            else 4.0 * m.num_attention_heads * m.head_dim
        )
        p = max(prompt, 1.0)
        w = win if win > 0 else p
        mean_win = (0.5 * min(p, w) ** 2 + max(p - w, 0.0) * w) / p
        att_dec = m.n_full_layers * ctx + m.sliding_window_layers * cw
        att_pre = m.n_full_layers * 0.5 * p + m.sliding_window_layers * mean_win
        a_pre = 4.0 * m.num_attention_heads * m.head_dim
        gemm_dec, attn_dec = 2 * matmul * dec / (tp * pp), dec * a_dec * att_dec / (tp * pp)
        gemm_pre, attn_pre = 2 * matmul * pre / (tp * pp), pre * a_pre * att_pre / (tp * pp)
        bw = g.hbm_bandwidth_tb_s * 1e12 * cal.eta_mem
        kv_read = dec * kv_seq(ctx)
        gemm_s = max(
            (byts - kv_read) / bw,
            (gemm_dec / cal.eta_flop_decode + gemm_pre / cal.eta_flop_prefill) / peak,
        )
        attn_s = max(
            kv_read / bw,
            (attn_dec / cal.eta_flop_decode + attn_pre / cal.eta_flop_prefill) / peak_attention,
        )
        comm = 0.0
        if tp > 1:
            msg = tokens * m.hidden_size * 2.0
            one = 2 * (tp - 1) / tp * msg / (link * cal.link_efficiency) + cal.allreduce_latency_s
            comm += 2 * m.num_layers / pp * one
        if ep > 1:
            # each token once per other rank holding one of its experts; an 8-bit dispatch
            # for fp8/fp4 experts and a bf16 combine
            remote = (ep - 1) * (1 - (1 - 1 / ep) ** m.experts_per_token)
            b_dispatch = 1.0 if weight in ("fp8", "fp4") else 2.0
            vol = tokens / tp * remote * m.hidden_size * (b_dispatch + 2.0)
            comm += (
                m.num_moe_layers
                / pp
                * (vol / (link * cal.link_efficiency) + 2 * cal.allreduce_latency_s)
            )
        return gemm_s + attn_s + comm

    def step(dec: float, ctx: float, pre: float = 0.0, prompt: float = 0.0) -> float:
        hop = 0.0
        if pp > 1:
            hop_link = link if tp * pp <= g.scale_up_domain_gpus else g.scale_out_gb_s * 1e9
            hop = (dec + pre) / pp * m.hidden_size * 2.0 / (hop_link * cal.link_efficiency)
            hop += cal.allreduce_latency_s
        overhead = cal.step_overhead_s + cal.step_overhead_per_layer_s * m.num_layers
        return pp * stage(dec / pp, ctx, pre / pp, prompt) + (pp - 1) * hop + overhead

    budget_tok = eng.max_num_batched_tokens
    chunk = max(min(isl, max(budget_tok - b, 64.0)), 1.0)
    n_ch = math.ceil(isl / chunk)
    dec = b * osl / (n_ch + osl)
    pre = b * isl / (n_ch + osl)
    f = min(pre / chunk, 1.0)
    ctx = isl + 0.5 * osl
    t_pure = step(dec, ctx)
    t_mixed = step(dec, ctx, max(chunk, pre), isl)
    tpot = (1 - f) * t_pure + f * t_mixed
    group = max(min(b * isl, budget_tok - dec), chunk)
    t_group = step(dec, ctx, group, isl)
    fg = min(pre / group, 1.0)
    grouped = (1 - fg) * t_pure + fg * t_group
    blend = min(max(pre / chunk - 1.0, 0.0), 1.0)
    tpot = (1 - blend) * tpot + blend * max(grouped, tpot)
    rho = min(pre / max(budget_tok - dec, 1.0), 0.95)
    wave = min(max(b * isl / max(budget_tok - dec, chunk) - n_ch, 0) / 2, 10.0)
    wave *= cal.prefill_wave_fraction
    wait = max(rho * rho / (2 * (1 - rho)) * n_ch, wave)
    t_last = step(dec, ctx, max(group - (n_ch * chunk - isl), 1.0), isl)
    ttft = cal.frontend_latency_s + (n_ch - 1 + wait) * t_group + t_last
    x = b / (ttft + osl * tpot)
    if batch > b:
        ttft += (batch - b) / x
    return {"fits": True, "tpot_s": tpot, "ttft_s": ttft, "output_tokens_per_s": x * osl, "x": x}


def scalar_loop(pts: dict[str, np.ndarray], idx: np.ndarray) -> list[dict]:
    out = []
    for i in idx:
        r = scalar_point(
            MODELS[pts["model"][i]],
            GPUS[pts["gpu"][i]],
            PRECISIONS[pts["weight"][i]],
            int(pts["tp"][i]),
            int(pts["pp"][i]),
            int(pts["ep"][i]),
            float(pts["batch"][i]),
            float(pts["isl"][i]),
            float(pts["osl"][i]),
        )
        if r["fits"]:
            # Little, headroom and cost as the vectorized path does them.
            x = r["x"]
            replicas = max(math.ceil(pts["peak_rps"][i] / (x * 0.7) - 1e-9), 1) + 1
            gpus = int(pts["tp"][i] * pts["pp"][i])
            usd_h = replicas * gpus * GPUS[pts["gpu"][i]].usd_per_gpu_hour
            util = pts["peak_rps"][i] * 0.5 / (replicas * x)
            r["usd_per_mtok"] = usd_h / 3600 / (replicas * r["output_tokens_per_s"] * util) * 1e6
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--chunk", type=int, default=32768, help="rows per vectorized block")
    ap.add_argument("--loop-sample", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    pts = random_points(args.points)
    evaluate(pts, 0, min(args.points, 1000))  # warm up imports and tables
    t0 = time.perf_counter()
    fits = 0
    for lo in range(0, args.points, args.chunk):
        fits += int(evaluate(pts, lo, lo + args.chunk)["fits"].sum())
    vec_s = time.perf_counter() - t0

    sample = np.arange(min(args.loop_sample, args.points))
    t0 = time.perf_counter()
    scalar_loop(pts, sample)
    loop_s = time.perf_counter() - t0

    result = {
        "points": args.points,
        "fitting_points": fits,
        "vectorized_s": round(vec_s, 4),
        "vectorized_points_per_s": round(args.points / vec_s),
        "loop_points": len(sample),
        "loop_s": round(loop_s, 4),
        "loop_points_per_s": round(len(sample) / loop_s) if loop_s > 0 else None,
        "speedup": round((args.points / vec_s) / (len(sample) / loop_s), 1) if loop_s else None,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"vectorized: {args.points:,} points in {vec_s:.3f} s = "
            f"{result['vectorized_points_per_s']:,} points/s ({fits:,} fit)\n"
            f"python loop: {len(sample):,} points in {loop_s:.3f} s = "
            f"{result['loop_points_per_s']:,} points/s\n"
            f"speedup: {result['speedup']}x"
        )
    return result


if __name__ == "__main__":
    main()
