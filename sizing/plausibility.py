"""Say so when an answer is absurd, and why nothing fits, in words a reviewer can act on.

``plausibility_warnings`` flags results that are arithmetically right but almost certainly
come from a wrong input (a rate typed in requests per hour as requests per second, a missing
zero in a price): 1,000,000 requests/s of chat sizes to about $980 M/month. The thresholds are
review limits, not physics: above them a human should look before anyone signs.

``nothing_fits`` turns a run's result rows into the binding reason when no option meets the
SLOs ("nothing fits: weights 167.8 GB per GPU > 71.9 GB usable on each of 2 H100 (TP2)"),
instead of a green "succeeded" with dashes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

SECONDS_PER_MONTH = 730 * 3600
#: Review limits (see the module docstring): above these a result gets a warning.
MAX_USD_PER_MONTH = 10e6  # $10 M/month = $120 M/year for one service
MAX_GPUS = 10_000  # a fleet on the scale of the largest training clusters
MAX_PEAK_RPS = 100_000  # requests/s; large consumer chat services peak in the tens of thousands
MAX_TOKENS_PER_MONTH = 1e13  # 10 T tokens/month
MAX_API_MULTIPLE = 20  # self-hosting at 20x the API's price per token


def finite_number(value) -> float | None:
    """A finite float, or None for blanks, booleans, text, NaN and infinities."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _three(number: float) -> str:
    """3 significant digits, grouped, never in e-notation: 1713.2 -> 1,710."""
    return f"{float(f'{number:.3g}'):,.15g}"


def _money(usd: float) -> str:
    for scale, suffix in ((1e9, " B"), (1e6, " M")):
        if usd >= scale:
            return f"${_three(usd / scale)}{suffix}"
    return f"${usd:,.0f}"


def plausibility_warnings(
    *,
    peak_rps: float | None,
    mean_rps: float | None = None,
    tokens_per_request: float | None = None,
    usd_per_month: float | None = None,
    gpus: float | None = None,
    usd_per_mtok: float | None = None,
    api_usd_per_mtok: float | None = None,
) -> list[str]:
    """Warnings (possibly none) for a run's traffic and its best option.

    Parameters
    ----------
    peak_rps, mean_rps : requests/s of the scenario.
    tokens_per_request : prompt + output tokens, mean (tokens).
    usd_per_month, gpus, usd_per_mtok : of the recommended option ($/month, GPUs, $/M tokens).
    api_usd_per_mtok : the API alternative's blended $/M tokens, when there is one.

    Examples
    --------
    >>> plausibility_warnings(peak_rps=1e6, usd_per_month=980e6, gpus=407_952)[0][:56]
    'peak 1,000,000 requests/s is above 100,000 requests/s: c'
    """
    out = []
    peak, mean = finite_number(peak_rps), finite_number(mean_rps)
    if peak is not None and peak > MAX_PEAK_RPS:
        out.append(
            f"peak {peak:,.0f} requests/s is above {MAX_PEAK_RPS:,} requests/s: check the unit "
            "(requests per second, not per minute or hour)"
        )
    tokens = finite_number(tokens_per_request)
    if mean is not None and tokens is not None:
        monthly = mean * tokens * SECONDS_PER_MONTH
        if monthly > MAX_TOKENS_PER_MONTH:
            out.append(
                f"{_three(monthly / 1e12)} T tokens/month is above "
                f"{MAX_TOKENS_PER_MONTH / 1e12:g} T: "
                "check the mean rate and the token lengths"
            )
    cost = finite_number(usd_per_month)
    if cost is not None and cost > MAX_USD_PER_MONTH:
        out.append(
            f"{_money(cost)}/month is above {_money(MAX_USD_PER_MONTH)}/month for one service: "
            "check the traffic and the prices before anyone signs"
        )
    count = finite_number(gpus)
    if count is not None and count > MAX_GPUS:
        out.append(
            f"{count:,.0f} GPUs is above {MAX_GPUS:,}, the scale of the largest clusters: "
            "check the traffic"
        )
    own, api = finite_number(usd_per_mtok), finite_number(api_usd_per_mtok)
    if own is not None and api and own > MAX_API_MULTIPLE * api:
        out.append(
            f"self-hosting at ${own:,.2f}/M tokens is {own / api:,.0f}x the API's "
            f"${api:,.2f}/M: check the GPU price and the traffic"
        )
    return out


def _get(row, name: str):
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def _option(row) -> str:
    tp, pp = _get(row, "tp") or 1, _get(row, "pp") or 1
    layout = f"TP{tp}" + (f" x PP{pp}" if pp > 1 else "")
    return (
        f"{_get(row, 'model_name')} {_get(row, 'precision') or ''} on "
        f"{_get(row, 'gpu_name')} {layout}"
    ).replace("  ", " ")


def nothing_fits(rows: Iterable, slo: Mapping | None = None) -> str | None:
    """The binding reason when no row meets the SLOs; None when one does.

    ``rows`` are result rows (dicts or objects) with ``fits``, ``meets_slo``, ``reason``,
    ``binding_constraint``, ``gpus_per_replica``, ``model_name``, ``gpu_name``, ``precision``,
    ``tp``, ``pp``, ``ttft_ms``, ``tpot_ms``. With no row fitting, the reason of the largest
    replica tried (most GPUs: the closest to fitting) is given; with rows fitting but missing
    the SLOs, the fitting row closest to the TPOT limit and what it misses.

    Examples
    --------
    >>> nothing_fits([{"fits": False, "meets_slo": False, "gpus_per_replica": 8,
    ...               "reason": "weights 1,342 GB > 640 GB usable"}])
    'nothing fits: weights 1,342 GB > 640 GB usable (1 candidate tried)'
    """
    rows = list(rows)
    if not rows or any(_get(r, "meets_slo") for r in rows):
        return None
    fitting = [r for r in rows if _get(r, "fits")]
    tried = f"{len(rows):,} candidate{'s' if len(rows) != 1 else ''} tried"
    if not fitting:
        largest = max(rows, key=lambda r: _get(r, "gpus_per_replica") or 0)
        return f"nothing fits: {_get(largest, 'reason') or 'no memory fit'} ({tried})"
    slo = slo or {}
    tpot_limit = finite_number(slo.get("tpot_ms"))
    ttft_limit = finite_number(slo.get("ttft_ms"))

    def shortfall(row) -> float:
        tpot, ttft = finite_number(_get(row, "tpot_ms")), finite_number(_get(row, "ttft_ms"))
        ratios = [
            value / limit
            for value, limit in ((tpot, tpot_limit), (ttft, ttft_limit))
            if value is not None and limit
        ]
        return max(ratios, default=math.inf)

    closest = min(fitting, key=shortfall)
    binding = _get(closest, "binding_constraint") or ""
    measured = {
        "tpot": (_get(closest, "tpot_ms"), tpot_limit),
        "ttft": (_get(closest, "ttft_ms"), ttft_limit),
    }
    value, limit = measured.get(binding, (None, None))
    if finite_number(value) is not None and limit:
        miss = f"{binding.upper()} {finite_number(value):,.3g} ms > {limit:,.3g} ms"
    else:
        miss = binding.upper() if binding in measured else (binding or "the SLOs")
    return (
        f"nothing meets the SLOs: the closest option, {_option(closest)}, misses {miss} "
        f"({len(fitting):,} of {len(rows):,} candidates fit)"
    )
