"""`python manage.py predict IN.csv [-o OUT.csv]`: throughput and latency for benchmark rows."""

import sys
import time
from contextlib import ExitStack
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fleets.models import GpuSku, ModelArchitecture
from planner.predict_io import Resolver, predict_csv
from planner.selectors import catalog_index, gpu_spec, model_spec


def catalog_resolver() -> Resolver:
    index = catalog_index()
    models = {m.pk: m for m in ModelArchitecture.objects.all()}
    gpus = {g.pk: g for g in GpuSku.objects.all()}
    return Resolver(
        find_model=lambda name: model_spec(models[index.model_id(name)]),
        find_gpu=lambda name: gpu_spec(gpus[index.gpu_id(name)]),
    )


def profile_for():
    """``ParsedRow -> (Calibration, profile label)`` from the stored profiles, through the
    one walk ``fleets.calibration`` uses for every door: GPU x engine (x weight precision
    x release), generation, other engine, physics defaults."""
    from fleets.calibration import profile_selector

    select = profile_selector()
    slug_of = dict(GpuSku.objects.values_list("name", "slug"))
    return lambda row: select(
        slug_of.get(row.gpu.name, ""), row.engine, row.weight_precision, row.engine_version
    )


def calibration_for():
    """``(GpuSpec, engine, precision="", engine_version="") -> Calibration`` by the same walk
    (for callers that hold specs, not parsed rows)."""
    from fleets.calibration import profile_selector

    select = profile_selector()
    slug_of = dict(GpuSku.objects.values_list("name", "slug"))
    return lambda gpu, engine, precision="", engine_version="": select(
        slug_of.get(gpu.name, ""), engine, precision, engine_version
    )[0]


def launch_for():
    """``ParsedRow -> LaunchSettings``: a disaggregated row's published launch recipe
    (``fleets.measurements.launch_settings``: same engine, GPU, precision, lengths, pools and
    concurrency), whose decode max batch and prefill budget fill the settings it leaves
    blank, as calibration reads its measured rows. A speculative row matches none: the
    shipped recipes are the non-speculative ones."""
    from fleets.measurements import launch_settings

    slug_of = dict(GpuSku.objects.values_list("name", "slug"))

    def find(row):
        if any(name.startswith("spec_") for name, _ in row.settings):
            return None
        pools = {name: {"workers": pool.workers, "tp": pool.tp * pool.pp, "dp": pool.dp}
                 for name, pool in (("prefill", row.disagg.prefill),
                                    ("decode", row.disagg.decode))}  # fmt: skip
        return launch_settings(row.engine, slug_of.get(row.gpu.name, ""), row.weight_precision,
                               row.isl, row.osl, pools, row.concurrency)  # fmt: skip

    return find


class Command(BaseCommand):
    help = (
        "Predict fit, throughput (output tok/s) and median TTFT/TPOT for each row of a CSV "
        "(model, gpu, num_gpus, tp, pp, ep, weight_precision, kv_precision, isl, osl, "
        "concurrency[, engine[, engine_version]]; or request_rate, req/s of Poisson arrivals, "
        "with concurrency blank). Bad rows get fits=false and a reason; "
        "the profile column names the calibration profile each row used."
    )

    def add_arguments(self, parser):
        parser.add_argument("input", help="IN.csv ('-' for standard input)")
        parser.add_argument("-o", "--output", help="OUT.csv (default: standard output)")
        parser.add_argument(
            "--simulate",
            action="store_true",
            help="run the discrete-event simulator per row for throughput and TTFT/TPOT "
            "(slow path) instead of the mean-value model",
        )

    def handle(self, *args, input, output, simulate=False, **options):
        started = time.perf_counter()
        with ExitStack() as stack:
            try:
                source = (
                    sys.stdin if input == "-" else stack.enter_context(Path(input).open(newline=""))
                )
            except OSError as exc:
                raise CommandError(f"cannot read {input}: {exc.strerror}") from exc
            try:
                sink = (
                    stack.enter_context(Path(output).open("w", newline=""))
                    if output
                    else self.stdout._out
                )
            except OSError as exc:
                raise CommandError(f"cannot write {output}: {exc.strerror}") from exc
            try:
                counts = predict_csv(
                    source,
                    sink,
                    catalog_resolver(),
                    profile_for(),
                    simulate=simulate,
                    launch_for=launch_for(),
                )
            except (ValueError, UnicodeDecodeError) as exc:
                raise CommandError(f"{input}: {exc}") from exc
        elapsed = time.perf_counter() - started
        self.stderr.write(
            f"{counts['rows']} rows ({counts['bad_rows']} bad, {counts['fits']} fit) "
            f"in {elapsed:.2f} s"
        )
