"""`python manage.py plan SCENARIO.json [--json] [--no-tails]`: the ranked comparison.

The same pipeline as a sizing run (``planner.pipeline``): every candidate is sized with the
analytic percentile model, the ones that can be the cheapest per GPU are simulated
(bound-and-prune), and only simulated rows are recommended. ``--no-tails`` skips the
simulations (every row analytic, as a run with ``SIZING_SIMULATE_TAILS`` off).
"""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from planner.planning import PlanInputError, plan_document

COLUMNS = [  # header, key, format
    ("GPU", "gpu_name", "{}"),
    ("model", "model_name", "{}"),
    ("prec", "precision", "{}"),
    ("TP", "tp", "{}"),
    ("mode", "mode", "{}"),
    ("batch", "batch", "{}"),
    ("replicas", "replicas", "{}"),
    ("GPUs", "gpus", "{}"),
    ("TTFT ms", "ttft_ms", "{:.0f}"),
    ("TPOT ms", "tpot_ms", "{:.1f}"),
    ("at", "latency_statistic", "{}"),
    ("source", "latency_source", "{}"),
    ("$/hour", "usd_per_hour", "{:,.2f}"),
    ("$/month", "usd_per_month", "{:,.0f}"),
    ("$/M tok", "usd_per_mtok", "{:.3f}"),
    ("tok/$", "tokens_per_usd", "{:,.0f}"),
    ("binding", "binding_constraint", "{}"),
]


def _cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    return "-" if value is None else fmt.format(value)


class Command(BaseCommand):
    help = "Size a scenario file (traffic, SLOs, candidates, prices, API alternative)."

    def add_arguments(self, parser):
        parser.add_argument("scenario", help="SCENARIO.json (see examples/)")
        parser.add_argument(
            "--json", action="store_true", dest="as_json", help="print the full result as JSON"
        )
        parser.add_argument("--top", type=int, default=15, help="rows in the table (default 15)")
        parser.add_argument(
            "--no-tails",
            action="store_true",
            help="skip the tail simulations: analytic percentiles for every row",
        )
        parser.add_argument(
            "--simulate-tails",
            action="store_true",
            help="(the default; kept for old scripts)",
        )

    def handle(self, *args, scenario, as_json: bool, top: int, no_tails: bool, **options):
        document = self._read(scenario)
        try:
            result = plan_document(document, simulate_tails=not no_tails)
        except PlanInputError as exc:
            raise CommandError(f"{scenario}: {exc}") from exc
        if as_json:
            self.stdout.write(json.dumps(result, indent=2, allow_nan=False))
            return
        self._table(result, top)

    def _read(self, path: str):
        try:
            return json.loads(Path(path).read_text())
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc}") from exc

    def _table(self, result: dict, top: int) -> None:
        write = self.stdout.write
        sheet = result["price_sheet"]
        write(f"Scenario: {result['scenario']}")
        if sheet:
            write(f"Prices: {sheet['name']} v{sheet['version']}")
        write("\nCheapest option meeting the SLOs, per GPU:")
        for entry in result["per_gpu"]:
            best = entry["row"]
            if best is None:
                write(f"  {entry['gpu_name']}: none — {entry['why_none']}")
                continue
            layout = f"TP{best['tp']} x {best['replicas']} replicas"
            if best.get("mode") == "disagg":
                layout = (
                    f"disaggregated {best['prefill_workers']} prefill x TP{best['prefill_tp']} + "
                    f"{best['decode_workers']} decode x TP{best['decode_tp']} workers (KV "
                    f"transfer {best['kv_transfer_ms']:.2f} ms)"
                )
            line = (
                f"  {entry['gpu_name']}: {best['model_name']} {best['precision']} "
                f"{layout} = {best['gpus']} GPUs, "
            )
            if best["usd_per_month"] is None:
                line += best["derivation"].get("price_note", "no price")
            else:
                line += f"${best['usd_per_month']:,.0f}/month, ${best['usd_per_mtok']:.3f}/M tokens"
            line += (
                f"; {best['latency_source']} {best['latency_statistic']} TTFT "
                f"{best['ttft_ms']:.0f} ms, TPOT {best['tpot_ms']:.1f} ms"
            )
            band = entry.get("band")
            if band:
                low, high = band["replicas"]
                # a disaggregated row's band counts both pools' workers, as its card says
                unit = "workers" if best.get("mode") == "disagg" else "replicas"
                line += f"; band {low}-{high} {unit}"
            line += f"; profile {best['profile']}"
            breakeven = (best.get("derivation") or {}).get("breakeven")
            if breakeven and breakeven.get("crossing_tokens_per_month"):
                line += (
                    f"; beats the API above {breakeven['crossing_tokens_per_month']:.3g} tok/month"
                )
            write(line)
        count = len(result["rows"])
        shown = f"top {top} of {count}" if count > top else f"all {count}"
        write(f"\nRanked candidates ({shown}):")
        rows = [[_cell(r, k, f) for _, k, f in COLUMNS] for r in result["rows"][:top]]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, (h, _, _) in enumerate(COLUMNS)]
        write("  ".join(h.ljust(w) for (h, _, _), w in zip(COLUMNS, widths, strict=True)))
        for r in rows:
            write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
