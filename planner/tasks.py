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
from collections import OrderedDict
from datetime import timedelta
from types import SimpleNamespace

import kombu.exceptions
import redis.exceptions
from celery import chord, shared_task
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import F
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from planner import broker, pipeline, runner
from planner.cache import DatabaseCache
from planner.models import CandidateResult, SizingRun, batch_indices, update_rows, upsert_rows

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
    run = (
        SizingRun.objects.filter(pk=run_id)
        .only("status", "batches_done", "batch_count", "inputs")
        .first()
    )
    if run is None or run.status == SizingRun.Status.FAILED:
        return 0
    if batch_index in run.batches_done:
        return 0  # re-delivered after it was saved: nothing to do
    indices = batch_indices(len(run.inputs["candidates"]), run.batch_count, batch_index)
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
        upsert_rows(CandidateResult, rows, ["run", "candidate_key"], update_fields)
        run.batches_done = sorted({*run.batches_done, batch_index})
        done_share = len(run.batches_done) / max(run.batch_count, 1)
        run.progress = int(BATCHES_PROGRESS * done_share)
        run.heartbeat_at = timezone.now()
        run.save(update_fields=["batches_done", "progress", "heartbeat_at"])


@shared_task(**TASK_OPTIONS)
def aggregate_run(run_id: int, searched: list[str] | None = None) -> None:
    """After the batches: one round of tail simulations (a chord of ``simulate_candidates``
    over the workers, then this task again with the round's keys, ``searched``, whose rows it
    re-sizes from the cached searches in one chain call), or, when nothing is left to
    simulate, rank and finish the run. A round whose searches are all cached already (a
    rerun, a shared link's refresh) is re-sized here, with no task to wait for. The rounds
    are ``planner.pipeline``'s, as ``manage.py plan`` runs them."""
    with transaction.atomic():
        run = SizingRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.is_finished:
            return
        if _missing_batches(run):  # a chord part was lost or double-counted: size what's missing
            if run.enqueue_count < MAX_ENQUEUES:
                transaction.on_commit(lambda: enqueue_run(run_id))
            return
    if searched:
        _resize_round(run, searched)
    while keys := pipeline.next_to_simulate(_selection_rows(run)) if _tails_on(run) else []:
        SizingRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())
        missing = pipeline.not_cached(run.inputs, keys, DatabaseCache())
        if missing:
            chord(simulate_candidates.s(run_id, share) for share in search_shares(missing))(
                aggregate_run.si(run_id, keys)
            )
            return
        _resize_round(run, keys)  # every search of the round is cached: no task to wait for
    finish_run(run_id)


def _resize_round(run: SizingRun, keys: list[str]) -> None:
    """Re-size a round's rows on their searches (``pipeline.simulate_round``: each found in
    the cache the round's tasks filled, searched here should one be missing) and save them.
    Rows already simulated, or whose simulation failed, are left alone (a re-delivery)."""
    rows = [
        row
        for row in run.results.filter(candidate_key__in=keys)
        if row.latency_source != "simulated" and not row.derivation.get("simulation_error")
    ]
    if not rows:
        return
    index = {c["key"]: i for i, c in enumerate(run.inputs["candidates"])}
    current = [_row_dict(r) for r in rows]
    items = [(index[r.candidate_key], values) for r, values in zip(rows, current, strict=True)]
    resized = pipeline.simulate_round(run.inputs, items, DatabaseCache(), TRANSIENT_DB_ERRORS)
    groups: dict[tuple[str, ...], list[CandidateResult]] = {}
    for row, before, values in zip(rows, current, resized, strict=True):
        groups.setdefault(_set_values(row, before, values), []).append(row)
    with transaction.atomic():  # one UPDATE per set of changed columns, sent as one batch
        for fields, objs in groups.items():
            update_rows(CandidateResult, objs, fields)


def _set_values(row: CandidateResult, before: dict, values: dict) -> tuple[str, ...]:
    """Set on ``row`` the result columns ``values`` changes; their names (the derivation at
    least, which carries the simulation)."""
    fields = tuple(k for k in values if k in RESULT_COLUMNS and values[k] != before.get(k))
    for field in fields:
        setattr(row, field, values[field])
    return fields or ("derivation",)


def _save_values(row: CandidateResult, before: dict, values: dict) -> None:
    """Write the result columns ``values`` changes on ``row``."""
    row.save(update_fields=list(_set_values(row, before, values)))


def _tails_on(run: SizingRun) -> bool:
    return bool(run.inputs.get("simulate_tails", False))


SELECTION_FIELDS = (
    "candidate_key",
    "gpu_slug",
    "model_name",
    "fits",
    "meets_slo",
    "usd_per_month",
    "gpus",
    "latency_source",
)


def _selection_rows(run: SizingRun, fields=SELECTION_FIELDS) -> list[dict]:
    """What the round selection reads (``fields``, and the two derivation entries it needs),
    without loading every derivation."""
    rows = run.results.values(*fields, "derivation__bound", "derivation__simulation_error")
    return [
        {
            **{f: r[f] for f in fields},
            "derivation": {
                "bound": r["derivation__bound"],
                "simulation_error": r["derivation__simulation_error"],
            },
        }
        for r in rows
    ]


#: A round's searches go to the workers in shares of up to this many (a task's own reads,
#: writes and chord count cost ~10 ms through a worker, half a search) ...
SEARCHES_PER_TASK = 3
#: ... in as many shares as this at least, so four workers share a small round.
MIN_SEARCH_TASKS = 4


def search_shares(keys: list[str]) -> list[list[str]]:
    """``keys`` in contiguous shares of nearly equal size: ``ceil(n / SEARCHES_PER_TASK)``
    of them, and ``min(n, MIN_SEARCH_TASKS)`` at least (12 keys: 4 of 3; 7: 1, 2, 2, 2)."""
    count = min(len(keys), max(-(-len(keys) // SEARCHES_PER_TASK), MIN_SEARCH_TASKS))
    return [keys[i * len(keys) // count : (i + 1) * len(keys) // count] for i in range(count)]


@shared_task(ignore_result=False, **TASK_OPTIONS)
def simulate_candidates(run_id: int, candidate_keys: list[str]) -> int:
    """Run a share of a round's tail searches into the simulation cache; the round's callback
    (``aggregate_run``) re-sizes the round's rows from it. A search that fails saves the
    analytic row with the reason (it stays unsimulated). Idempotent: a row already simulated,
    or whose simulation failed, is left alone, and a cached search is not run again (a
    re-delivered share repeats only the searches it had not cached). Returns how many rows
    it searched."""
    run = SizingRun.objects.filter(pk=run_id).only("status", "created_at").first()
    if run is None or run.is_finished:
        return 0
    inputs = _run_inputs(run)
    index = {c["key"]: i for i, c in enumerate(inputs["candidates"])}
    rows = CandidateResult.objects.filter(run_id=run_id, candidate_key__in=candidate_keys)
    searched = 0
    for row in sorted(rows, key=lambda r: candidate_keys.index(r.candidate_key)):
        if row.latency_source == "simulated" or row.derivation.get("simulation_error"):
            continue
        current = _row_dict(row)
        try:
            pipeline.search(inputs, index[row.candidate_key], current, DatabaseCache())
        except TRANSIENT_DB_ERRORS:
            raise  # retried (TASK_OPTIONS): the searches cached are not run again
        except Exception as exc:  # noqa: BLE001 - a simulator bug must not fail the run
            _save_values(row, current, pipeline.with_reason(current, exc))
        searched += 1
    SizingRun.objects.filter(pk=run_id).update(
        progress=Least(Greatest(F("progress") + searched, BATCHES_PROGRESS), TAILS_PROGRESS),
        heartbeat_at=timezone.now(),
    )
    return searched


#: The inputs of the last runs this worker process served, by (run, creation time): a run's
#: inputs never change once saved, and each of a sweep's ~60 search tasks read its
#: ~300 KB of JSON again otherwise. Callers must not change them.
_INPUTS: OrderedDict[tuple[int, object], dict] = OrderedDict()
INPUTS_KEPT = 4


def _run_inputs(run: SizingRun) -> dict:
    key = (run.pk, run.created_at)
    if key in _INPUTS:
        _INPUTS.move_to_end(key)
        return _INPUTS[key]
    inputs = SizingRun.objects.filter(pk=run.pk).values_list("inputs", flat=True).get()
    _INPUTS[key] = inputs
    while len(_INPUTS) > INPUTS_KEPT:
        _INPUTS.popitem(last=False)
    return inputs


def _row_dict(row: CandidateResult) -> dict:
    """A result row's columns as the pipeline reads them; not its run (``row.run`` would load
    the run and its inputs again: a sweep's 300 KB of JSON per simulated candidate)."""
    return {f.name: getattr(row, f.name) for f in RESULT_FIELDS}


RESULT_FIELDS = [f for f in CandidateResult._meta.concrete_fields if not f.is_relation]
RESULT_COLUMNS = {f.name for f in RESULT_FIELDS if f.name != "id"}
FINISH_FIELDS = [
    "rank",
    "recommended",
    "evaluated",
    "meets_slo",
    "replicas",
    "gpus",
    "reason",
    "binding_constraint",
    "latency_source",
    *pipeline.VALUE_FIELDS,
]


def finish_run(run_id: int) -> None:
    """Mark unevaluated rows, rank, recommend per GPU, summarize; the run succeeds."""
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


def rank_and_summarize(run: SizingRun) -> dict:
    fields = [f for f in RESULT_COLUMNS if f != "derivation"]
    rows = _selection_rows(run, ("id", *fields))  # every column once, no derivation
    # each row's primary key and what finish may change, as saved
    saved = {r["candidate_key"]: (r.pop("id"), {f: r[f] for f in FINISH_FIELDS}) for r in rows}
    by_key = {r["candidate_key"]: r for r in rows}
    ranked, best = pipeline.finish(rows, _tails_on(run))
    _save_changes(saved, ranked)
    # the summary reads derivations (band, break-even) of each GPU's and each grid cell's answer
    shown = {*best.values(), *pipeline.pick_cells(ranked, _tails_on(run)).values()}
    for obj in run.results.filter(candidate_key__in=shown).only("candidate_key", "derivation"):
        by_key[obj.candidate_key]["derivation"] = obj.derivation
    return pipeline.summarize(run.inputs, ranked, best, _tails_on(run))


def _save_changes(saved: dict[str, tuple[int, dict]], ranked: list[dict]) -> None:
    """Write what ``finish`` changed, one bulk update per set of changed fields: every row's
    rank changes, only a few rows change anything else, and a CASE per field per row over all
    of FINISH_FIELDS made this the slowest step of a run. ``saved``: each row's primary key
    and its FINISH_FIELDS as read."""
    groups: dict[tuple[str, ...], list[SimpleNamespace]] = {}
    for row in ranked:
        pk, before = saved[row["candidate_key"]]
        changed = tuple(f for f in FINISH_FIELDS if before[f] != row[f])
        if changed:
            groups.setdefault(changed, []).append(
                SimpleNamespace(pk=pk, **{f: row[f] for f in changed})
            )
    for fields, objs in groups.items():
        update_rows(CandidateResult, objs, fields)


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
