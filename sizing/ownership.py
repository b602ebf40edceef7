"""Buy vs rent: what an owned GPU-hour costs, and the utilization from which owning wins.

Owned node-hour (``$/h``), every term per node:

- capital: ``capex * crf / 8760`` with the capital recovery factor
  ``crf = r / (1 - (1 + r) ** -n)`` (``1 / n`` at ``r = 0``): the annuity that repays the
  capex over ``n`` depreciation years at cost of capital ``r``;
- power: ``kw * pue * usd_per_kwh`` with ``kw = (tdp_w * gpus_per_node + host_watts) / 1000``
  (GPUs at TDP: an upper bound, as a colo contract commits the peak);
- colocation: ``kw * colo_usd_per_kw_month / 730`` (IT kW; cooling is in the PUE);
- operations: ``ops_usd_per_node_month / 730``.

``owned_usd_per_gpu_hour = node_hour / gpus_per_node``. An owned fleet costs the same busy or
idle; a rented one (elastic) costs in proportion to what it serves, so owning wins above
``breakeven_utilization = owned_usd_per_gpu_hour / rented_usd_per_gpu_hour`` for the same
delivered tokens. ``months_to_breakeven = capex_total / (rented - owned opex) per month``,
a simple payback (undiscounted; the cost of capital is in the owned $/h, not here), never
when the saving is <= 0.

Worked number (tests/sizing/test_fleet_life.py): an 8-GPU node at $250,000, 5 years, 8%,
8 x 700 W + 4,600 W host = 10.2 kW, PUE 1.58, $0.08/kWh, $184.06/kW-month, $500/node-month
(the defaults but the capex; ``SOURCES`` has each default's source): crf = 0.25046 ->
capital $7.148/h, power $1.289/h, colo $2.572/h, ops $0.685/h -> $11.694/node-hour =
$1.462/GPU-hour; against $2.50 rented the break-even utilization is 58.5%.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from sizing.cost import HOURS_PER_MONTH
from sizing.derivation import Step, defaults_note, q, step

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class OwnershipInputs:
    """The scenario's ``ownership`` block, defaults filled in; where each default comes
    from is in ``SOURCES`` (the output repeats it beside "default")."""

    capex_usd_per_node: float | None = None  # DEFAULT_CAPEX_USD_PER_GPU x GPUs (SOURCES)
    depreciation_years: float = 5.0  # IRS Publication 946 (SOURCES)
    cost_of_capital: float = 0.08  # Damodaran's data set, approximate (SOURCES)
    host_watts_per_node: float = 4600.0  # NVIDIA DGX H100 datasheet (SOURCES)
    pue: float = 1.58  # Uptime Institute 2023 (SOURCES)
    usd_per_kwh: float = 0.08  # EIA, US industrial average (SOURCES)
    colo_usd_per_kw_month: float = 184.06  # CBRE H2 2024 (SOURCES)
    ops_usd_per_node_month: float = 500.0  # assumption (SOURCES)
    defaults: tuple[str, ...] = ()


#: Default capex per GPU when no node price is given: SemiAnalysis estimated a DGX H100's
#: sale price at ~$270,000 for 8 GPUs (host, NICs and switch share included), $33,750 per
#: GPU (as cited by Epoch AI, https://github.com/epoch-research/training-cost-trends).
DEFAULT_CAPEX_USD_PER_GPU = 33_750.0

FIELDS = tuple(f.name for f in fields(OwnershipInputs) if f.name != "defaults")

#: Where each default of the block comes from; "assumption" says when a figure is ours.
SOURCES: dict[str, str] = {
    "capex_usd_per_node": (
        "$33,750 per GPU x GPUs per node: SemiAnalysis's ~$270,000 sale price of an 8-GPU DGX "
        "H100 (cited by Epoch AI, https://github.com/epoch-research/training-cost-trends)"
    ),
    "depreciation_years": (
        "5 years: computers are 5-year property under US MACRS (IRS Publication 946, table "
        "B-1, asset class 00.12, https://www.irs.gov/publications/p946)"
    ),
    "cost_of_capital": (
        "0.08: approximate cost of capital of US technology firms in Damodaran's annual data "
        "set (https://pages.stern.nyu.edu/~adamodar/New_Home_Page/datafile/wacc.html); "
        "an assumption, use your own"
    ),
    "host_watts_per_node": (
        "4,600 W: NVIDIA DGX H100 datasheet's ~10.2 kW maximum system power less 8 x 700 W "
        "GPUs (https://www.nvidia.com/en-us/data-center/dgx-h100/)"
    ),
    "pue": (
        "1.58: industry average PUE in 2023 from the Uptime Institute Global Data Center "
        "Survey (https://intelligence.uptimeinstitute.com/resource/"
        "large-data-centers-are-mostly-more-efficient-analysis-confirms)"
    ),
    "usd_per_kwh": (
        "$0.08/kWh: US average retail price to industrial customers, ~8 cents/kWh in EIA's "
        "Electric Power Monthly table 5.6.A (https://www.eia.gov/electricity/monthly/); "
        "rounded"
    ),
    "colo_usd_per_kw_month": (
        "$184.06/kW-month: average asking rate for a 250-500 kW requirement across North "
        "American primary markets, CBRE North America Data Center Trends H2 2024 "
        "(https://www.cbre.com/insights/reports/north-america-data-center-trends-h2-2024)"
    ),
    "ops_usd_per_node_month": (
        "$500/node-month: remote hands, spares, monitoring; assumption, no public figure"
    ),
}


def default_sources(inputs: OwnershipInputs) -> dict[str, str]:
    """``{field: figure and source}`` for every field the scenario left to its default."""
    return {name: SOURCES[name] for name in inputs.defaults if name in SOURCES}


#: A GPU generation every ~2 years: NVIDIA announced Hopper (H100) at GTC in March 2022 and
#: Blackwell (B200) at GTC in March 2024 (NVIDIA's GTC keynote press releases). Past it a new
#: buyer pays the same for more tokens, so a longer payback risks owning the previous
#: generation.
GENERATION_MONTHS = 24.0


def from_block(block: dict | None) -> OwnershipInputs:
    block = block or {}
    given = {k: v for k, v in block.items() if k in FIELDS and v is not None}
    base = replace(OwnershipInputs(), **given)
    return replace(base, defaults=tuple(f for f in FIELDS if f not in given))


def capital_recovery_factor(rate: float, years: float) -> float:
    """``r / (1 - (1 + r) ** -n)``; ``1 / n`` at ``r = 0`` (per year)."""
    if rate == 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


@dataclass(frozen=True)
class NodeHour:
    capex_usd_per_node: float
    capital_usd_per_hour: float
    power_usd_per_hour: float
    colo_usd_per_hour: float
    ops_usd_per_hour: float
    node_kw: float
    gpus_per_node: int

    @property
    def usd_per_hour(self) -> float:
        return (
            self.capital_usd_per_hour
            + self.power_usd_per_hour
            + self.colo_usd_per_hour
            + self.ops_usd_per_hour
        )

    @property
    def opex_usd_per_hour(self) -> float:
        return self.power_usd_per_hour + self.colo_usd_per_hour + self.ops_usd_per_hour

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus_per_node


def node_hour(
    inputs: OwnershipInputs, gpus_per_node: int, tdp_w: float
) -> tuple[NodeHour, list[Step]]:
    """Owned $/node-hour by term, with the derivation."""
    capex = inputs.capex_usd_per_node
    if capex is None:
        capex = DEFAULT_CAPEX_USD_PER_GPU * gpus_per_node
    r, n = inputs.cost_of_capital, inputs.depreciation_years
    crf = capital_recovery_factor(r, n)
    kw = (tdp_w * gpus_per_node + inputs.host_watts_per_node) / 1000.0
    result = NodeHour(
        capex_usd_per_node=capex,
        capital_usd_per_hour=capex * crf / HOURS_PER_YEAR,
        power_usd_per_hour=kw * inputs.pue * inputs.usd_per_kwh,
        colo_usd_per_hour=kw * inputs.colo_usd_per_kw_month / HOURS_PER_MONTH,
        ops_usd_per_hour=inputs.ops_usd_per_node_month / HOURS_PER_MONTH,
        node_kw=kw,
        gpus_per_node=gpus_per_node,
    )
    crf_formula = "r / (1 - (1 + r) ** -n)" if r != 0 else "1 / n"
    steps = [
        step(
            "capital_recovery_factor",
            crf_formula,
            [q("r", r, "/year"), q("n", n, "years")],
            crf,
            "/year",
            "annuity repaying the capex over the depreciation years",
        ),  # fmt: skip
        step(
            "node_kw",
            "(tdp_w * gpus_per_node + host_watts) / 1000",
            [
                q("tdp_w", tdp_w, "W"),
                q("gpus_per_node", gpus_per_node, "GPUs"),
                q("host_watts", inputs.host_watts_per_node, "W"),
            ],  # fmt: skip
            kw,
            "kW",
            "GPUs at TDP from the catalog",
        ),
        step(
            "owned_usd_per_gpu_hour",
            "(capex * crf / 8760 + kw * pue * usd_per_kwh + kw * colo / 730 + ops / 730)"
            " / gpus_per_node",
            [
                q("capex", capex, "$/node"),
                q("crf", crf, "/year"),
                q("kw", kw, "kW"),
                q("pue", inputs.pue, ""),
                q("usd_per_kwh", inputs.usd_per_kwh, "$/kWh"),
                q("colo", inputs.colo_usd_per_kw_month, "$/kW-month"),
                q("ops", inputs.ops_usd_per_node_month, "$/node-month"),
                q("gpus_per_node", gpus_per_node, "GPUs"),
            ],
            result.usd_per_gpu_hour,
            "$/GPU-hour",
            defaults_note(default_sources(inputs)),
        ),
    ]
    return result, steps


@dataclass(frozen=True)
class Tco:
    owned_usd_per_gpu_hour: float
    breakeven_utilization: float
    owned_usd_per_month: float
    rented_usd_per_month: float
    months_to_breakeven: float | None
    capex_usd: float
    nodes: float  # node-sized shares owned
    utilization: float  # rented GPU-hours over the owned fleet's GPU-hours
    owned_usd_per_mtok: float
    rented_usd_per_mtok: float
    renting_wins: tuple[str, ...]

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "renting_wins": list(self.renting_wins)
        }


def tco(
    node: NodeHour,
    gpus: float,
    rented_usd_per_gpu_hour: float,
    rented_usd_per_month: float,
    tokens_per_month: float,
    depreciation_years: float,
) -> tuple[Tco, list[Step]]:
    """Owned vs rented for the plan's ``gpus`` against ``rented_usd_per_month`` (what renting
    the plan costs, elastic or fixed), for the same ``tokens_per_month``.

    The owned fleet is the peak-sized one, in node-sized shares (``gpus / gpus_per_node``
    nodes: a 2-GPU fleet is not billed a whole 8-GPU server). Its utilization, in the sense of
    the break-even, is the share of its GPU-hours renting would pay for:
    ``utilization = rented_usd_per_month / (rented_usd_per_gpu_hour * gpus * 730)``; owning is
    cheaper exactly when ``utilization > breakeven_utilization``.
    """
    nodes = gpus / node.gpus_per_node
    owned_month = node.usd_per_hour * nodes * HOURS_PER_MONTH
    opex_month = node.opex_usd_per_hour * nodes * HOURS_PER_MONTH
    capex = node.capex_usd_per_node * nodes
    full_rent = rented_usd_per_gpu_hour * gpus * HOURS_PER_MONTH
    utilization = rented_usd_per_month / full_rent if full_rent > 0 else 0.0
    breakeven = (
        node.usd_per_gpu_hour / rented_usd_per_gpu_hour if rented_usd_per_gpu_hour > 0 else np.inf
    )
    saving = rented_usd_per_month - opex_month
    months = capex / saving if saving > 0 else None
    wins = []
    if utilization < breakeven:
        wins.append(f"utilization {utilization:.0%} is below the break-even {breakeven:.0%}")
    if months is None or months > depreciation_years * 12:
        wins.append("the hardware does not pay back within its depreciation years")
    elif months > GENERATION_MONTHS:
        wins.append(f"payback takes {months:.0f} months, longer than a GPU generation (~24 months)")
    per_mtok = 1e6 / tokens_per_month if tokens_per_month > 0 else np.inf
    result = Tco(
        owned_usd_per_gpu_hour=node.usd_per_gpu_hour,
        breakeven_utilization=float(breakeven),
        owned_usd_per_month=owned_month,
        rented_usd_per_month=rented_usd_per_month,
        months_to_breakeven=months,
        capex_usd=capex,
        nodes=nodes,
        utilization=utilization,
        owned_usd_per_mtok=owned_month * per_mtok,
        rented_usd_per_mtok=rented_usd_per_month * per_mtok,
        renting_wins=tuple(wins),
    )
    steps = [
        step(
            "breakeven_utilization",
            "owned_usd_per_gpu_hour / rented_usd_per_gpu_hour",
            [
                q("owned_usd_per_gpu_hour", node.usd_per_gpu_hour, "$/GPU-hour"),
                q("rented_usd_per_gpu_hour", rented_usd_per_gpu_hour, "$/GPU-hour"),
            ],  # fmt: skip
            breakeven,
            "",
            "owned costs the same idle or busy; rented scales with what is served",
        ),
        step(
            "tco_utilization",
            "rented_usd_per_month / (rented_usd_per_gpu_hour * gpus * 730)",
            [
                q("rented_usd_per_month", rented_usd_per_month, "$/month"),
                q("rented_usd_per_gpu_hour", rented_usd_per_gpu_hour, "$/GPU-hour"),
                q("gpus", gpus, "GPUs owned"),
            ],  # fmt: skip
            utilization,
            "",
            "the owned fleet's GPU-hours that renting the plan pays for",
        ),
        step(
            "owned_usd_per_month",
            "node_usd_per_hour * gpus / gpus_per_node * 730",
            [
                q("node_usd_per_hour", node.usd_per_hour, "$/node-hour"),
                q("gpus", gpus, "GPUs"),
                q("gpus_per_node", node.gpus_per_node, "GPUs"),
            ],
            owned_month,
            "$/month",
        ),
    ]
    if months is not None:
        steps.append(
            step(
                "months_to_breakeven",
                "capex_per_node * nodes / (rented_usd_per_month - opex_usd_per_hour * nodes * 730)",
                [
                    q("capex_per_node", node.capex_usd_per_node, "$"),
                    q("nodes", nodes, "node shares (gpus / gpus_per_node)"),
                    q("rented_usd_per_month", rented_usd_per_month, "$/month"),
                    q("opex_usd_per_hour", node.opex_usd_per_hour, "$/node-hour"),
                ],
                months,
                "months",
            )
        )
    return result, steps


def usd_per_mtok_curve(
    utilization: np.ndarray,
    gpus: float,
    capacity_tokens_per_s: float,
    owned_usd_per_gpu_hour: float,
    rented_usd_per_gpu_hour: float,
) -> dict[str, np.ndarray]:
    """$/M tokens vs mean utilization for a fleet of ``gpus`` that serves
    ``capacity_tokens_per_s`` when fully used: ``gpus * price / 3600 / (cap * u) * 1e6`` for
    owned and for rented (a fixed rented fleet, billed busy or idle)."""
    u = np.asarray(utilization, dtype=np.float64)
    with np.errstate(divide="ignore"):
        per = 1e6 / (3600.0 * capacity_tokens_per_s * u)
    return {
        "own": gpus * owned_usd_per_gpu_hour * per,
        "rent": gpus * rented_usd_per_gpu_hour * per,
    }
