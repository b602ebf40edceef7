"""`python manage.py calibrate [DATA.csv | --shipped] [--engine ...] [--dry-run]`: fit profiles.

Fits one calibration profile per GPU x engine family (x weight precision where the data hold
enough points of it), plus generation-level fallbacks, by least squares of the model's
efficiency constants (``sizing.calibrate``). Each profile's error band comes from
cross-validation (hold one model family out, or five folds for a single-family file). The
save is atomic: every profile of this source is replaced, or none is.
"""

from __future__ import annotations

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fleets.calibration import (
    PROFILES_FIXTURE,
    SHIPPED,
    catalog_points,
    profile_records,
    row_sources,
    save_profiles,
    write_fixture,
)
from fleets.measurements import (
    ENGINE_FAMILIES,
    MeasurementError,
    read_measurements,
    read_shipped_measurements,
)
from sizing.calibrate import calibrate_with_cv


def read_rows(data: str | None, shipped: bool):
    """(rows, source label): the shipped reference files when no file is named."""
    if shipped or not data:
        rows, _ = read_shipped_measurements()  # unreadable shipped rows are documented
        return rows, SHIPPED
    try:
        return read_measurements(Path(data)), f"user upload {Path(data).name}"
    except OSError as exc:
        raise CommandError(f"cannot read {data}: {exc.strerror}") from exc
    except MeasurementError as exc:
        raise CommandError(f"{data}: {exc}") from exc


class Command(BaseCommand):
    help = "Fit calibration profiles (GPU x engine [x precision]) from measured.csv-format rows."

    def add_arguments(self, parser):
        parser.add_argument("data", nargs="?", help="CSV in the measured.csv format")
        parser.add_argument("--shipped", action="store_true", help="fit the shipped data")
        parser.add_argument(
            "--engine", action="append", choices=ENGINE_FAMILIES, help="only these engines"
        )
        parser.add_argument("--dry-run", action="store_true", help="fit and report, save nothing")
        parser.add_argument(
            "--write-fixture",
            nargs="?",
            const=str(PROFILES_FIXTURE),
            help=f"also write the profiles as JSON (default {PROFILES_FIXTURE.name})",
        )

    def handle(self, *args, data=None, shipped=False, engine=None, dry_run=False, **options):
        started = time.perf_counter()
        rows, source = read_rows(data, shipped)
        points, left_out = catalog_points(rows)
        if engine:
            points = [p for p in points if p.engine in engine]
        if not points:
            raise CommandError(f"no usable rows in {data or 'the shipped data'}")
        # the shipped fit is per generation; a user's file calibrates their own GPUs too
        level = "generation" if source == SHIPPED else "both"
        profiles, _, tables = calibrate_with_cv(points, level=level)
        if not profiles.profiles:
            reasons = "; ".join(profiles.refused.values())
            raise CommandError(f"no profile could be fitted: {reasons}")
        records = profile_records(profiles, tables, source, row_sources(rows))
        self._report(records, profiles.refused, len(points), len(left_out))
        if options.get("write_fixture"):
            write_fixture(records, Path(options["write_fixture"]))
            self.stdout.write(f"wrote {options['write_fixture']}")
        if dry_run:
            self.stdout.write("dry run: nothing saved")
        else:
            try:
                saved = save_profiles(records, source)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"saved {len(saved)} profiles as {source!r}")
        self.stderr.write(f"done in {time.perf_counter() - started:.1f} s")

    def _report(self, records, refused, n_points, n_left_out):
        self.stdout.write(f"{n_points} points fitted ({n_left_out} rows left out)")
        for r in records:
            constants = ", ".join(f"{k}={v:.4g}" for k, v in r["constants"].items())
            self.stdout.write(
                f"{r['name']:<32} n={r['n_points']:<5} +-{r['relative_error']:.0%} "
                f"(TTFT +-{r['ttft_relative_error']:.0%})  {constants}"
            )
        for key, reason in refused.items():
            self.stdout.write(f"refused {key.label}: {reason}")
