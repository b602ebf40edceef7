"""The run's logic, one implementation for every door (a Celery run, ``manage.py plan``).

1. ``runner.size_candidates``: every candidate through the chain with the analytic
   percentile model (vectorized), each with an optimistic bound on its cost.
2. Rounds of ``next_to_simulate`` -> ``simulate_round`` (bound-and-prune per GPU SKU x model): each
   round simulates, per (GPU, model) group, the cheapest analytic candidate not simulated yet
   whose bound could still beat that group's best simulated option; a round with nothing to do
   ends the search. Grouping by model too gives every cell of the model x GPU grid
   (``summary.per_model``) its own simulated answer, not only each GPU's cheapest model.
   The choice depends only on rows' own numbers, and each simulated row only on its own
   inputs (``tails.cache_key`` seeds it), so a run, a rerun and ``plan`` simulate the same
   candidates and get the same numbers.
3. ``finish``: rows that were never simulated are marked "not evaluated" (their values
   cleared: they have no answer, only a bound that cannot win), every row is ranked, and each
   GPU's recommendation is its cheapest *simulated* row meeting the SLO (each grid cell's
   likewise, within its model). With tails off
   (``SIZING_SIMULATE_TAILS``, ``plan --no-tails``) every row keeps its analytic sizing and
   the recommendation says so.

A Celery run spreads each round's searches over the workers (a chord of
``simulate_candidates`` tasks, shares of up to three searches, each putting its searches in
the cache), then its callback runs
``simulate_round`` on the round's rows, which finds every search in the cache and re-sizes
the rows in one chain call; ``plan`` runs ``simulate_round`` in-process. Both call these
functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from planner import lifecycle, runner, tails
from planner import snapshot as snap

#: Candidates simulated per (GPU, model) group in one round (rounds run one after the other;
#: the groups of a round run in parallel on the workers).
PER_ROUND = 1
#: At most this many simulated candidates per (GPU, model) group: past it the rest are "not
#: evaluated". Small because the groups multiply (3 models x 4 GPUs = 12 groups in the typical
#: scenario) and bound-and-prune rarely needs more than two per group.
MAX_SIMULATED_PER_GROUP = 3
VALUE_FIELDS = (
    "ttft_ms",
    "tpot_ms",
    "ttft_ms_p50",
    "ttft_ms_p95",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p95",
    "tpot_ms_p99",
    "throughput_tok_s",
    "usd_per_hour",
    "usd_per_month",
    "usd_per_mtok",
    "tokens_per_usd",
    "headroom",
    "nodes",
)


def is_simulated(row: dict) -> bool:
    return row.get("latency_source") == "simulated"


def _metric(row: dict) -> tuple[float, float]:
    """What "cheaper" means: $/month, then GPUs (unpriced GPUs compare on GPUs alone)."""
    usd = row.get("usd_per_month")
    return (usd if usd is not None else math.inf, row.get("gpus") or math.inf)


def _bound_metric(row: dict) -> tuple[float, float]:
    bound = (row.get("derivation") or {}).get("bound")
    if not bound:
        return (math.inf, math.inf)
    usd = bound.get("usd_per_month")
    return (usd if usd is not None else math.inf, bound["gpus"])


def _failed(row: dict) -> bool:
    return bool((row.get("derivation") or {}).get("simulation_error"))


def can_be_simulated(row: dict) -> bool:
    """Fits, and at least one closed form says some rate can meet the SLO (else its bound is
    None: ``runner.optimistic_bounds``)."""
    return bool(row["fits"] and (row.get("derivation") or {}).get("bound"))


def prune_group(row: dict) -> tuple[str, str]:
    """The bound-and-prune group of a row: its GPU SKU and model."""
    return (row["gpu_slug"], row["model_name"])


def next_to_simulate(rows: list[dict]) -> list[str]:
    """This round's candidate keys (see the module docstring)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault(prune_group(row), []).append(row)
    picked: list[str] = []
    for group_rows in groups.values():
        done = [r for r in group_rows if is_simulated(r) or _failed(r)]
        if len(done) >= MAX_SIMULATED_PER_GROUP:
            continue
        best = min((_metric(r) for r in done if r["meets_slo"]), default=(math.inf, math.inf))
        open_rows = [
            r
            for r in group_rows
            if can_be_simulated(r)
            and not is_simulated(r)
            and not _failed(r)
            and _bound_metric(r) < best
        ]
        # cheapest analytic answer first; rows the analytic model fails go by their bound
        open_rows.sort(
            key=lambda r: (not r["meets_slo"], _metric(r), _bound_metric(r), r["candidate_key"])
        )
        room = MAX_SIMULATED_PER_GROUP - len(done)
        picked += [r["candidate_key"] for r in open_rows[: min(PER_ROUND, room)]]
    return picked


def search(inputs: dict, candidate_index: int, row: dict, cache=None) -> dict:
    """The candidate's tail search as plain JSON: from ``cache`` (get(key) / put(key, value)
    or None) when it holds it, else simulated and put there."""
    key = tails.cache_key(inputs, candidate_index)
    found = cache.get(key) if cache is not None else None
    if found is not None:
        return found
    if snap.is_disagg(inputs["candidates"][candidate_index]):
        found = tails.disagg_search(inputs, candidate_index, row, key)
    else:
        analytic = row["derivation"].get("requests_per_s_per_replica") or 0.0
        mean_value = (row["derivation"].get("mean_value") or {}).get("requests_per_s_per_replica")
        warm = analytic > 0
        found = tails.search(inputs, candidate_index, analytic or mean_value or 0.0, warm, key)
    if cache is not None:
        cache.put(key, found)
    return found


def not_cached(inputs: dict, keys: list[str], cache) -> list[str]:
    """The candidate keys whose searches ``cache`` does not hold (``cache.held(hashes)``:
    the subset of the search keys it holds), in order."""
    index = {c["key"]: i for i, c in enumerate(inputs["candidates"])}
    hashes = {key: tails.cache_key(inputs, index[key]) for key in keys}
    held = cache.held(list(hashes.values()))
    return [key for key in keys if hashes[key] not in held]


def resize(inputs: dict, searched: list[tuple[int, dict, dict]]) -> list[dict]:
    """Rows re-sized on their searches, ``(candidate index, analytic row, search)`` each, in
    one call (``tails.simulated_rows``); each keeps its analytic row's optimistic bound."""
    values = tails.simulated_rows(inputs, [(i, found) for i, _, found in searched])
    for v, (_, row, _) in zip(values, searched, strict=True):
        v["derivation"]["bound"] = row["derivation"].get("bound")
    return values


def with_reason(row: dict, exc: Exception) -> dict:
    """The analytic row with why its simulation failed: it stays unsimulated (never
    recommended), and the run goes on."""
    derivation = dict(row["derivation"])
    derivation["simulation_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return {**row, "derivation": derivation}


def simulate_round(
    inputs: dict, items: list[tuple[int, dict]], cache=None, passing: tuple = ()
) -> list[dict]:
    """A round's rows, ``(candidate index, analytic row)`` each, on simulated tails: each
    searched (``search``; an error leaves that row analytic with its reason), then all
    re-sized in one call (should that fail, row by row, so one bad row takes no other down).
    The values are each row's own: the same as a round of one row each. Exceptions of the
    ``passing`` types propagate instead (a task's transient database errors: it retries)."""
    out: dict[int, dict] = {}
    searched = []
    for i, row in items:
        try:
            searched.append((i, row, search(inputs, i, row, cache)))
        except passing:
            raise
        except Exception as exc:  # noqa: BLE001 - a simulator bug must not fail the run
            out[i] = with_reason(row, exc)
    try:
        out.update((item[0], v) for item, v in zip(searched, resize(inputs, searched), strict=True))
    except passing:
        raise
    except Exception:  # noqa: BLE001 - find the row that fails, keep the others
        for i, row, found in searched:
            try:
                out[i] = resize(inputs, [(i, row, found)])[0]
            except passing:
                raise
            except Exception as exc:  # noqa: BLE001
                out[i] = with_reason(row, exc)
    return [out[i] for i, _ in items]


def search_rounds(inputs: dict, rows: list[dict], run_round: Callable[[list[str]], None]) -> int:
    """In-process rounds until nothing is left to simulate; ``run_round(keys)`` updates
    ``rows`` in place. Returns the number of simulated candidates."""
    count = 0
    while keys := next_to_simulate(rows):
        run_round(keys)
        count += len(keys)
    return count


def finish(rows: list[dict], tails_on: bool) -> tuple[list[dict], dict[str, str]]:
    """Mark unevaluated rows, rank all, pick each GPU's recommendation.

    Returns the rows best first (with ``rank`` and ``recommended`` set) and
    {gpu_slug: recommended candidate key}.
    """
    if tails_on:
        best_simulated = _best_simulated(rows)
        for row in rows:
            if row["fits"] and not is_simulated(row) and can_be_simulated(row):
                _not_evaluated(row, best_simulated.get(prune_group(row)))
    eligible = [r for r in rows if is_simulated(r) or not tails_on]
    order, best = runner.rank_and_pick([{f: r[f] for f in runner.RANK_FIELDS} for r in eligible])
    by_key = {r["candidate_key"]: r for r in rows}
    rest = sorted(
        (r for r in rows if r["candidate_key"] not in set(order)),
        key=lambda r: (not r["fits"], not r["evaluated"], _bound_metric(r), r["candidate_key"]),
    )
    ranked = [by_key[k] for k in order] + rest
    for rank, row in enumerate(ranked, start=1):
        row["rank"] = rank
        row["recommended"] = best.get(row["gpu_slug"]) == row["candidate_key"]
    return ranked, best


def _best_simulated(rows: list[dict]) -> dict[tuple[str, str], tuple[float, float]]:
    """Each prune group's best simulated option meeting the SLO (``_metric``)."""
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for r in rows:
        if is_simulated(r) and r["meets_slo"]:
            group = prune_group(r)
            best[group] = min(best.get(group, (math.inf, math.inf)), _metric(r))
    return best


def _not_evaluated(row: dict, best: tuple[float, float] | None) -> None:
    """Clear a pruned row's values and say why (its bound, and ``best``, its group's best
    simulated option: the option it could not beat)."""
    bound = row["derivation"]["bound"]
    if _failed(row):
        why = f"not evaluated: the simulation failed ({row['derivation']['simulation_error']})"
    elif best is None or not _bound_metric(row) >= best:
        why = (
            "not evaluated: the simulation budget for this model on this GPU "
            f"({MAX_SIMULATED_PER_GROUP} candidates) was spent first"
        )
    else:
        why = f"not evaluated: cannot beat {_money(best)} (its optimistic bound {_bound(bound)})"
    for field in VALUE_FIELDS:
        row[field] = None
    row.update(
        evaluated=False,
        meets_slo=False,
        replicas=0,
        gpus=0,
        reason=why,
        binding_constraint="",
        latency_source="analytic",
    )


def _money(metric: tuple[float, float]) -> str:
    usd, gpus = metric
    return f"${usd:,.0f}/month" if math.isfinite(usd) else f"{gpus:,.0f} GPUs"


def _bound(bound: dict) -> str:
    usd = bound.get("usd_per_month")
    return f"${usd:,.0f}/month" if usd is not None else f"{bound['gpus']:,} GPUs"


# ---------------------------------------------------------------------------- summary
def summarize(inputs: dict, ranked: list[dict], best: dict[str, str], tails_on: bool) -> dict:
    """The run's summary: per GPU its recommendation (with band, profile, latency source and
    statistic, price note, break-even) or why there is none; ``ranked`` rows need full values
    only for the recommended ones."""
    by_key = {r["candidate_key"]: r for r in ranked}
    per_gpu = []
    for slug, name in inputs.get("gpu_names", {}).items():
        row = by_key.get(best.get(slug, ""))
        if row is None:
            per_gpu.append(
                {
                    "gpu": slug,
                    "gpu_name": name,
                    "recommended": None,
                    "why_none": runner.why_none(ranked, slug),
                }
            )
            continue
        entry = {"gpu": slug, "gpu_name": name, **recommendation(row, inputs)}
        per_gpu.append(entry | fleet_life_fields(row, inputs))
    overall = next((r for r in ranked if r.get("recommended")), None)
    summary = {
        "candidates": len(ranked),
        "meeting_slo": sum(bool(r["meets_slo"]) for r in ranked),
        "fitting": sum(bool(r["fits"]) for r in ranked),
        "simulated": sum(is_simulated(r) for r in ranked),
        "not_evaluated": sum(not r.get("evaluated", True) for r in ranked),
        "tails": "simulated" if tails_on else "analytic",
        "best": overall["candidate_key"] if overall else None,
        "per_gpu": per_gpu,
        "price_sheet": inputs.get("price_sheet"),
        "gpus_without_price": inputs.get("gpus_without_price", []),
    }
    summary["per_model"] = per_model(inputs, ranked, pick_cells(ranked, tails_on))
    return summary


def pick_cells(ranked: list[dict], tails_on: bool) -> dict[tuple[str, str], str]:
    """Each (model name, GPU) cell's answer: the per-GPU rule within one model, i.e. its
    first ranked row that meets the SLO and was simulated (any row with tails off)."""
    cells: dict[tuple[str, str], str] = {}
    for row in ranked:
        if row["meets_slo"] and (is_simulated(row) or not tails_on):
            cells.setdefault((row["model_name"], row["gpu_slug"]), row["candidate_key"])
    return cells


def per_model(inputs: dict, ranked: list[dict], cells: dict[tuple[str, str], str]) -> list[dict]:
    """The model x GPU grid: per model, per GPU its answer (``recommendation``) or why none,
    the cheapest cell, and the model's own API alternative with that cell's break-even."""
    by_key = {r["candidate_key"]: r for r in ranked}
    disagg = disaggregations(inputs, [by_key[k] for k in cells.values() if k in by_key])
    out = []
    for slug, spec in (inputs.get("models") or {}).items():
        name = spec.get("name", slug)
        rows = [r for r in ranked if r["model_name"] == name]
        per_gpu = [
            _cell(inputs, rows, by_key.get(cells.get((name, gpu), "")), gpu, gpu_name, disagg)
            for gpu, gpu_name in inputs.get("gpu_names", {}).items()
        ]
        answered = [c for c in per_gpu if c["recommended"]]
        best = min(answered, key=_metric, default=None)
        out.append(
            {
                "model": slug,
                "model_name": name,
                "per_gpu": per_gpu,
                "best": best,
                "api": _model_api(inputs, slug, best),
            }
        )
    return out


def _cell(
    inputs: dict, rows: list[dict], row: dict | None, gpu: str, gpu_name: str, disagg: dict
) -> dict:
    if row is None:
        gpu_rows = [r for r in rows if r["gpu_slug"] == gpu]
        return {
            "gpu": gpu,
            "gpu_name": gpu_name,
            "recommended": None,
            "why_none": runner.why_none(gpu_rows, gpu) if gpu_rows else "no candidate",
        }
    return {
        "gpu": gpu,
        "gpu_name": gpu_name,
        **recommendation(row, inputs),
        "disaggregation": disagg.get(row["candidate_key"]) or _ranked_disagg(row, rows),
    }


def _ranked_disagg(row: dict, rows: list[dict]) -> dict | None:
    """A cell whose answer is itself a disaggregated row: its pools against the cell's
    cheapest aggregated row that was sized the same way (simulated when the answer was,
    meeting the SLO), both the rows' own numbers (not the mean-value comparison)."""
    if row.get("mode") != "disagg":
        return None
    pools = (row.get("derivation") or {}).get("pools") or {}
    same = [r for r in rows if r.get("mode") != "disagg" and r["gpu_slug"] == row["gpu_slug"]
            and r["meets_slo"] and is_simulated(r) == is_simulated(row)]  # fmt: skip
    agg = min(same, key=_metric, default=None)
    usd, agg_usd = row.get("usd_per_month"), (agg or {}).get("usd_per_month")
    saving = agg_usd - usd if usd is not None and agg_usd is not None else None
    return {
        "ranked": True,
        "cheaper": agg is None or (saving is not None and saving > 0),
        "disagg_usd_per_month": usd,
        "agg_usd_per_month": agg_usd,
        "agg_candidate": (agg or {}).get("candidate_key"),
        "saving_usd_per_month": saving,
        "prefill": dict(pools.get("prefill") or {}),
        "decode": dict(pools.get("decode") or {}),
        "prefill_gpus": row.get("prefill_gpus"),
        "decode_gpus": row.get("decode_gpus"),
        "kv_transfer_ms": row.get("kv_transfer_ms"),
        "latency_source": row.get("latency_source"),
    }


def disaggregations(inputs: dict, rows: list[dict]) -> dict[str, dict | None]:
    """Per cell row (by candidate key): whether separate prefill and decode pools of its model
    and GPU would be cheaper under the SLOs than the aggregated layout recommended
    (``sizing.disagg.compare_cells``: mean-value sizing of both at the scenario's peak x
    burst, the cell's calibration profile for both, all cells in one vectorized call); USD
    per month at the cell's GPU price. None when the row cannot be rebuilt."""
    from sizing.disagg import compare_cells

    keys = [c.get("key") for c in inputs.get("candidates") or []]
    out: dict[str, dict | None] = {r.get("candidate_key"): None for r in rows}
    # an answer that is itself disaggregated is compared with ranked rows (``_ranked_disagg``)
    wanted = [r["candidate_key"] for r in rows
              if r.get("candidate_key") in keys and r.get("mode") != "disagg"]  # fmt: skip
    if not wanted:
        return out
    cands = snap.candidates(inputs, [keys.index(k) for k in wanted])
    priced = [(k, c) for k, c in zip(wanted, cands, strict=True)
              if math.isfinite(c.gpu.usd_per_gpu_hour)]  # fmt: skip
    if not priced:
        return out
    traffic, slo, policy = snap.traffic(inputs), snap.slo(inputs), snap.policy(inputs)
    cells = [
        dict(model=c.model, gpu=c.gpu, weight_precision=c.weight_precision,
             kv_precision=c.kv_precision, engine=c.engine, calibration=c.calibration,
             aggregated={"tp": c.parallelism.tp, "pp": c.parallelism.pp,
                         "ep": c.parallelism.ep, "dp": c.parallelism.dp})
        for _, c in priced
    ]  # fmt: skip
    args = (traffic.prompt_tokens_mean, traffic.output_tokens_mean,
            traffic.peak_rps * policy.burst_factor, slo.ttft_ms / 1e3, slo.tpot_ms / 1e3,
            policy.target_utilization)  # fmt: skip
    try:
        results = compare_cells(cells, *args)
    except (ValueError, ZeroDivisionError, FloatingPointError):
        results = [_compare_one(cell, args) for cell in cells]  # find the cell that fails
    for (key, _), result in zip(priced, results, strict=True):
        out[key] = _per_month(result)
    return out


def _compare_one(cell: dict, args: tuple) -> dict:
    from sizing.disagg import compare_cells

    try:
        return compare_cells([cell], *args)[0]
    except (ValueError, ZeroDivisionError, FloatingPointError) as exc:
        return {"cheaper": False, "reason": f"not evaluated: {exc}"}


def _per_month(result: dict) -> dict:
    """The comparison's USD per hour as USD per month (None where not finite)."""
    from sizing.cost import HOURS_PER_MONTH

    result = dict(result)
    for name in ("saving", "disagg", "agg"):
        value = result.pop(f"{name}_usd_per_hour", None)
        if value is not None:
            result[f"{name}_usd_per_month"] = value * HOURS_PER_MONTH if math.isfinite(value) \
                else None  # fmt: skip
    result.pop("ratio_saving_usd_per_hour", None)
    return result


def _model_api(inputs: dict, model_slug: str, best: dict | None) -> dict:
    """The model's API price and where it comes from, with its best cell's break-even."""
    price = snap.api_price_json(inputs, model_slug)
    best = best or {}
    if not price:
        return {"label": None, "from": None, "note": _no_api_note(inputs, model_slug)}
    return {
        **price,
        "from": "scenario" if inputs.get("api_price") else "price sheet",
        "usd_per_mtok": (best.get("breakeven") or {}).get("api_usd_per_mtok"),
        "breakeven": best.get("breakeven"),
        "verdict": best.get("api_verdict"),
        "hybrid": best.get("hybrid"),
        "note": None,
    }


def _no_api_note(inputs: dict, model_slug: str) -> str:
    name = (inputs.get("models") or {}).get(model_slug, {}).get("name", model_slug)
    sheet = inputs.get("price_sheet") or {}
    if "api_prices_by_model" not in inputs:
        return "no API price given: no break-even"
    where = f"{sheet['name']} v{sheet['version']}" if sheet else "the price sheet"
    return f"no API price for {name} on {where}: no break-even (another model's is not used)"


def recommendation(row: dict, inputs: dict) -> dict:
    """The fields a recommendation card, the API summary and the exports show, from one row
    (the row's own values: never re-derived)."""
    derivation = row.get("derivation") or {}
    _, price_source = snap.gpu_price(inputs, row["gpu_slug"], _priced_gpus(inputs, row))
    band = derivation.get("band")
    return {
        "recommended": row["candidate_key"],
        "model": row["model_name"],
        "precision": row["precision"],
        "expert_precision": row.get("expert_precision") or "",
        "tp": row["tp"],
        "gpus": row["gpus"],
        "replicas": row["replicas"],
        "usd_per_month": row["usd_per_month"],
        "usd_per_hour": row["usd_per_hour"],
        "usd_per_mtok": row["usd_per_mtok"],
        "tokens_per_usd": row["tokens_per_usd"],
        "ttft_ms": row["ttft_ms"],
        "tpot_ms": row["tpot_ms"],
        "ttft_ms_p95": row.get("ttft_ms_p95"),
        "tpot_ms_p95": row.get("tpot_ms_p95"),
        "latency_source": row.get("latency_source"),
        "latency_statistic": row.get("latency_statistic"),
        "profile": row.get("profile"),
        "band": band,
        "breakeven": derivation.get("breakeven"),
        "price_note": derivation.get("price_note"),
        "price_source": price_source,
        "nodes": row.get("nodes"),
        "gpus_per_node": row.get("gpus_per_node"),
        # disaggregated (separate prefill and decode pools) or aggregated, and the pools
        "mode": row.get("mode") or "agg",
        "pools": derivation.get("pools"),
        "kv_transfer_ms": row.get("kv_transfer_ms"),
        **_api_fields(row, inputs, derivation.get("breakeven")),
    }


#: The per-GPU summary's fleet-over-time fields (planner.lifecycle); None when the row
#: cannot serve.
FLEET_LIFE_FIELDS = (
    "cold_start_s",
    "warm_pool_replicas",
    "autoscaling",
    "autoscaled_usd_per_month",
    "autoscaled_saving_usd_per_month",
    "day",
    "tco",
    "lifecycle_steps",
)


def fleet_life_fields(row: dict, inputs: dict) -> dict:
    """Cold start, the autoscaling policy and its day, and buy vs rent for one recommended
    row, priced as the row is."""
    price, _ = snap.gpu_price(inputs, row["gpu_slug"], _priced_gpus(inputs, row))
    price = price if price > 0 else 0.0  # NaN: no instance holds the replica
    life = lifecycle.fleet_life(row, inputs, price) or {}
    return {name: life.get(name) for name in FLEET_LIFE_FIELDS}


def _priced_gpus(inputs: dict, row: dict) -> int:
    return snap.priced_replica_gpus(inputs, row["candidate_key"], row["tp"], row.get("pp", 1))


def _model_slug(inputs: dict, candidate_key: str) -> str | None:
    return next((c["model"] for c in inputs["candidates"] if c["key"] == candidate_key), None)


def _api_fields(row: dict, inputs: dict, breakeven: dict | None) -> dict:
    """What the card says about the API: which one, the plain verdict, the hybrid plan."""
    slug = _model_slug(inputs, row["candidate_key"])
    price = snap.api_price_json(inputs, slug)
    if not price:
        none = {"label": None, "from": None, "text": _no_api_note(inputs, slug or "")}
        return {"api_alternative": none, "api_verdict": None, "hybrid": None}
    blended = (breakeven or {}).get("api_usd_per_mtok")
    alternative = {
        "label": price.get("label"),
        "from": "scenario" if inputs.get("api_price") else "price sheet",
        "sheet": price.get("sheet"),
        "usd_per_mtok": blended,
        "text": f"vs {price.get('label')}"
        + (f" at {_usd_rate(blended)}/M tokens (blended in/out)" if blended else ""),
    }
    spares = fixed_replicas(inputs, row)
    return {
        "api_alternative": alternative,
        "api_verdict": api_verdict(breakeven),
        "hybrid": hybrid_plan(breakeven, spares),
    }


def fixed_replicas(inputs: dict, row: dict) -> int:
    """Spares + the row's warm pool (sized from the burst when one is stated, see
    ``sizing.fleet.warm_pool``; rows from before that carry the typed one)."""
    policy = inputs.get("policy") or {}
    warm = (row.get("derivation") or {}).get("warm_pool_replicas")
    if warm is None:
        warm = policy.get("warm_pool_replicas", 0)
    return int(policy.get("spare_replicas", 0) + warm)


def api_verdict(breakeven: dict | None) -> str | None:
    """The break-even in one sentence, at the scenario's traffic (``sizing.fleet.breakeven``'s
    numbers: API and self-hosted $/month at the mean rate, the crossing volume)."""
    if not breakeven:
        return None
    api, own = breakeven["api_usd_per_month"], breakeven["selfhost_usd_per_month"]
    crossing = breakeven.get("crossing_tokens_per_month")  # None: self-hosting never wins
    if api is None or own is None:
        return None
    if api < own:
        where = (
            f"self-hosting wins above {_tokens(crossing)}/month"
            if crossing
            else "self-hosting never wins at these prices"
        )
        return f"the API costs {_usd(api)}/month here: {where}"
    cheaper = f"self-hosting costs {_usd(own)}/month here, less than the API's {_usd(api)}/month"
    return f"{cheaper}: it stays cheaper from {_tokens(crossing)}/month up" if crossing else cheaper


def hybrid_plan(breakeven: dict | None, spare_replicas: int) -> dict | None:
    """``breakeven.hybrid`` (self-hosted base + API overflow) with its spares and a sentence."""
    hybrid = (breakeven or {}).get("hybrid")
    if not hybrid or hybrid.get("usd_per_month") is None:
        return None
    base, share = hybrid["selfhost_replicas"], hybrid["api_token_share"]
    spares = spare_replicas if base > 0 else 0  # an all-API plan keeps no spares
    if base == 0:
        text = f"everything to the API: {_usd(hybrid['usd_per_month'])}/month"
    else:
        plus = f" (+{_count(spares, 'spare')})" if spares else ""
        overflow = f"{_percent(share)} of tokens to the API" if share > 0 else "nothing to the API"
        cost = _usd(hybrid["usd_per_month"])
        text = f"self-host {_count(base, 'replica')}{plus}, {overflow}: {cost}/month"
    return {**hybrid, "spare_replicas": spares, "text": text}


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _percent(share: float) -> str:
    """0.083 -> "8.3%", 0.5 -> "50%", 0.999 -> "100%"."""
    value = share * 100
    return f"{value:.0f}%" if value >= 10 else f"{value:.2g}%"


def _usd(value: float) -> str:
    return f"${value:,.0f}"


def _usd_rate(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.3g}"  # as the ``usd`` filter


def _tokens(count: float) -> str:
    """61.4e9 -> "61 B tokens", 2.5e9 -> "2.5 B tokens", 8e8 -> "800 M tokens"."""
    value, unit = (count / 1e9, "B") if count >= 1e9 else (count / 1e6, "M")
    number = f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
    return f"{number} {unit} tokens"
