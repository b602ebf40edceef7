"""Regenerate docs/calibration.md: the performance model's error, in and out of sample.

Usage: ``.venv/bin/python scripts/calibration_report.py [--write-fixture] [--subset N]``

Fits the calibration profiles on the shipped measurements (fleets/catalog/measured*.csv),
then cross-validates twice, each time predicting only points the fit never saw:

- hold one *source* out (a publication; all TensorRT-LLM perf-overview revisions together,
  since they re-measure the same configurations);
- hold one *model family* out (the planner's usual question: a model not measured here).

A held-out point is predicted through the fallback chain (same GPU x engine -> same GPU other
engine -> same generation -> physics defaults), so a source that is the only one for its GPU is
predicted from another GPU of its generation. ``--write-fixture`` also rewrites
fleets/catalog/calibration_profiles.json (relative errors from the model-family CV), which
``fleets.calibration.load_shipped_profiles()`` loads. Uses the default database (catalog
loaded on demand).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "calibration.md"
TARGETS_PCT = {
    "output_tok_s_per_gpu (max throughput)": 15.0,
    "tpot_ms": 15.0,
    "ttft_ms": 30.0,
}


def _setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from fleets.models import GpuSku

    call_command("migrate", verbosity=0)
    if not GpuSku.objects.exists():
        call_command("load_catalog", verbosity=0)


def _cell(row: dict | None) -> str:
    if not row or row["median_ape_pct"] is None:
        return "-"
    return f"{row['median_ape_pct']:.1f} / {row['mean_ape_pct']:.1f} (n={row['n']})"


def _by_metric(summary: dict) -> dict[str, dict]:
    return {row["metric"]: row for row in summary["overall"]}


def headline(in_sample: dict, by_source: dict, by_family: dict) -> list[str]:
    from sizing.calibrate import REPORT_METRICS

    lines = [
        "| metric | in sample | out of sample: hold one source out | "
        "out of sample: hold one model family out | target (median) |",
        "|---|---|---|---|---|",
    ]
    tables = [_by_metric(s) for s in (in_sample, by_source, by_family)]
    for metric in REPORT_METRICS:
        target = TARGETS_PCT.get(metric)
        verdicts = []
        for table in tables[1:]:
            row = table.get(metric)
            if target is None or not row or row["median_ape_pct"] is None:
                continue
            verdicts.append(_verdict(row["median_ape_pct"], target))
        goal = f"<= {target:.0f} %: {', '.join(verdicts)}" if target else "-"
        lines.append(
            f"| {metric} | " + " | ".join(_cell(t.get(metric)) for t in tables) + f" | {goal} |"
        )
    return lines


def _verdict(median_pct: float, target_pct: float) -> str:
    if median_pct <= target_pct:
        return "met"
    return f"missed by {median_pct - target_pct:.1f} pts"


def grouped(summary: dict, key: str) -> list[str]:
    lines = ["| group | metric | n | median APE % | mean APE % |", "|---|---|---|---|---|"]
    for row in summary[f"by_{key}"]:
        if row["median_ape_pct"] is None:
            continue
        lines.append(
            f"| {row['group']} | {row['metric']} | {row['n']} | "
            f"{row['median_ape_pct']:.1f} | {row['mean_ape_pct']:.1f} |"
        )
    return lines


def worst(summary: dict) -> list[str]:
    lines = [
        "| row | metric | measured | predicted | APE % | conditions | profile used |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in summary["worst"]:
        lines.append(
            f"| {w['row_id']} | {w['metric']} | {w['measured']:g} | {w['predicted']:g} | "
            f"{w['ape_pct']:.0f} | {w['conditions']} | {w['profile']} |"
        )
    return lines


def profiles_table(profiles) -> list[str]:
    """The joint fit's nodes: silicon per generation (x precision), engine per family (x
    release), with their points and any constant that ended at a bound."""
    joint = profiles.joint
    if joint is None:
        return ["(no fit)"]
    from sizing.jointfit import ENGINE_CONSTANTS, SILICON_CONSTANTS

    lines = [
        "| silicon node | n | eta_mem | eta_flop_decode | eta_flop_prefill | link eff. | "
        "at a bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for node in sorted(n for n in joint.n_points if n.startswith("silicon:")):
        v = [joint.resolve(node, k) for k in SILICON_CONSTANTS]
        hits = "; ".join(joint.bound_hits.get(node, ())) or "-"
        lines.append(
            f"| {node.removeprefix('silicon:')} | {joint.n_points[node]} | "
            + " | ".join(f"{x:.2f}" for x in v)
            + f" | {hits} |"
        )
    lines += [
        "",
        "| engine node | n | step overhead ms | + per layer us | + per sequence us | "
        "+ per MoE layer us | prompt step: + per MoE layer ms | all-reduce latency us | "
        "front end ms | wave coherence | at a bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for node in sorted(n for n in joint.n_points if n.startswith("engine:")):
        v = {k: joint.resolve(node, k) for k in ENGINE_CONSTANTS}
        hits = "; ".join(joint.bound_hits.get(node, ())) or "-"
        lines.append(
            f"| {node.removeprefix('engine:')} | {joint.n_points[node]} | "
            f"{v['step_overhead_s'] * 1e3:.2f} | {v['step_overhead_per_layer_s'] * 1e6:.0f} | "
            f"{v['step_overhead_per_seq_s'] * 1e6:.1f} | "
            f"{v['step_overhead_per_moe_layer_s'] * 1e6:.0f} | "
            f"{v['prompt_overhead_per_moe_layer_s'] * 1e3:.2f} | "
            f"{v['allreduce_latency_s'] * 1e6:.1f} | {v['frontend_latency_s'] * 1e3:.0f} | "
            f"{v['prefill_wave_fraction']:.2f} | {hits} |"
        )
    return lines


def _bucket(point) -> str:
    c = point.concurrency
    if point.offline:
        return "offline"
    if np.isnan(c):
        return "open loop"
    return "c <= 8" if c <= 8 else ("c 16-64" if c <= 64 else "c >= 128")


def _ratios(evaluation, metric: str, key) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p, y in zip(evaluation.points, evaluation.predicted, strict=True):
        if p.metric == metric and np.isfinite(y) and p.value > 0:
            out.setdefault(key(p), []).append(y / p.value)
    return out


def _bias_cells(evaluation, metric: str, key) -> str:
    cells = []
    for group, ratios in sorted(_ratios(evaluation, metric, key).items()):
        v = np.asarray(ratios)
        cells.append(
            f"{group}: x{np.median(v):.2f} (APE {100 * np.median(np.abs(v - 1)):.0f} %, n={len(v)})"
        )
    return "; ".join(cells)


def misses(src: dict, evaluation) -> list[str]:
    """One bullet per targeted metric: the miss, the median predicted/measured ratio, and
    where (load regime, engine) the error sits, hold one source out."""
    from sizing.calibrate import MAX_THROUGHPUT, report_metric

    lines = []
    for metric, target in TARGETS_PCT.items():
        row = src.get(metric)
        if not row or row["median_ape_pct"] is None:
            continue
        base = "output_tok_s_per_gpu" if metric == MAX_THROUGHPUT else metric
        verdict = _verdict(row["median_ape_pct"], target)

        def of_metric(p, m=metric):
            return report_metric(p) == m

        sub = type(evaluation)(
            tuple(p for p in evaluation.points if of_metric(p)),
            evaluation.predicted[[of_metric(p) for p in evaluation.points]],
            (),
        )
        lines.append(
            f"- **{metric}**: median APE {row['median_ape_pct']:.1f} % vs target {target:.0f} % "
            f"({verdict}); mean {row['mean_ape_pct']:.1f} %. Predicted/measured by load: "
            f"{_bias_cells(sub, base, _bucket)}. By engine: "
            f"{_bias_cells(sub, base, lambda p: p.engine)}."
        )
    lines += ["", *MISS_NOTES]
    return lines


#: What the per-load and per-engine ratios above say about the terms (kept in sync with the
#: numbers by reading them: a ratio far from 1 at c <= 8 is a fixed per-request/per-step
#: term, at c >= 128 a load term, offline the batch/bandwidth terms).
MISS_NOTES = [
    "Reading the ratios: at c <= 8 a request is alone with its prefill and a few decodes, so a "
    "bias there is the fixed terms (front-end latency, per-step overhead a + b x layers); at "
    "c >= 128 it is the load terms (the wait behind re-arriving prompts, co-scheduled decode, "
    "KV reads); offline max throughput is the admitted batch (KV capacity at the context "
    "each sequence claims: the live context, the whole one where TensorRT-LLM reserves the "
    "output; `max_num_seqs`) times the bandwidth/compute efficiencies of the silicon node.",
    "Out of sample by source, holding out the TensorRT-LLM perf-overview tables removes most "
    "of the offline (max-throughput) points at once; those are then predicted from engine "
    "constants no offline point measured (releases before 1.0 from the TensorRT-engine "
    "family, left with no point at all, so the prior's; 1.0 and later from the PyTorch-"
    "backend family fitted on closed-loop runs) and the silicon nodes fitted mostly on other "
    "engines: this fold is where the max-throughput error concentrates.",
]


def ttft_growth(evaluation) -> list[str]:
    groups: dict[tuple, dict[str, list]] = {}
    for p, y in zip(evaluation.points, evaluation.predicted, strict=True):
        if p.metric != "ttft_ms" or not np.isfinite(y) or np.isnan(p.concurrency):
            continue
        if 8 < p.concurrency < 128:
            continue
        key = (p.source_group, p.model.name, p.gpu_key, p.num_gpus, p.tp, p.engine,
               p.precision, p.isl, p.osl)  # fmt: skip
        side = "low" if p.concurrency <= 8 else "high"
        groups.setdefault(key, {"low": [], "high": []})[side].append((p.value, y))
    rows = []
    for key, sides in groups.items():
        if sides["low"] and sides["high"]:
            lo, hi = np.array(sides["low"]), np.array(sides["high"])
            rows.append((key[5], np.median(hi[:, 0]) / np.median(lo[:, 0]),
                         np.median(hi[:, 1]) / np.median(lo[:, 1])))  # fmt: skip
    lines = ["| engine | sweeps | measured TTFT(c>=128) / TTFT(c<=8) | predicted |",
             "|---|---|---|---|"]  # fmt: skip
    for engine in sorted({r[0] for r in rows}):
        sel = np.array([(m, q) for e, m, q in rows if e == engine])
        lines.append(
            f"| {engine} | {len(sel)} | {np.median(sel[:, 0]):.1f}x | {np.median(sel[:, 1]):.1f}x |"
        )
    if not rows:
        lines.append("| - | 0 | - | - |")
    return lines


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-fixture", action="store_true")
    parser.add_argument("--subset", type=int, default=0, help="every Nth point (quick check)")
    parser.add_argument("--output", default=str(DOC))
    parser.add_argument("--state", help="pickle the fitted evaluations here (for --render-only)")
    parser.add_argument("--render-only", help="re-render from a --state pickle, no fitting")
    args = parser.parse_args(argv)
    if args.render_only:
        return _render_state(args.render_only, args.output)
    _setup_django()
    from fleets.calibration import catalog_points, profile_records, row_sources, write_fixture
    from fleets.measurements import read_shipped_measurements
    from sizing import calibrate as cal

    started = time.perf_counter()
    rows, _ = read_shipped_measurements()
    all_points, left_out = catalog_points(rows, include_unfitted=True)
    points = [p for p in all_points if not cal.unfitted_reason(p)]
    unfitted = [p for p in all_points if cal.unfitted_reason(p)]
    if args.subset > 1:
        points = points[:: args.subset]
    profiles, by_family, tables = cal.calibrate_with_cv(points, cal.model_family_fold)
    in_sample_pred, in_labels = cal.predict_with_profiles(points, profiles)
    in_sample = cal.Evaluation(tuple(points), in_sample_pred, tuple(in_labels))
    by_source = cal.cross_validate(points, cal.source_fold)
    held_pred, held_labels = cal.predict_with_profiles(unfitted, profiles)
    experimental = cal.Evaluation(tuple(unfitted), held_pred, tuple(held_labels))
    if args.write_fixture:
        write_fixture(profile_records(profiles, tables, "shipped fit", row_sources(rows)))

    elapsed = time.perf_counter() - started
    state = (points, left_out, unfitted, in_sample, by_source, by_family, experimental, profiles)
    if args.state:
        Path(args.state).write_bytes(pickle.dumps((state, elapsed)))
    return _write(state, elapsed, args.output)


README = ROOT / "README.md"
README_SECTION = "## How good the numbers are (calibration)"


def update_readme(table: list[str], path: Path = README) -> None:
    """Replace the first table of the README's calibration section by ``table``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(README_SECTION)
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    end = next(i for i in range(first, len(lines)) if not lines[i].startswith("|"))
    path.write_text("\n".join(lines[:first] + table + lines[end:]) + "\n", encoding="utf-8")


def _render_state(path: str, output: str) -> str:
    _setup_django()
    state, elapsed = pickle.loads(Path(path).read_bytes())
    return _write(state, elapsed, output)


def _write(state, elapsed: float, output: str) -> str:
    from sizing import calibrate as cal

    points, left_out, unfitted, in_sample, by_source, by_family, experimental, profiles = state
    s_in, s_src, s_fam = (cal.error_summary(e) for e in (in_sample, by_source, by_family))
    s_exp = cal.error_summary(experimental)
    doc = render(points, left_out, unfitted, s_in, s_src, s_fam, s_exp, profiles, by_source)
    doc.append(f"\n_Generated by `scripts/calibration_report.py` in {elapsed:.0f} s._\n")
    text = "\n".join(doc)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(text, encoding="utf-8")
    if Path(output) == DOC:
        update_readme(headline(s_in, s_src, s_fam))
    print(text)
    return text


def render(points, left_out, unfitted, s_in, s_src, s_fam, s_exp, profiles, by_source):
    src = _by_metric(s_src)
    doc = [
        "# Calibration: how far the performance model is from measured GPUs",
        "",
        f"{len(points)} measured points (metrics the model predicts, closed loop, at an "
        "open-loop rate or offline, of catalogued models and GPUs) from the shipped files; "
        f"{len(left_out)} rows left out "
        "by the plain-fit rules (`fleets/catalog/MEASUREMENTS.md`) or because the model does "
        f"not predict them (p99s, open-loop throughput, uncatalogued names); {len(unfitted)} "
        "experimental points are predicted but not fitted (below).",
        "",
        "Errors are absolute percentage errors, median / mean (%). One hierarchical joint fit "
        "(`sizing/jointfit.py`): silicon constants per architecture generation x precision, "
        "engine constants per family x release, by least squares on log ratios with priors "
        "toward physics. Out of sample = the point's whole source (or model family) was held "
        "out of the fit, and it is predicted through the same profile walk as every other "
        "door (`sizing.calibrate.select_profile`).",
        "",
        "## Headline",
        "",
        *headline(s_in, s_src, s_fam),
        "",
        "## Where the targets are missed, and which term is wrong",
        "",
        *misses(src, by_source),
        "",
        "## Closed-loop TTFT growth with concurrency",
        "",
        "Sweeps (one source, model, GPU, layout, engine, lengths) measured at both c <= 8 and "
        "c >= 128: median TTFT at high over low concurrency, measured and predicted out of "
        "sample (hold one source out).",
        "",
        *ttft_growth(by_source),
        "",
        "## Out of sample by GPU (hold one source out)",
        "",
        *grouped(s_src, "gpu"),
        "",
        "## Out of sample by engine (hold one source out)",
        "",
        *grouped(s_src, "engine"),
        "",
        "## Out of sample by model family (hold one model family out)",
        "",
        *grouped(s_fam, "model_family"),
        "",
        "## The 10 worst out-of-sample points (hold one source out)",
        "",
        *worst(s_src),
        "",
        "## Not fitted: InferenceX experimental H200 sweep",
        "",
        "Predicted by the profiles fitted without it (its authors mark it experimental; "
        "osl 128 behind prompts of up to 32k tokens).",
        "",
        "| metric | n | median APE % | mean APE % |",
        "|---|---|---|---|",
        *[
            f"| {r['metric']} | {r['n']} | {r['median_ape_pct']} | {r['mean_ape_pct']} |"
            for r in s_exp["overall"]
        ],
        "",
        "## Fitted profiles (all shipped data)",
        "",
        "The +- bands are each profile's out-of-sample median APE under hold-one-model-family-"
        "out; they become `Calibration.relative_error` / `ttft_relative_error`.",
        "",
        *profiles_table(profiles),
    ]
    if profiles.refused:
        doc += ["", "Refused fits:", ""]
        doc += [f"- {key.label}: {reason}" for key, reason in profiles.refused.items()]
    return doc


if __name__ == "__main__":
    main()
