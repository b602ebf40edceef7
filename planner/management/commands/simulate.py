"""`python manage.py simulate ...`: discrete-event TTFT/TPOT percentiles for one replica.

    manage.py simulate --model M --gpu G --num-gpus N --tp T [--pp P --ep E] --precision P
        [--kv-precision K] [--expert-precision X] [--engine E [--engine-version V]]
        (--rate R | --concurrency C) --requests K
        --isl I --osl O [--isl-p95 A --osl-p95 B] [--arrival poisson|gamma --cv X]
        [--ttft-slo MS --tpot-slo MS] [--seed S] --json

Prints one JSON object: ttft_ms / tpot_ms / e2e_ms {p50, p90, p95, p99}, throughput_tok_s,
goodput, preemptions, requests, simulated_s. Bad arguments exit 2 with a one-line reason.
The calibration profile is the one ``predict`` picks for the same row (GPU x engine x
weight precision x release, through ``fleets.calibration``'s walk); a blank experts'
precision is the checkpoint's, as everywhere.
"""

import json
import math
import sys

from django.core.management.base import BaseCommand, CommandParser

from planner.predict_io import ENGINES
from sizing.candidates import CandidateArrays
from sizing.chain import default_dp
from sizing.length_law import p95_limit_message
from sizing.memory import fit_memory
from sizing.simulate import Workload, lengths_from_mean_p95, simulate
from sizing.specs import EngineSettings, canonical_precision


class UsageError(Exception):
    """A bad argument: reported as ``simulate: error: <reason>`` with exit status 2."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def _positive_int_arg(text: str) -> int:
    try:
        return _positive_int(text)
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None


def _positive_float_arg(text: str) -> float:
    try:
        return _positive_float(text)
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None


class Command(BaseCommand):
    help = "Simulate one replica under load and print TTFT/TPOT/E2E percentiles as JSON."

    def create_parser(self, prog_name, subcommand, **kwargs) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # argparse semantics even under call_command: a bad argument exits 2, one line
        parser.called_from_command_line = True

        def one_line_error(message: str) -> None:
            sys.stderr.write(f"{parser.prog}: error: {message}\n")
            sys.exit(2)

        parser.error = one_line_error
        return parser

    def add_arguments(self, parser):
        pi, pf = _positive_int_arg, _positive_float_arg
        parser.add_argument("--model", required=True)
        parser.add_argument("--gpu", required=True)
        parser.add_argument("--num-gpus", type=pi, required=True)
        parser.add_argument("--tp", type=pi, required=True)
        parser.add_argument("--pp", type=pi, default=1)
        parser.add_argument("--ep", type=pi, default=1)
        parser.add_argument("--precision", required=True)
        parser.add_argument("--kv-precision", default="")
        parser.add_argument(
            "--expert-precision",
            default="",
            help="routed experts' precision (blank: the checkpoint's)",
        )
        parser.add_argument("--engine", default="vllm", choices=sorted(ENGINES))
        parser.add_argument(
            "--engine-version",
            default="",
            help="engine release, e.g. 0.21 (blank: the newest fitted)",
        )
        load = parser.add_mutually_exclusive_group(required=True)
        load.add_argument("--rate", type=pf, help="open-loop requests/s per replica")
        load.add_argument("--concurrency", type=pi, help="closed-loop clients")
        parser.add_argument("--requests", type=pi, required=True)
        parser.add_argument("--isl", type=pi, required=True)
        parser.add_argument("--osl", type=pi, required=True)
        parser.add_argument("--isl-p95", type=pf)
        parser.add_argument("--osl-p95", type=pf)
        parser.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson")
        parser.add_argument("--cv", type=pf, default=1.0)
        parser.add_argument("--ttft-slo", type=pf, default=math.inf, help="ms")
        parser.add_argument("--tpot-slo", type=pf, default=math.inf, help="ms")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--json", action="store_true", help="print the JSON object")

    def handle(self, *args, **o):
        try:
            summary = run_simulation(o)
        except UsageError as exc:
            sys.stderr.write(f"manage.py simulate: error: {exc}\n")
            sys.exit(2)
        self.stdout.write(json.dumps(summary, indent=None if o["json"] else 2))


def run_simulation(o: dict) -> dict:
    """Resolve names exactly as ``predict`` does, build the candidate, simulate, summarize."""
    from planner.management.commands.predict import calibration_for, catalog_resolver
    from planner.predict_io import RowError

    resolver = catalog_resolver()
    try:
        model = resolver.get("model", o["model"])
        gpu = resolver.get("gpu", o["gpu"])
    except RowError as exc:
        raise UsageError(str(exc)) from exc
    try:
        weight = canonical_precision(o["precision"])
        kv = canonical_precision(o["kv_precision"]) if o["kv_precision"] else None
        experts = canonical_precision(o["expert_precision"]) if o["expert_precision"] else None
        for flag, mean, p95 in (("--isl-p95", o["isl"], o["isl_p95"]),
                                ("--osl-p95", o["osl"], o["osl_p95"])):  # fmt: skip
            problem = p95_limit_message(float(mean), p95) if p95 is not None else None
            if problem:  # the length law's own range, named by the flag
                raise UsageError(f"{flag}: {problem}")
        isl = lengths_from_mean_p95(float(o["isl"]), o["isl_p95"])
        osl = lengths_from_mean_p95(float(o["osl"]), o["osl_p95"])
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if o["arrival"] == "gamma" and o["concurrency"]:
        raise UsageError("--arrival gamma needs --rate (open loop)")
    dp = int(default_dp(o["num_gpus"], o["tp"], o["pp"]))
    release = _release(o["engine"], o["engine_version"])
    calibration = calibration_for()(gpu, o["engine"], weight, release)
    c = CandidateArrays.build(model, gpu, weight, kv, o["tp"], o["pp"], o["ep"], dp,
                              EngineSettings(engine=o["engine"]), calibration,
                              expert_precision=experts)  # fmt: skip
    fit = fit_memory(c, float(o["isl"] + o["osl"]), o["num_gpus"])
    if not fit.fits[0]:
        raise UsageError(f"does not fit: {fit.reason(c, 0)}")
    workload = Workload(
        isl=isl,
        osl=osl,
        requests=o["requests"],
        rate_rps=o["rate"],
        concurrency=o["concurrency"],
        arrival=o["arrival"],
        cv=o["cv"],
        seed=o["seed"],
    )
    try:
        result = simulate(c, workload)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return result.summary(o["ttft_slo"], o["tpot_slo"])


def _release(engine: str, version: str) -> str:
    """The release ``--engine-version`` names, read by ``predict``'s own column parser."""
    from planner.predict_io import _engine

    _, release = _engine({"engine": engine, "engine_version": version})
    if version.strip() and not release:
        raise UsageError(f"--engine-version: no release in {version!r} (e.g. 0.21)")
    return release
