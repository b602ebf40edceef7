"""Regenerate docs/disaggregated.md: the disaggregated model's error, fitted and out of sample.

Usage: ``.venv/bin/python scripts/disagg_report.py [--write-fixture]``

Reads the disaggregated rows of fleets/catalog/measured-concurrency.csv (InferenceX
multi-node Dynamo / MoRI sweeps whose notes give the prefill and decode pools), predicts their
median TTFT and TPOT with ``sizing.disagg.predict_disagg`` on top of each row's aggregated
calibration profile, fits the disaggregated constants per engine family
(``sizing.disagg.DISAGG_CONSTANTS``) and cross-validates holding one *sweep* out at a time
(GPU x engine x precision x ISL/OSL: the configuration the fit never saw). ``--write-fixture``
rewrites fleets/catalog/disagg_calibration.json (the constants fitted on all points), which
``predict`` loads, and then scores ``predict`` itself on the same rows with them (the door
section: launch recipes and all, as a user's CSV reaches it). Uses the default database
(catalog loaded on demand).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "disaggregated.md"
FIXTURE = ROOT / "fleets" / "catalog" / "disagg_calibration.json"
TARGETS_PCT = {"tpot_ms": 20.0, "ttft_ms": 35.0}
RAW_METRICS = ("ttft_ms_median", "tpot_ms_median", "output_tok_s_per_gpu")


def _expert_parallel(pool: dict, num_experts: int) -> tuple[dict, bool]:
    """EP as the sizing core can hold it: an EP that does not divide the routed experts (EP48
    over DeepSeek's 256: EPLB adds redundant experts) becomes the largest divisor below it."""
    ep = pool["ep"]
    if num_experts <= 0 or num_experts % ep == 0:
        return pool, False
    divisor = max(d for d in range(1, ep + 1) if num_experts % d == 0)
    return {**pool, "ep": divisor}, True


def _setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from fleets.calibration import load_shipped_profiles
    from fleets.models import GpuSku

    call_command("migrate", verbosity=0)
    if not GpuSku.objects.filter(slug="gb300").exists():
        call_command("load_catalog", verbosity=0)  # the shipped profiles among the rest
    else:
        # The fit scales the shipped aggregated profiles: read them from the fixture, not
        # whatever an earlier load left in the database (a refit rewrites the fixture only)
        load_shipped_profiles()


def disagg_points(row_ids: set[str] | None = None):
    """(points, left out as (row id, reason)) from the shipped disaggregated rows (those of
    ``row_ids`` only, when given)."""
    from fleets.calibration import CatalogSpecs, profile_selector
    from fleets.measurements import (
        disaggregated_layout,
        read_shipped_measurements,
        recipe_decode_batches,
        recipe_prefill_budgets,
        recipe_value,
    )
    from sizing.calibrate import DRAWN_LENGTH_FACTOR, engine_release
    from sizing.disagg import DISAGG_SCORED_METRICS, DisaggPoint

    rows, _ = read_shipped_measurements()
    batches, budgets = recipe_decode_batches(), recipe_prefill_budgets()
    specs = CatalogSpecs()
    select = profile_selector()
    points, left_out = [], []
    adjusted: set[str] = set()
    for row in rows:
        if not row.disaggregated or row.metric not in DISAGG_SCORED_METRICS:
            continue
        if row_ids is not None and row.row_id not in row_ids:
            continue
        if row.raw_metric not in RAW_METRICS:
            reason = "ITL stands in for TPOT (TRT-LLM streams chunks)" if "itl" in \
                row.raw_metric else "mean statistic (the median row is used)"  # fmt: skip
            left_out.append((row.row_id, reason))
            continue
        if row.speculative:
            left_out.append((row.row_id, "MTP speculative decoding (acceptance not published)"))
            continue
        layout = disaggregated_layout(row.notes)
        if layout is None:
            left_out.append((row.row_id, "pool layout not given (blog table)"))
            continue
        try:
            _, model = specs.model(row.model)
            gpu_slug, gpu = specs.gpu(row.gpu)
        except LookupError as error:
            left_out.append((row.row_id, f"not in the catalog: {error}"))
            continue
        prefill, p_moved = _expert_parallel(layout["prefill"], model.num_experts)
        decode, d_moved = _expert_parallel(layout["decode"], model.num_experts)
        layout = {"prefill": prefill, "decode": decode}
        if p_moved or d_moved:
            adjusted.add(row.row_id)
        release = engine_release(row.engine_family, row.engine, row.source_version)
        calibration, _ = select(gpu_slug, row.engine_family, row.weight_precision, release)
        group = f"{gpu_slug} {row.engine_family} {row.weight_precision} {row.isl}/{row.osl}"
        recipe = (row.engine_family, gpu_slug, row.weight_precision, row.isl, row.osl, layout,
                  int(row.concurrency))  # fmt: skip
        points.append(
            DisaggPoint(
                model=model,
                gpu=gpu,
                prefill=layout["prefill"],
                decode=layout["decode"],
                weight_precision=row.weight_precision,
                kv_precision=row.kv_precision,
                isl=row.isl * DRAWN_LENGTH_FACTOR,
                osl=row.osl * DRAWN_LENGTH_FACTOR,
                concurrency=float(row.concurrency),
                engine=row.engine_family,
                metric=row.metric,
                value=row.value,
                calibration=calibration,
                group=group,
                row_id=row.row_id,
                decode_max_batch=recipe_value(batches, *recipe),
                prefill_budget_tokens=recipe_value(budgets, *recipe),
            )
        )
    disagg_points.adjusted = adjusted
    suspect = _falling_ttft(points)
    left_out += [(p.row_id, FALLING_TTFT) for p in points if p.row_id in suspect]
    return _with_wave_factors([p for p in points if p.row_id not in suspect]), left_out


def _with_wave_factors(points):
    """The points with their closed-loop wave factor (``sizing.disagg_sim``), simulated at
    the physics constants (a TTFT and a TPOT point of one condition share its replays)."""
    import dataclasses

    from sizing.disagg_sim import point_wave_factors

    return [dataclasses.replace(p, prefill_wait_factor=float(f))
            for p, f in zip(points, point_wave_factors(points), strict=True)]  # fmt: skip


def _wave_lines(points) -> list[str]:
    """What the wave factors of the points are (``sizing.disagg_sim.closed_loop_wait_factors``)."""
    factors = np.array([p.prefill_wait_factor for p in points if p.metric == "ttft_ms"])
    moved = factors[factors != 1.0]
    if not len(moved):
        return ["Wave factors: none simulated."]
    p10, p50, p90 = np.percentile(moved, [10, 50, 90])
    return [
        "Wave factor (`sizing.disagg_sim.closed_loop_wait_factors`): each measured condition's",
        "benchmark replayed through the two-pool simulator at the unfitted constants (clients",
        "released together, ten requests each, lengths drawn in [0.8, 1] x nominal); the",
        "median wait it gives over the M/D/1 mean scales the wait before the fit. Of the",
        f"{len(factors)} TTFT points, {len(moved)} were simulated (the others wait for a decode",
        "slot or do not fit: factor 1): factor p10 / median / p90 = "
        f"{p10:.2f} / {p50:.2f} / {p90:.2f}, above 1 (waves) for {int(np.sum(moved > 1))}.",
    ]


FALLING_TTFT = (
    "TTFT more than 2x the same layout's at a higher concurrency in the same sweep (queueing "
    "only adds with clients: a warm-up or measurement artefact)"
)


def _falling_ttft(points) -> set[str]:
    """Row ids of TTFT points that no queueing model can fit: in one sweep and one pool
    layout, a point at lower concurrency measuring more than twice a point at higher
    concurrency (the rule is stated before fitting and applies to every engine alike)."""
    ttft = [p for p in points if p.metric == "ttft_ms"]
    out = set()
    for p in ttft:
        same = [o for o in ttft if o.group == p.group and o.prefill == p.prefill
                and o.decode == p.decode and o.concurrency > p.concurrency]  # fmt: skip
        if any(p.value > 2.0 * o.value for o in same):
            out.add(p.row_id)
    return out


#: the measured row's columns a ``predict`` CSV takes (then each pool's ``POOL_FIELDS``)
DOOR_COLUMNS = ("model", "gpu", "num_gpus", "tp", "pp", "ep", "weight_precision", "kv_precision",
                "isl", "osl", "concurrency", "engine", "engine_version", "mode")  # fmt: skip


def door_predictions(points, launch: bool = True) -> np.ndarray:
    """Each point's metric as ``predict`` answers its measured row: the contract's columns,
    lengths at their drawn mean to the token, the run's engine release and the shipped
    constants; ``launch`` False leaves the launch recipes out (a deployment none describes).
    Output tokens/s per *decode* GPU as the report scores it."""
    import csv
    import io

    from fleets.measurements import read_shipped_measurements
    from planner.management.commands.predict import catalog_resolver, launch_for, profile_for
    from planner.predict_io import POOL_FIELDS, predict_csv
    from sizing.calibrate import DRAWN_LENGTH_FACTOR, engine_release

    rows = {r.row_id: r for r in read_shipped_measurements()[0]}
    source = io.StringIO()
    writer = csv.writer(source)
    pool_names = ("prefill", "decode")
    writer.writerow([*DOOR_COLUMNS, *(f"{n}_{k}" for n in pool_names for k in POOL_FIELDS)])
    for p in points:
        r = rows[p.row_id]
        pools = [getattr(p, n).get(k, 1) for n in pool_names for k in POOL_FIELDS]
        writer.writerow([r.model, p.gpu.name, "", "", "", "", p.weight_precision, p.kv_precision,
                         round(DRAWN_LENGTH_FACTOR * r.isl), round(DRAWN_LENGTH_FACTOR * r.osl),
                         int(p.concurrency), p.engine,
                         engine_release(r.engine_family, r.engine, r.source_version), "disagg",
                         *pools])  # fmt: skip
    sink = io.StringIO()
    predict_csv(io.StringIO(source.getvalue()), sink, catalog_resolver(), profile_for(),
                launch_for=launch_for() if launch else (lambda row: None))  # fmt: skip
    out = []
    for p, row in zip(points, csv.DictReader(io.StringIO(sink.getvalue())), strict=True):
        if row["fits"] != "true":
            out.append(math.nan)
        elif p.metric == "output_tok_s_per_gpu":
            out.append(float(row["total_output_tok_s"]) / float(row["decode_gpus"]))
        else:
            out.append(float(row[p.metric]))
    return np.array(out)


def door_lines(points, report: np.ndarray) -> list[str]:
    """What ``predict`` answers for the measured rows, against the report's own figures."""
    from sizing.disagg import DISAGG_SCORED_METRICS

    door, bare = door_predictions(points), door_predictions(points, launch=False)

    def medians(pred):
        ape = _ape(pred, points)
        return " / ".join(f"{100 * np.nanmedian([a for a, p in zip(ape, points, strict=True)
                                                 if p.metric == m]):.1f}"
                          for m in DISAGG_SCORED_METRICS)  # fmt: skip

    both = np.isfinite(door) & np.isfinite(report)
    gap = np.abs(door[both] / report[both] - 1.0) * 100
    return [
        "## At the door: `predict` on the same rows",
        "",
        "Every measured row above written as a `predict` CSV (the contract's columns, lengths",
        "at their drawn mean to the token, the engine release the run used) and predicted with",
        "the shipped constants (`fleets/catalog/disagg_calibration.json`), in sample. A row run",
        "as a published launch recipe takes its decode max batch and prefill budget, as the",
        "report's points do (`fleets.measurements.launch_settings`).",
        "",
        "| door | TTFT / TPOT / tok/s per decode GPU, median APE % |",
        "| --- | --- |",
        f"| `predict` | {medians(door)} |",
        f"| `predict` without the launch recipes (a deployment none describes) | {medians(bare)} |",
        "",
        f"`predict` against this report's in-sample prediction, row by row: median "
        f"{np.median(gap):.2f} %, at most {np.max(gap):.1f} % (whole-token lengths against 0.9 x"
        f" nominal), over {int(both.sum())} rows.",
    ]


def _ape(predicted: np.ndarray, points) -> np.ndarray:
    measured = np.array([p.value for p in points])
    return np.abs(predicted - measured) / measured


def _median_ratio(predicted: np.ndarray, points, metric: str) -> float:
    """Median of predicted / measured over ``metric``'s points that fit (the sign of the bias)."""
    ratio = np.array([v / p.value for v, p in zip(predicted, points, strict=True)
                      if p.metric == metric and np.isfinite(v)])  # fmt: skip
    return float(np.median(ratio)) if len(ratio) else math.nan


def _summary(ape: np.ndarray, points, key) -> dict:
    table = defaultdict(list)
    for a, p in zip(ape, points, strict=True):
        table[key(p)].append(a)
    out = {}
    for k, values in sorted(table.items()):
        v = np.array(values)
        finite = v[np.isfinite(v)]
        out[k] = {
            "n": len(v),
            "misfit": int(np.sum(~np.isfinite(v))),
            "median_ape_pct": float(np.median(finite) * 100) if len(finite) else math.nan,
        }
    return out


#: Client buckets of the TTFT bias table: a lone prompt, light and moderate closed loops,
#: and the saturated runs whose TTFT is the closed loop's queue
CLIENT_BUCKETS = ((1, 5), (6, 15), (16, 64), (65, 512), (513, math.inf))


def ttft_bias_by_clients(predicted: np.ndarray, points) -> list[str]:
    """TTFT's median predicted / measured and median APE per engine build and client bucket:
    where the held-out error leans one way, the term that grows with the clients is off."""
    from sizing.disagg import point_build

    lines = [
        "| engine build | clients | points | median predicted / measured | median APE % |",
        "| --- | --- | --- | --- | --- |",
    ]
    for build in sorted({point_build(p) for p in points}):
        for low, high in CLIENT_BUCKETS:
            pairs = [(v, p.value) for v, p in zip(predicted, points, strict=True)
                     if p.metric == "ttft_ms" and point_build(p) == build
                     and low <= p.concurrency <= high and np.isfinite(v)]  # fmt: skip
            if not pairs:
                continue
            ratio = np.array([v / m for v, m in pairs])
            label = f"{low}-{high:g}" if math.isfinite(high) else f">= {low}"
            lines.append(
                f"| {build} | {label} | {len(pairs)} | x{np.median(ratio):.2f} | "
                f"{np.median(np.abs(ratio - 1.0)) * 100:.1f} |"
            )
    return lines


def at_bounds(fits: dict, rel: float = 0.01) -> list[str]:
    """Each fitted constant within ``rel`` (in log) of a bound of ``DISAGG_BOUNDS``: the data
    push it past what the bound allows, so the term it scales is misshapen there."""
    from sizing.disagg import DISAGG_BOUNDS, DISAGG_CONSTANTS

    out = []
    for key, fit in fits.items():
        for name in DISAGG_CONSTANTS:
            lo, hi = DISAGG_BOUNDS[name]
            value = fit.values[name]
            side = "upper" if value >= hi * math.exp(-rel) else ""
            side = "lower" if value <= lo * math.exp(rel) else side
            if fit.points and side:
                out.append(f"{key}: {name} = {value:.3g} at its {side} bound ({lo:g}, {hi:g})")
    return out


def _cell(entry: dict | None) -> str:
    if not entry or math.isnan(entry["median_ape_pct"]):
        return "-"
    miss = f", {entry['misfit']} misfit" if entry["misfit"] else ""
    return f"{entry['median_ape_pct']:.1f} (n={entry['n']}{miss})"


EXAMPLE = {
    "model": "Llama-3.1-70B",
    "gpu": "H100 SXM",
    "usd_per_gpu_hour": 2.50,
    "layout": {"tp": 4, "pp": 1, "ep": 1, "dp": 1},
    "isl": 4096,
    "osl": 256,
    "rate_rps": 20.0,
    "ttft_slo_s": 1.0,
    "tpot_slo_s": 0.030,
}


def worked_example() -> list[str]:
    """The break-even of one deployment choice, computed by ``sizing.disagg.breakeven``."""
    from fleets.calibration import CatalogSpecs
    from sizing.disagg import breakeven, size_pools

    e = EXAMPLE
    specs = CatalogSpecs()
    _, model = specs.model(e["model"])
    _, gpu = specs.gpu(e["gpu"])
    lay = e["layout"]
    args = (model, gpu, lay, lay, lay, "bf16", None)
    slo = (e["ttft_slo_s"], e["tpot_slo_s"])
    price = {"usd_per_gpu_hour": e["usd_per_gpu_hour"]}
    sized = size_pools(*args, e["isl"], e["osl"], e["rate_rps"], *slo, **price)
    bev = breakeven(*args, e["isl"], e["osl"], e["rate_rps"], *slo, **price)
    i = 0
    ratios = ", ".join(f"{r:g}: {v:+.0f}" for r, v in
                       zip(bev.ratio_grid, bev.ratio_saving_usd_per_hour, strict=True))  # fmt: skip
    rates = ", ".join(f"{r:g}: {v:+.0f}" for r, v in
                      zip(bev.rate_grid, bev.rate_saving_usd_per_hour, strict=True))  # fmt: skip
    return [
        "## Worked break-even (physics-default constants, reproducible by hand)",
        "",
        f"{model.name} bf16 on {gpu.name} at ${e['usd_per_gpu_hour']:.2f}/GPU-hour, TP4 workers "
        f"in both pools and TP4 aggregated replicas; {e['rate_rps']:g} req/s of "
        f"{e['isl']:,} / {e['osl']} tokens; SLOs TTFT {e['ttft_slo_s'] * 1e3:.0f} ms, TPOT "
        f"{e['tpot_slo_s'] * 1e3:.0f} ms (means); target utilization 1.",
        "",
        f"- KV per request {sized.transfer.request_kv_bytes[i] / 1e9:.3f} GB; "
        f"{sized.transfer.wire_bytes_per_gpu[i] / 1e6:.1f} MB per GPU over "
        f"{sized.transfer.link[i]} -> {sized.kv_transfer_ms[i]:.2f} ms.",
        f"- Decode: batch {sized.decode_batch_per_rank[i]:.0f} per worker at TPOT "
        f"{sized.decode_tpot_s[i] * 1e3:.1f} ms, {sized.decode_rps_per_rank[i]:.2f} req/s per "
        f"worker -> {sized.decode_workers[i]:.0f} decode workers.",
        f"- Prefill: TTFT budget {sized.ttft_budget_steps[i]:.1f} full steps of waiting -> "
        f"load <= {sized.prefill_rho_max[i]:.2f} -> {sized.prefill_workers[i]:.0f} prefill "
        f"workers; P:D = {sized.prefill_gpus[i]:.0f}:{sized.decode_gpus[i]:.0f} GPUs.",
        f"- Disaggregated {sized.disagg_gpus[i]:.0f} GPUs (${sized.disagg_usd_per_hour[i]:.0f}/h) "
        f"vs aggregated {sized.agg_replicas[i]:.0f} replicas = {sized.agg_gpus[i]:.0f} GPUs "
        f"(${sized.agg_usd_per_hour[i]:.0f}/h, {sized.agg_rps_per_replica[i]:.2f} req/s per "
        f"replica at the SLOs): saving ${sized.saving_usd_per_hour[i]:.0f}/h.",
        f"- Saving ($/h) by prompt/output ratio (osl {e['osl']}): {ratios} -> pays from "
        f"isl/osl = {bev.prompt_ratio:g}.",
        f"- Saving ($/h) by rate (req/s): {rates} -> pays from {bev.rate_rps:g} req/s.",
        f"- Transfer bandwidth below which it never pays here: {bev.min_link_gb_s:.2f} GB/s "
        "per GPU one way (the transfer eats the TTFT budget).",
        "",
    ]


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write-fixture", action="store_true")
    parser.add_argument("--max-nfev", type=int, default=40)
    args = parser.parse_args(argv)
    _setup_django()
    from fleets.calibration import disagg_fits
    from sizing.disagg import (
        DISAGG_CONSTANTS,
        DISAGG_SCORED_METRICS,
        cross_validate,
        fit_all,
        point_build,
        predict_points,
    )

    started = time.time()
    points, left_out = disagg_points()
    engines = sorted({p.engine for p in points})
    builds = sorted({point_build(p) for p in points})
    physics = predict_points(points)
    fits = fit_all(points, max_nfev=args.max_nfev)
    in_sample = predict_points(points, fits)
    held_out = cross_validate(points, max_nfev=args.max_nfev)

    def by_metric(pred):
        return _summary(_ape(pred, points), points, lambda p: p.metric)

    def by_sweep(pred):
        return _summary(_ape(pred, points), points, lambda p: (p.metric, p.group))

    tables = {name: by_metric(pred) for name, pred in
              (("profile", physics), ("fitted", in_sample), ("held_out", held_out))}  # fmt: skip
    sweeps_out, sweeps_in = by_sweep(held_out), by_sweep(in_sample)
    reasons = defaultdict(int)
    for _, reason in left_out:
        reasons[reason] += 1

    lines = [
        "# Disaggregated prefill/decode: error of the model",
        "",
        "Generated by `scripts/disagg_report.py` (do not edit by hand). The model is",
        "`sizing/disagg.py`: a prefill-only pool (M/D/1 wait in full prefill steps, times the",
        "closed loop's wave factor, + the prompt's own prefill), the KV transfer (NVLink inside",
        "a scale-up domain, else RDMA at the NIC's bandwidth x 0.71), a decode-only pool",
        "(decode steps at the batch the closed loop settles on), and the closed loop against",
        "the whole deployment.",
        "",
        *_wave_lines(points),
        "",
        "Data: the disaggregated rows of `fleets/catalog/measured-concurrency.csv` (InferenceX",
        "multi-node sweeps, NVIDIA Dynamo + TRT-LLM / SGLang and AMD SGLang + MoRI, DeepSeek-R1",
        "FP4/FP8) whose notes give the pools' workers, TP/EP and attention-DP. Median TTFT and",
        "median TPOT (fitted), and output tokens/s per decode GPU (the published convention;",
        "scored, not fitted); lengths are 0.9 x nominal (drawn in [0.8, 1] x nominal).",
        "",
        f"Points: {len(points)} ({sum(p.metric == 'ttft_ms' for p in points)} TTFT, "
        f"{sum(p.metric == 'tpot_ms' for p in points)} TPOT, "
        f"{sum(p.metric == 'output_tok_s_per_gpu' for p in points)} output tokens/s per decode "
        "GPU, scored and not fitted) in "
        f"{len({p.group for p in points})} sweeps; engines {', '.join(engines)} (builds "
        f"{', '.join(builds)}).",
        "",
        "Left out:",
        "",
        *[f"- {reason}: {n} rows" for reason, n in sorted(reasons.items())],
        "",
        "## Median APE (%)",
        "",
        "| metric | target | aggregated profile, unfitted | fitted (in sample) | "
        "held out (one sweep at a time) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for metric in DISAGG_SCORED_METRICS:
        target = f"<= {TARGETS_PCT[metric]:.0f}" if metric in TARGETS_PCT else "- (not fitted)"
        lines.append(
            f"| {metric} | {target} | {_cell(tables['profile'].get(metric))} "
            f"| {_cell(tables['fitted'].get(metric))} | {_cell(tables['held_out'].get(metric))} |"
        )
    lines += [
        "",
        "Median predicted / measured, held out (above 1: predicted too slow for latencies, too",
        "fast for throughput): "
        + ", ".join(f"{m} x{_median_ratio(held_out, points, m):.2f}" for m in DISAGG_SCORED_METRICS)
        + ".",
        "",
        "Held out: each sweep (GPU x engine x precision x ISL/OSL) is predicted by constants",
        "fitted on every other sweep (its engine build's: the family's CUDA build on all",
        "NVIDIA GPUs, its ROCm build on AMD's); the aggregated profile under it is the row's",
        "own (fitted on aggregated rows only, never on these).",
        "",
        "## TTFT by clients, held out",
        "",
        "Where the TTFT error leans one way: per engine build and closed-loop clients, the median",
        "predicted / measured (above 1: predicted too slow) and the median APE.",
        "",
        *ttft_bias_by_clients(held_out, points),
        "",
        "## Fitted constants (all points)",
        "",
        "Per engine build (`sizing.disagg.engine_build`): SGLang's CUDA build on the NVIDIA",
        "GPUs' points and its ROCm build (AMD SGLang + MoRI) on the MI355X's; no GPU x engine",
        "fits of their own (held out they did worse, see README).",
        "",
        "| fit | points | " + " | ".join(DISAGG_CONSTANTS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in DISAGG_CONSTANTS) + " |",
    ]
    for e, fit in fits.items():
        cells = " | ".join(f"{fit.values[k]:.3g}" for k in DISAGG_CONSTANTS)
        lines.append(f"| {e} | {fit.points} | {cells} |")
    bounded = at_bounds(fits)
    lines += [
        "",
        "Constants at a bound (the data push them past it, so the term each scales is",
        "misshapen for that fit; reported, not hidden):",
        "",
        *([f"- {b}" for b in bounded] or ["- none"]),
    ]
    lines += [
        "",
        "## Per sweep, held out (median APE %)",
        "",
        "| sweep | TPOT held out | TTFT held out | tok/s per decode GPU held out | TPOT fitted "
        "| TTFT fitted |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for group in sorted({p.group for p in points}):
        lines.append(
            f"| {group} | {_cell(sweeps_out.get(('tpot_ms', group)))} | "
            f"{_cell(sweeps_out.get(('ttft_ms', group)))} | "
            f"{_cell(sweeps_out.get(('output_tok_s_per_gpu', group)))} | "
            f"{_cell(sweeps_in.get(('tpot_ms', group)))} | "
            f"{_cell(sweeps_in.get(('ttft_ms', group)))} |"
        )
    if args.write_fixture:
        payload = {
            "source": "scripts/disagg_report.py on the disaggregated rows of "
            "fleets/catalog/measured-concurrency.csv (InferenceX)",
            "constants": list(DISAGG_CONSTANTS),
            "fits": {e: {"points": f.points, **f.values} for e, f in fits.items()},
            "held_out_median_ape_pct": {
                m: tables["held_out"][m]["median_ape_pct"] for m in tables["held_out"]
            },
        }
        FIXTURE.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        disagg_fits.cache_clear()  # the door reads the constants just written
    lines += ["", *door_lines(points, in_sample)] if args.write_fixture else []
    lines += ["", *worked_example(), f"Run time: {time.time() - started:.0f} s.", ""]
    text = "\n".join(lines)
    DOC.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
