"""`python manage.py validate [DATA.csv] [--json]`: the model's error against measured rows.

Every usable row is predicted through the same core as ``predict``, with the calibration
profile ``fleets.calibration`` selects for its GPU, engine and precision (or physics defaults
with ``--physics``), and the absolute percentage error is tabulated: median and mean per
metric, per metric and GPU / model family / engine, and the 10 worst rows with their
conditions. In-sample when the profiles were fitted on the same rows.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from fleets.calibration import catalog_points, profile_selector
from planner.management.commands.calibrate import read_rows
from sizing.calibrate import PHYSICS, PHYSICS_LABEL, Evaluation, _Columns, error_summary


def evaluate_rows(rows, *, physics: bool = False, include_unfitted: bool = False):
    """(Evaluation, rows left out with reasons) for measured rows under the stored profiles."""
    points, left_out = catalog_points(rows, include_unfitted=include_unfitted)
    if physics:
        chosen = [(PHYSICS, PHYSICS_LABEL)] * len(points)
    else:
        select = profile_selector()
        chosen = [select(p.gpu_key, p.engine, p.precision, p.engine_release) for p in points]
    predicted = _Columns.of(points).predict([c for c, _ in chosen])
    return Evaluation(tuple(points), predicted, tuple(label for _, label in chosen)), left_out


def format_table(rows: list[dict], title: str) -> list[str]:
    lines = [title, f"  {'group':<28} {'metric':<38} {'n':>5} {'median APE':>11} {'mean APE':>9}"]
    for r in rows:
        med = "-" if r["median_ape_pct"] is None else f"{r['median_ape_pct']:.1f}%"
        mean = "-" if r["mean_ape_pct"] is None else f"{r['mean_ape_pct']:.1f}%"
        lines.append(f"  {r['group']:<28} {r['metric']:<38} {r['n']:>5} {med:>11} {mean:>9}")
    return lines


class Command(BaseCommand):
    help = "Predict every measured row and print median/mean absolute percentage errors."

    def add_arguments(self, parser):
        parser.add_argument("data", nargs="?", help="CSV in the measured.csv format")
        parser.add_argument("--shipped", action="store_true", help="the shipped data (default)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--physics", action="store_true", help="ignore profiles")
        parser.add_argument(
            "--include-unfitted",
            action="store_true",
            help="also predict rows kept out of fits (the experimental sweep); by default "
            "validate scores the same points as the README's in-sample column",
        )

    def handle(
        self, *args, data=None, shipped=False, physics=False, include_unfitted=False, **options
    ):
        rows, source = read_rows(data, shipped)
        evaluation, left_out = evaluate_rows(
            rows, physics=physics, include_unfitted=include_unfitted
        )
        summary = error_summary(evaluation, worst=10)
        summary["data"] = source
        summary["points"] = len(evaluation.points)
        summary["left_out"] = len(left_out)
        summary["profiles_used"] = sorted(set(evaluation.labels))
        if options["json"]:
            self.stdout.write(json.dumps(summary, indent=1))
            return
        lines = [f"{summary['points']} points from {source} ({len(left_out)} rows left out)"]
        lines += format_table(summary["overall"], "per metric")
        for name in ("gpu", "model_family", "engine"):
            lines += format_table(summary[f"by_{name}"], f"per {name.replace('_', ' ')}")
        lines.append("worst rows")
        for w in summary["worst"]:
            lines.append(
                f"  {w['row_id']:<8} {w['metric']:<22} measured {w['measured']:<10g} "
                f"predicted {w['predicted']:<10g} {w['ape_pct']:.0f}%  {w['conditions']} "
                f"[{w['profile']}]"
            )
        self.stdout.write("\n".join(lines))
