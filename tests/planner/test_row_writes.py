"""The bulk writers of result rows (``planner.models.upsert_rows`` / ``update_rows``): the
same values as Django's own writes, on PostgreSQL through a server-binding cursor."""

import pytest
from django.db import IntegrityError, transaction

from planner.models import CandidateResult, update_rows, upsert_rows
from planner.services import sizing_run_start
from tests.factories import make_scenario

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = [f.attname for f in CandidateResult._meta.concrete_fields if f.attname != "id"]
UPDATABLE = [
    f.name
    for f in CandidateResult._meta.concrete_fields
    if f.name not in ("id", "run", "candidate_key")
]


def _saved(run) -> dict:
    return {v["candidate_key"]: v for v in run.results.values(*FIELDS)}


def test_upsert_writes_the_rows_django_wrote_and_updates_on_conflict(catalog):
    # given a run's rows as Django saved them (derivations, latency maps, nulls)
    run = sizing_run_start(scenario=make_scenario(models=["llama-3.1-8b"], gpus=["H100"]))
    before = _saved(run)
    assert len(before) > 3 and any(v["derivation"] for v in before.values())
    # when they are deleted and written again by upsert_rows
    CandidateResult.objects.filter(run=run).delete()
    with transaction.atomic():
        upsert_rows(
            CandidateResult, [CandidateResult(**v) for v in before.values()],
            ["run", "candidate_key"], UPDATABLE,
        )  # fmt: skip
    # then every value reads back the same
    assert _saved(run) == before
    # and written again with one field changed, the conflict updates that field in place
    changed = [CandidateResult(**{**v, "reason": "re-sized"}) for v in before.values()]
    with transaction.atomic():
        upsert_rows(CandidateResult, changed, ["run", "candidate_key"], ["reason"])
    after = _saved(run)
    assert {v["reason"] for v in after.values()} == {"re-sized"}
    assert {k: {**v, "reason": before[k]["reason"]} for k, v in after.items()} == before


def test_an_upsert_error_is_djangos_and_rolls_back_with_the_transaction(catalog):
    # given a run and a row that breaks a constraint (no run)
    run = sizing_run_start(scenario=make_scenario(models=["llama-3.1-8b"], gpus=["H100"]))
    count = run.results.count()
    row = CandidateResult(**{**next(iter(_saved(run).values())), "run_id": None})
    # when upsert_rows writes it inside a transaction with a good change first
    with pytest.raises(IntegrityError), transaction.atomic():
        update_rows(CandidateResult, [*run.results.all()[:1]], ("reason",))
        upsert_rows(CandidateResult, [row], ["run", "candidate_key"], ["reason"])
    # then the error is Django's IntegrityError and nothing was half-saved
    assert run.results.count() == count


def test_the_simulation_cache_keeps_the_first_writer_and_says_what_it_holds():
    from planner.cache import DatabaseCache
    from planner.models import SimulationCache

    # given an empty cache
    cache = DatabaseCache()
    # when a search is put, then put again under the same key (a lost race)
    cache.put("a" * 64, {"rate_rps": 1.5, "probes": [{"meets": True}]})
    cache.put("a" * 64, {"rate_rps": 9.9})
    # then the first stays, one row, and held() names only what is stored
    assert cache.get("a" * 64) == {"rate_rps": 1.5, "probes": [{"meets": True}]}
    assert SimulationCache.objects.count() == 1
    assert cache.held(["a" * 64, "b" * 64]) == {"a" * 64}
    assert cache.get("b" * 64) is None


def test_derivations_are_stored_with_lz4_where_postgresql_has_it():
    from django.db import DatabaseError, connection

    if connection.vendor != "postgresql" or connection.pg_version < 140000:
        pytest.skip("a PostgreSQL 14+ storage setting")
    try:  # a server built without lz4 keeps pglz (the migration's fallback)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("create temp table lz4_probe (d jsonb compression lz4)")
    except DatabaseError:
        pytest.skip("this PostgreSQL has no lz4")
    with connection.cursor() as cursor:
        cursor.execute(
            "select attcompression from pg_attribute "
            "where attrelid = 'planner_candidateresult'::regclass and attname = 'derivation'"
        )
        [(method,)] = cursor.fetchall()
    assert method == "l"  # lz4 ('' would be the server's default, pglz)


def test_a_worker_reads_a_runs_inputs_once_and_never_anothers(catalog, django_assert_num_queries):
    from planner import tasks
    from planner.models import SizingRun

    # given two runs, and a worker that has read the first's inputs
    first = sizing_run_start(scenario=make_scenario(models=["llama-3.1-8b"], gpus=["H100"]))
    second = sizing_run_start(scenario=make_scenario(models=["Qwen3-32B"], gpus=["H100"]))
    tasks._INPUTS.clear()
    heads = {r.pk: r for r in SizingRun.objects.only("status", "created_at")}
    inputs = tasks._run_inputs(heads[first.pk])
    assert inputs == first.inputs
    # when it reads them again, then no query is made, and the other run's are its own
    with django_assert_num_queries(0):
        assert tasks._run_inputs(heads[first.pk]) is inputs
    assert tasks._run_inputs(heads[second.pk]) == second.inputs != inputs
    # and a run under the first's id with another creation time (a reset database reusing
    # the id) is read anew
    stale = heads[first.pk]
    stale.created_at = second.created_at
    with django_assert_num_queries(1):
        tasks._run_inputs(stale)
