"""The sizing chain as a Celery canvas: start -> chord(size batches) -> aggregate.

Tasks take ids, never objects. They are idempotent: results are upserted on
(run, candidate_key) and a batch already saved is skipped, so a re-delivered task (acks_late,
reject_on_worker_lost) never duplicates rows. Transient database errors retry with backoff;
calculation errors fail the run with a readable message. Results live in PostgreSQL rows; the
broker's result backend only counts chord parts.
"""

from __future__ import annotations

import logging
import time
import traceback
from datetime import timedelta

import kombu.exceptions
import redis.exceptions
from celery import chord, shared_task
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from planner import broker, runner, tails
from planner.models import CandidateResult, SizingRun

log = logging.getLogger(__name__)

BROKER_ERRORS = (
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    ConnectionError,
    TimeoutError,
)
TRANSIENT_DB_ERRORS = (OperationalError, InterfaceError)
TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": TRANSIENT_DB_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}
STALE_AFTER = timedelta(seconds=getattr(settings, "RUN_STALE_SECONDS", 120))
MAX_ENQUEUES = 20
BATCHES_PROGRESS = 90  # sizing the batches takes progress to 90 %, the tail simulations to 99
TAILS_PROGRESS = 99


def enqueue_run(run_id: int) -> None:
    """Send the chain's first task (raises a BROKER_ERRORS member when the broker is down)."""
    SizingRun.objects.filter(pk=run_id).update(
        enqueue_count=F("enqueue_count") + 1, heartbeat_at=timezone.now()
    )
    start_run.apply_async((run_id,), retry=False, queue=settings.CELERY_TASK_DEFAULT_QUEUE)


def _fail(run_id: int, message: str) -> None:
    SizingRun.objects.filter(pk=run_id).exclude(status=SizingRun.Status.SUCCEEDED).update(
        status=SizingRun.Status.FAILED, error=message[:4000], finished_at=timezone.now()
    )


@shared_task(**TASK_OPTIONS)
def start_run(run_id: int) -> None:
    run = SizingRun.objects.filter(pk=run_id).first()
    if run is None or run.is_finished:
        return
    now = timezone.now()
    SizingRun.objects.filter(pk=run_id, status=SizingRun.Status.QUEUED).update(
        status=SizingRun.Status.RUNNING, started_at=now
    )
    SizingRun.objects.filter(pk=run_id).update(heartbeat_at=now)
    pending = [i for i in range(run.batch_count) if i not in set(run.batches_done)]
    if not pending:
        aggregate_run.delay(run_id)
        return
    chord(size_batch.s(run_id, i) for i in pending)(aggregate_run.si(run_id))


@shared_task(ignore_result=False, **TASK_OPTIONS)
def size_batch(run_id: int, batch_index: int) -> int:
    """Size one batch of candidates and upsert their rows; returns the number saved."""
    run = SizingRun.objects.filter(pk=run_id).only("status", "batches_done", "inputs").first()
    if run is None or run.status == SizingRun.Status.FAILED:
        return 0
    if batch_index in run.batches_done:
        return 0  # re-delivered after it was saved: nothing to do
    start = batch_index * settings.SIZING_BATCH_SIZE
    indices = range(start, min(start + settings.SIZING_BATCH_SIZE, len(run.inputs["candidates"])))
    if settings.SIZING_BATCH_DELAY_S:
        time.sleep(settings.SIZING_BATCH_DELAY_S)
    try:
        values = runner.size_candidates(run.inputs, indices)
        _save_batch(run_id, batch_index, values)
    except TRANSIENT_DB_ERRORS:
        raise
    except DatabaseError as exc:  # not transient (a value outside its column): retrying won't help
        log.exception("saving failed for run %s batch %s", run_id, batch_index)
        _fail(run_id, f"batch {batch_index}'s results could not be saved: {_first_line(exc)}")
        return 0
    except Exception as exc:  # a calculation bug: fail the run readably, never hang or retry
        log.exception("sizing failed for run %s batch %s", run_id, batch_index)
        _fail(
            run_id,
            f"calculation error in batch {batch_index}: {exc!r}\n{traceback.format_exc(limit=3)}",
        )
        return 0
    return len(values)


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _save_batch(run_id: int, batch_index: int, values: list[dict]) -> None:
    rows = [CandidateResult(run_id=run_id, **v) for v in values]
    update_fields = [f for f in values[0] if f != "candidate_key"] if values else []
    with transaction.atomic():
        run = SizingRun.objects.select_for_update().get(pk=run_id)
        if batch_index in run.batches_done:
            return
        CandidateResult.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "candidate_key"],
            update_fields=update_fields,
        )
        run.batches_done = sorted({*run.batches_done, batch_index})
        done_share = len(run.batches_done) / max(run.batch_count, 1)
        run.progress = int(BATCHES_PROGRESS * done_share)
        run.heartbeat_at = timezone.now()
        run.save(update_fields=["batches_done", "progress", "heartbeat_at"])


@shared_task(**TASK_OPTIONS)
def aggregate_run(run_id: int) -> None:
    """Simulate the tails of the leading candidates, rank every result, mark the cheapest
    SLO-meeting option per GPU, finish the run."""
    with transaction.atomic():
        run = SizingRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return
        if _missing_batches(run):  # a chord part was lost or double-counted: size what's missing
            if run.enqueue_count < MAX_ENQUEUES:
                transaction.on_commit(lambda: enqueue_run(run_id))
            return
    # Outside the row lock: the simulations take seconds and report progress meanwhile. A
    # duplicate aggregate doing the same work writes the same (seeded) numbers.
    simulate_tails_phase(run)
    with transaction.atomic():
        run = SizingRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return
        try:
            summary = rank_and_summarize(run)
        except DatabaseError:
            raise
        except Exception as exc:
            log.exception("aggregation failed for run %s", run_id)
            run.status, run.error = SizingRun.Status.FAILED, f"aggregation error: {exc!r}"
            run.finished_at = timezone.now()
            run.save(update_fields=["status", "error", "finished_at"])
            return
        run.summary = summary
        run.status, run.progress = SizingRun.Status.SUCCEEDED, 100
        run.finished_at = timezone.now()
        run.save(update_fields=["summary", "status", "progress", "finished_at"])


def _missing_batches(run: SizingRun) -> set[int]:
    return set(range(run.batch_count)) - set(run.batches_done)


#: What ``tails.pick_for_simulation`` ranks on, read from a saved row.
def simulate_tails_phase(run: SizingRun) -> int:
    """Re-size the leading candidates on simulated p50/p95/p99 (``planner.tails``); returns
    how many rows were updated. Off when the snapshot says so (runs saved before the flag
    existed stay mean-value, so they recompute as they were). Rows already simulated are
    skipped and the choice is made on mean-value numbers, so a second aggregate changes
    nothing; a failed simulation leaves its reason in the row, never fails the run."""
    if not run.inputs.get("simulate_tails", False):
        return 0
    results = {r.candidate_key: r for r in run.results.all()}
    views = [
        {f: getattr(r, f) for f in runner.RANK_FIELDS} | {"derivation": r.derivation}
        for r in results.values()
    ]
    picked = tails.pick_for_simulation(views)
    keys = [k for k in picked if not tails.is_simulated({"derivation": results[k].derivation})]
    index = {c["key"]: i for i, c in enumerate(run.inputs["candidates"])}
    for done, key in enumerate(keys, start=1):
        _simulate_row(run, results[key], index[key])
        progress = BATCHES_PROGRESS + (TAILS_PROGRESS - BATCHES_PROGRESS) * done // len(keys)
        SizingRun.objects.filter(pk=run.pk).update(
            progress=Greatest(F("progress"), progress), heartbeat_at=timezone.now()
        )
    return len(keys) + _second_chance(run, results, views, index)


SECOND_CHANCE_PER_GPU = 1  # extra candidates simulated when a GPU's simulated leader fails


def _simulate_row(run: SizingRun, row: CandidateResult, candidate_index: int) -> None:
    mean_value = {f: getattr(row, f) for f in (*runner.RESULT_FIELDS, "derivation")}
    updates = tails.simulate_tails_or_reason(run.inputs, candidate_index, mean_value)
    for field, value in updates.items():
        setattr(row, field, value)
    row.save(update_fields=list(updates))


def _second_chance(run: SizingRun, results: dict, views: list[dict], index: dict) -> int:
    """When a GPU's simulated leader misses the SLO on its tails, simulate the next candidate
    that meets it at the mean, so that GPU's re-pick rests on a simulation rather than on
    mean-value numbers. Deterministic walk over the mean-value ranking: a second aggregate
    finds every step already simulated and simulates nothing."""
    ranked = sorted((tails.mean_value_view(v) for v in views), key=runner.rank_key)
    by_gpu: dict[str, list[str]] = {}
    for view in ranked:
        if view["fits"] and view["meets_slo"]:
            by_gpu.setdefault(view["gpu_slug"], []).append(view["candidate_key"])
    simulated, budget = 0, tails.MAX_SIMULATED
    for keys in by_gpu.values():
        # position = how many simulated candidates of this GPU missed the SLO so far
        for position, key in enumerate(keys[: 1 + SECOND_CHANCE_PER_GPU]):
            row = results[key]
            if not tails.is_simulated({"derivation": row.derivation}):
                if position == 0 or budget <= 0:
                    break  # the leader was never simulated (run cap): leave this GPU as is
                _simulate_row(run, row, index[key])
                simulated, budget = simulated + 1, budget - 1
            if row.meets_slo:
                break
    return simulated


def rank_and_summarize(run: SizingRun) -> dict:
    by_key = {r.candidate_key: r for r in run.results.all()}
    fields = (*runner.RANK_FIELDS, "reason", "binding_constraint")
    views = [{f: getattr(r, f) for f in fields} for r in by_key.values()]
    order, best_keys = runner.rank_and_pick(views)
    results = [by_key[key] for key in order]
    for rank, result in enumerate(results, start=1):
        result.rank = rank
        result.recommended = best_keys.get(result.gpu_slug) == result.candidate_key
    CandidateResult.objects.bulk_update(results, ["rank", "recommended"], batch_size=500)
    best_per_gpu = {slug: by_key[key] for slug, key in best_keys.items()}
    return summarize(run, results, views, best_per_gpu)


def summarize(run: SizingRun, results: list, views: list[dict], best_per_gpu: dict) -> dict:
    gpu_names = run.inputs.get("gpu_names", {})
    per_gpu = []
    for slug, name in gpu_names.items():
        best = best_per_gpu.get(slug)
        if best is None:
            per_gpu.append(
                {
                    "gpu": slug,
                    "gpu_name": name,
                    "recommended": None,
                    "why_none": runner.why_none(views, slug),
                }
            )
            continue
        per_gpu.append(
            {
                "gpu": slug,
                "gpu_name": name,
                "recommended": best.candidate_key,
                "model": best.model_name,
                "precision": best.precision,
                "tp": best.tp,
                "gpus": best.gpus,
                "replicas": best.replicas,
                "usd_per_month": best.usd_per_month,
                "usd_per_hour": best.usd_per_hour,
                "usd_per_mtok": best.usd_per_mtok,
                "tokens_per_usd": best.tokens_per_usd,
                "ttft_ms": best.ttft_ms,
                "tpot_ms": best.tpot_ms,
                **tails.latency_summary(best.ttft_ms_p95, best.tpot_ms_p95, best.derivation),
                "breakeven": best.derivation.get("breakeven"),
            }
        )
    overall = next((r for r in results if r.meets_slo), None)
    return {
        "candidates": len(results),
        "meeting_slo": sum(r.meets_slo for r in results),
        "fitting": sum(r.fits for r in results),
        "best": overall.candidate_key if overall else None,
        "per_gpu": per_gpu,
        "price_sheet": run.inputs.get("price_sheet"),
        "gpus_without_price": run.inputs.get("gpus_without_price", []),
    }


@shared_task(**TASK_OPTIONS)
def requeue_stuck_runs() -> int:
    """Beat (on its own queue): re-enqueue runs queued or running with no heartbeat for
    STALE_AFTER whose messages the broker no longer holds (planner.broker); a run waiting
    behind a backlog keeps its one message instead of getting a second."""
    cutoff = timezone.now() - STALE_AFTER
    stuck = SizingRun.objects.filter(
        status__in=[SizingRun.Status.QUEUED, SizingRun.Status.RUNNING],
        heartbeat_at__lt=cutoff,
    ) | SizingRun.objects.filter(status=SizingRun.Status.QUEUED, heartbeat_at__isnull=True)
    try:
        waiting = broker.runs_with_messages([settings.CELERY_TASK_DEFAULT_QUEUE]) or set()
    except BROKER_ERRORS as exc:
        log.warning("broker still unavailable: %s", exc)
        return 0
    count = 0
    for run_id, enqueues in stuck.values_list("pk", "enqueue_count"):
        if run_id in waiting:
            continue
        if enqueues >= MAX_ENQUEUES:
            _fail(run_id, f"gave up after {enqueues} attempts: workers never finished this run")
            continue
        try:
            enqueue_run(run_id)
            count += 1
        except BROKER_ERRORS as exc:
            log.warning("broker still unavailable: %s", exc)
            break
    return count
