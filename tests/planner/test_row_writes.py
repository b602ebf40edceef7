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
