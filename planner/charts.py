"""Results charts as plain plotly figure dicts, each with a table alternative.

Pure functions over plain data (lists, dicts, the derivation JSON); no Django import. Every
builder returns a chart dict::

    {"id": str, "title": str, "figure": {"data": [...], "layout": {...}},
     "table": {"columns": [str, ...], "rows": [[...], ...]}, "note": str}

Column names and axis titles carry units.
"""

from __future__ import annotations

import math

import numpy as np

from sizing import breakeven as be
from sizing import headroom

PALETTE = [
    "#0b5cad",
    "#d4561d",
    "#2f8f4e",
    "#8e44ad",
    "#b8860b",
    "#c0392b",
    "#16a085",
    "#555f6b",
    "#e67e22",
    "#2c3e50",
    "#7f8c8d",
    "#27ae60",
]
SLO_COLOR = "#c0392b"


def _layout(x_title: str, y_title: str, **extra) -> dict:
    layout = {
        "height": 360,
        "margin": {"l": 70, "r": 30, "t": 20, "b": 60},
        "font": {"family": "system-ui, sans-serif", "size": 13},
        "xaxis": {"title": {"text": x_title}, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "automargin": True, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.25},
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
    }
    layout.update(extra)
    return layout


def _chart(chart_id, title, data, layout, columns, rows, note="") -> dict:
    return {
        "id": chart_id,
        "title": title,
        "figure": {"data": data, "layout": layout},
        "table": {"columns": columns, "rows": rows},
        "note": note,
    }


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------- $/M tokens by SKU
def cost_by_sku(rows: list[dict]) -> dict:
    """Bar of $/M output tokens of each SKU's recommended option.

    rows: [{"gpu_name", "label", "usd_per_mtok", "usd_per_month"}]; rows without a cost are
    listed in the table only.
    """
    priced = [r for r in rows if _finite(r.get("usd_per_mtok"))]
    data = [
        {
            "type": "bar",
            "name": "$/M output tokens",
            "x": [r["gpu_name"] for r in priced],
            "y": [round(r["usd_per_mtok"], 4) for r in priced],
            "text": [f"${r['usd_per_mtok']:.2f}" for r in priced],
            "textposition": "outside",
            "hovertext": [r.get("label", "") for r in priced],
            "marker": {"color": [PALETTE[i % len(PALETTE)] for i in range(len(priced))]},
        }
    ]
    table = [
        [r["gpu_name"], r.get("label", ""), r.get("usd_per_mtok"), r.get("usd_per_month")]
        for r in rows
    ]
    return _chart(
        "chart-cost-by-sku",
        "$/M output tokens by GPU SKU (recommended option per SKU)",
        data,
        _layout("GPU SKU", "$ per million output tokens", showlegend=False),
        ["GPU SKU", "recommended option", "$/M output tokens", "$/month"],
        table,
    )


# --------------------------------------------------------------------------- throughput vs latency
def throughput_latency(points: list[dict], tpot_slo_ms: float, percentile: float) -> dict:
    """Scatter: output tokens/s per GPU against TPOT, one trace per SKU, with the SLO line.

    points: [{"gpu_name", "label", "tok_s_per_gpu", "tpot_ms", "meets_slo"}] (fitting only).
    """
    usable = [p for p in points if _finite(p.get("tok_s_per_gpu")) and _finite(p.get("tpot_ms"))]
    data = []
    for i, gpu in enumerate(dict.fromkeys(p["gpu_name"] for p in usable)):
        mine = [p for p in usable if p["gpu_name"] == gpu]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": gpu,
                "x": [round(p["tok_s_per_gpu"], 2) for p in mine],
                "y": [round(p["tpot_ms"], 2) for p in mine],
                "text": [p["label"] for p in mine],
                "hovertemplate": "%{text}<br>%{x:,.0f} tok/s per GPU<br>TPOT %{y:.1f} ms"
                "<extra></extra>",
                "marker": {
                    "size": 10,
                    "color": PALETTE[i % len(PALETTE)],
                    "symbol": ["circle" if p["meets_slo"] else "x" for p in mine],
                },
            }
        )
    x_max = max((p["tok_s_per_gpu"] for p in usable), default=1.0) * 1.05
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"TPOT SLO ({tpot_slo_ms:g} ms)",
            "x": [0, round(x_max, 2)],
            "y": [tpot_slo_ms, tpot_slo_ms],
            "line": {"color": SLO_COLOR, "dash": "dash", "width": 2},
            "hoverinfo": "name",
        }
    )
    table = [
        [p["label"], p["gpu_name"], p.get("tok_s_per_gpu"), p.get("tpot_ms"), p["meets_slo"]]
        for p in usable
    ]
    return _chart(
        "chart-throughput-latency",
        f"Throughput vs p{percentile:g} TPOT per candidate (× = misses an SLO)",
        data,
        _layout("output tokens/s per GPU", f"TPOT p{percentile:g} (ms)"),
        ["candidate", "GPU SKU", "output tokens/s per GPU", "TPOT (ms)", "meets SLO"],
        table,
        note=f"The dashed line is the TPOT limit ({tpot_slo_ms:g} ms).",
    )


# --------------------------------------------------------------------------- memory breakdown
def _step(derivation: dict, name: str) -> dict | None:
    for step in derivation.get("steps") or []:
        if step.get("name") == name:
            return step
    return None


def _input(step: dict | None, prefix: str):
    if step is None:
        return None
    for item in step.get("inputs") or []:
        if str(item.get("name", "")).startswith(prefix):
            return item.get("value")
    return None


def memory_breakdown_gb(derivation: dict) -> dict | None:
    """Per-GPU memory from a derivation: HBM = weights + KV cache pool + activations + reserved.

    Reserved is what the engine does not hand out (HBM x (1 - gpu_memory_utilization)) plus its
    runtime overhead. None when the memory-fit steps are missing.
    """
    usable = _step(derivation, "usable_gb_per_gpu")
    budget = _step(derivation, "kv_budget_gb_per_gpu")
    hbm = _input(usable, "HBM")
    if usable is None or budget is None or not _finite(hbm):
        return None
    weights = _input(budget, "weights") or derivation.get("weights_gb_per_gpu") or 0.0
    activations = _input(budget, "workspace") or 0.0
    overhead = _input(budget, "runtime_overhead") or 0.0
    kv_pool = max(float(budget.get("value") or 0.0), 0.0)
    reserved = max(hbm - float(usable.get("value") or hbm), 0.0) + overhead
    per_sequence = _step(derivation, "kv_gb_per_sequence_per_gpu")
    batch = _step(derivation, "batch")
    kv_in_use = None
    if per_sequence is not None and batch is not None:
        dp = _input(batch, "DP") or 1.0
        kv_in_use = float(batch["value"]) / dp * float(per_sequence["value"])
    return {
        "hbm_gb": float(hbm),
        "weights_gb": float(weights),
        "kv_cache_gb": kv_pool,
        "activations_gb": float(activations),
        "reserved_gb": reserved,
        "kv_in_use_gb": kv_in_use,
    }


MEMORY_PARTS = [
    ("weights_gb", "weights", "#0b5cad"),
    ("kv_cache_gb", "KV cache (pool)", "#2f8f4e"),
    ("activations_gb", "activations", "#d4561d"),
    ("reserved_gb", "reserved", "#8b949e"),
]


def memory_breakdown(rows: list[dict]) -> dict:
    """Stacked bars of per-GPU memory. rows: [{"label", **memory_breakdown_gb(...)}]."""
    data = [
        {
            "type": "bar",
            "name": name,
            "x": [r["label"] for r in rows],
            "y": [round(r[key], 2) for r in rows],
            "marker": {"color": color},
            "hovertemplate": f"{name}: %{{y:.1f}} GB<extra></extra>",
        }
        for key, name, color in MEMORY_PARTS
    ]
    table = [
        [
            r.get("option", r["label"]),
            r["hbm_gb"],
            r["weights_gb"],
            r["kv_cache_gb"],
            r["activations_gb"],
            r["reserved_gb"],
            r.get("kv_in_use_gb"),
        ]
        for r in rows
    ]
    return _chart(
        "chart-memory",
        "Memory per GPU of each recommended option",
        data,
        _layout("option", "GB per GPU", barmode="stack"),
        [
            "option",
            "HBM (GB)",
            "weights (GB)",
            "KV cache pool (GB)",
            "activations (GB)",
            "reserved (GB)",
            "KV in use at the operating batch (GB)",
        ],
        table,
        note="Reserved = HBM not handed to the engine plus its runtime overhead.",
    )


# --------------------------------------------------------------------------- break-even
def breakeven_inputs(derivation: dict) -> dict | None:
    """The break-even parameters from a derivation, or None without an API alternative.

    v_r tokens/month one replica carries, K $/month per replica, s fixed (spare + warm)
    replicas, p API $/M tokens, plus the crossing and the traffic's own volume.
    """
    summary = derivation.get("breakeven")
    step = _step(derivation, "crossing_tokens_per_month")
    if not summary or step is None:
        return None
    v_r, k, s, p = (_input(step, name) for name in ("v_r", "K", "s", "p"))
    if not all(_finite(v) for v in (v_r, k, s, p)) or v_r <= 0 or p <= 0:
        return None
    return {
        "tokens_per_month_per_replica": float(v_r),
        "usd_per_replica_month": float(k),
        "fixed_replicas": float(s),
        "api_usd_per_mtok": float(p),
        "crossing_tokens_per_month": summary.get("crossing_tokens_per_month"),
        "traffic_tokens_per_month": summary.get("traffic_tokens_per_month"),
    }


def selfhost_usd_per_month(volume: float, params: dict) -> float:
    """The core's step function (``sizing.breakeven.selfhost_usd_per_month``) at one volume."""
    return float(
        be.selfhost_usd_per_month(
            volume,
            params["tokens_per_month_per_replica"],
            params["usd_per_replica_month"],
            params["fixed_replicas"],
        )
    )


def breakeven(params: dict, label: str, max_points: int = 400) -> dict:
    """Self-host (step) vs API (line) monthly cost against monthly token volume."""
    v_r = params["tokens_per_month_per_replica"]
    crossing = params.get("crossing_tokens_per_month")
    traffic = params.get("traffic_tokens_per_month") or 0.0
    v_max = max(2 * traffic, 3 * v_r)
    if _finite(crossing):
        v_max = max(v_max, 1.5 * crossing)
    steps = math.ceil(v_max / v_r)
    if steps <= max_points:
        volumes = [k * v_r for k in range(steps + 1)]
    else:
        volumes = [v_max * i / max_points for i in range(max_points + 1)]
    selfhost = [
        selfhost_usd_per_month(volumes[i + 1] if i + 1 < len(volumes) else v, params)
        for i, v in enumerate(volumes)
    ]
    per_token = params["api_usd_per_mtok"] / 1e6
    to_billions = 1e-9
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"self-host ({label})",
            "x": [round(v * to_billions, 4) for v in volumes],
            "y": [round(y, 2) for y in selfhost],
            "line": {"shape": "hv", "color": "#0b5cad", "width": 2},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"API at ${params['api_usd_per_mtok']:.3g}/M tokens",
            "x": [0, round(v_max * to_billions, 4)],
            "y": [0, round(v_max * per_token, 2)],
            "line": {"color": "#d4561d", "width": 2},
        },
    ]
    shapes, annotations = [], []
    table = []
    if _finite(crossing):
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": "break-even",
                "x": [round(crossing * to_billions, 4)],
                "y": [round(crossing * per_token, 2)],
                "text": [f"break-even {crossing * to_billions:,.1f} B tokens/month"],
                "textposition": "top left",
                "marker": {"size": 12, "color": SLO_COLOR, "symbol": "diamond"},
            }
        )
        table.append(["break-even", crossing, crossing * per_token, None])
        note = f"Self-hosting stays no dearer from {crossing * to_billions:,.2f} B tokens/month."
    else:
        note = "Self-hosting never gets cheaper than the API at these prices."
    if traffic:
        shapes.append(
            {
                "type": "line",
                "x0": traffic * to_billions,
                "x1": traffic * to_billions,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dot", "color": "#555f6b"},
            }
        )
        annotations.append(
            {
                "x": traffic * to_billions,
                "yref": "paper",
                "y": 1,
                "text": "this traffic",
                "showarrow": False,
                "yanchor": "bottom",
            }
        )
        table.append(
            ["this traffic", traffic, traffic * per_token, selfhost_usd_per_month(traffic, params)]
        )
    for v in (volumes[len(volumes) // 4], volumes[len(volumes) // 2], volumes[-1]):
        table.append(["", v, v * per_token, selfhost_usd_per_month(v, params)])
    return _chart(
        "chart-breakeven",
        f"Self-host vs API monthly cost ({label})",
        data,
        _layout(
            "token volume (billion tokens/month, input + output)",
            "$ per month",
            shapes=shapes,
            annotations=annotations,
        ),
        ["point", "tokens/month", "API ($/month)", "self-host ($/month)"],
        table,
        note=note,
    )


# --------------------------------------------------------------------------- day profile
def daily_profile(
    hourly_rps: list[float],
    requests_per_s_per_replica: float,
    target_utilization: float,
    burst_factor: float,
    fixed_replicas: int,
    fleet_replicas: int,
    label: str,
) -> dict | None:
    """Replicas needed each hour (autoscaled) and utilization, for a 24-hour profile.

    needed_h = ceil(rps_h * burst / (X * target_utilization)) + spare + warm pool (at least one
    serving replica); utilization_h = rps_h / (replicas * X), for the autoscaled fleet and for
    the fixed fleet sized for the peak.
    """
    x = requests_per_s_per_replica
    if len(hourly_rps) != 24 or not _finite(x) or x <= 0:
        return None
    # the chain's own headroom stage, hour by hour (one formula: sizing.headroom)
    rps = np.asarray(hourly_rps, dtype=np.float64)
    serving = np.maximum(headroom.serving_replicas(rps, x, target_utilization, burst_factor), 1)
    total = headroom.total_replicas(serving, fixed_replicas)
    needed = [int(v) for v in total]
    util_auto = [100 * float(u) for u in headroom.utilization(rps, total, x)]
    util_fixed = [
        100 * float(u) if fleet_replicas else None
        for u in headroom.utilization(rps, fleet_replicas, x)
    ]
    hours = list(range(24))
    data = [
        {
            "type": "bar",
            "name": "replicas needed (autoscaled)",
            "x": hours,
            "y": needed,
            "marker": {"color": "#9cc3e8"},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": f"fixed fleet ({fleet_replicas} replicas)",
            "x": hours,
            "y": [fleet_replicas] * 24,
            "line": {"color": "#0b5cad", "dash": "dash"},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "utilization, autoscaled (%)",
            "x": hours,
            "y": [round(u, 1) for u in util_auto],
            "yaxis": "y2",
            "line": {"color": "#2f8f4e"},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "utilization, fixed fleet (%)",
            "x": hours,
            "y": [round(u, 1) if u is not None else None for u in util_fixed],
            "yaxis": "y2",
            "line": {"color": "#d4561d"},
        },
    ]
    layout = _layout(
        "hour of day",
        "replicas",
        yaxis2={
            "title": {"text": "utilization (%)"},
            "overlaying": "y",
            "side": "right",
            "range": [0, 100],
        },
    )
    layout["xaxis"]["dtick"] = 2
    table = [[h, hourly_rps[h], needed[h], util_auto[h], util_fixed[h]] for h in hours]
    return _chart(
        "chart-daily",
        f"Replicas and utilization over the day ({label})",
        data,
        layout,
        [
            "hour",
            "requests/s",
            "replicas needed",
            "utilization autoscaled (%)",
            "utilization fixed fleet (%)",
        ],
        table,
    )


# --------------------------------------------------------------------------- fleet over time
def fleet_day(day: dict, label: str) -> dict | None:
    """Replicas over the day (every 10 minutes): ready, warm and cold-starting stacked, the
    offered rate, and the $/hour billed (``planner.lifecycle`` simulated them)."""
    if not day or not day.get("minute"):
        return None
    hours = [m / 60 for m in day["minute"]]
    data = [
        {"type": "bar", "name": name, "x": hours, "y": day[key], "marker": {"color": color}}
        for name, key, color in (
            ("ready", "ready", "#0b5cad"),
            ("warm pool", "warm", "#9cc3e8"),
            ("cold-starting", "cold_starting", "#d4561d"),
        )
    ]
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "$/hour billed",
            "x": hours,
            "y": day.get("usd_per_hour") or [],
            "yaxis": "y2",
            "line": {"color": "#2f8f4e"},
        }
    )
    layout = _layout(
        "hour of day",
        "replicas",
        barmode="stack",
        bargap=0,
        yaxis2={"title": {"text": "$ per hour"}, "overlaying": "y", "side": "right",
                "rangemode": "tozero"},
    )  # fmt: skip
    layout["xaxis"]["dtick"] = 2
    rows = [
        [round(h, 2), day["rate_rps"][i], day["ready"][i], day["warm"][i],
         day["cold_starting"][i], (day.get("usd_per_hour") or [None] * len(hours))[i]]
        for i, h in enumerate(hours)
    ]  # fmt: skip
    return _chart(
        "chart-fleet-day",
        f"Replicas over the day, autoscaled ({label})",
        data,
        layout,
        ["hour", "requests/s", "ready", "warm", "cold-starting", "$/hour"],
        rows,
        f"{day.get('slo_share', 1):.2%} of the day's requests inside the SLO; "
        f"+{day.get('spare', 0)} spare replica(s) billed on top",
    )


def own_rent_api(curve: dict, label: str) -> dict | None:
    """$/M tokens (input + output) vs mean utilization: owned, rented, and the API's flat
    blended price."""
    if not curve or not curve.get("utilization"):
        return None
    u = [100 * v for v in curve["utilization"]]
    data = [
        {"type": "scatter", "mode": "lines", "name": "own", "x": u,
         "y": curve["own_usd_per_mtok"], "line": {"color": "#0b5cad"}},
        {"type": "scatter", "mode": "lines", "name": "rent", "x": u,
         "y": curve["rent_usd_per_mtok"], "line": {"color": "#d4561d"}},
    ]  # fmt: skip
    api = curve.get("api_usd_per_mtok")
    if _finite(api):
        line = {"color": "#2f8f4e", "dash": "dash"}
        data.append(
            {"type": "scatter", "mode": "lines", "name": "API", "x": u, "y": [api] * len(u),
             "line": line}
        )  # fmt: skip
    layout = _layout("mean utilization (%)", "$ per million tokens (input + output)")
    layout["yaxis"]["type"] = "log"
    layout["yaxis"].pop("rangemode", None)
    rows = [
        [u[i], curve["own_usd_per_mtok"][i], curve["rent_usd_per_mtok"][i], api]
        for i in range(len(u))
    ]
    return _chart(
        "chart-own-rent-api",
        f"$/M tokens vs utilization: own, rent, API ({label})",
        data,
        layout,
        ["utilization (%)", "own $/M tokens", "rent $/M tokens", "API $/M tokens"],
        rows,
    )
