"""How a run's candidates split into batches (one Celery task each)."""

from hypothesis import given
from hypothesis import strategies as st

from planner.models import SPLIT_FROM, batch_count_for, batch_indices
from planner.tasks import MIN_SEARCH_TASKS, SEARCHES_PER_TASK, search_shares


@given(count=st.integers(1, 5000), batches=st.integers(1, 64))
def test_the_batches_cover_every_candidate_once_in_order(count, batches):
    batches = min(batches, count)
    # when the candidates are split into batches
    covered = [i for b in range(batches) for i in batch_indices(count, batches, b)]
    # then every candidate is in exactly one, in order, and the sizes differ by one at most
    assert covered == list(range(count))
    sizes = {len(batch_indices(count, batches, b)) for b in range(batches)}
    assert max(sizes) - min(sizes) <= 1


def test_a_run_is_split_for_two_workers_from_split_from_candidates(settings):
    settings.SIZING_BATCH_SIZE = 256
    # a small run stays one task; the typical bench scenario's 180 go to two; a sweep's 1,470
    # to ceil(1470 / 256) = 6
    assert batch_count_for(SPLIT_FROM - 1) == 1
    assert batch_count_for(180) == 2
    assert batch_count_for(1470) == 6
    settings.SIZING_BATCH_SIZE = 4
    assert batch_count_for(10) == 3


@given(count=st.integers(1, 400))
def test_a_rounds_searches_go_out_in_shares_of_three_over_four_tasks_at_least(count):
    keys = [f"k{i}" for i in range(count)]
    # when a round's searches are shared out to tasks
    shares = search_shares(keys)
    # then every search is in one share, in order; no share holds more than three or is
    # empty; there are four at least where there are four searches (so four workers share
    # a small round) and no more than a third of the searches, rounded up, beyond that
    assert [k for share in shares for k in share] == keys
    assert all(1 <= len(share) <= SEARCHES_PER_TASK for share in shares)
    assert len(shares) == min(count, max(-(-count // SEARCHES_PER_TASK), MIN_SEARCH_TASKS))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_the_typical_rounds_shares():
    # the typical bench scenario's rounds of 12, 7 and 3 searches
    assert [len(s) for s in search_shares(list("abcdefghijkl"))] == [3, 3, 3, 3]
    assert [len(s) for s in search_shares(list("abcdefg"))] == [1, 2, 2, 2]
    assert [len(s) for s in search_shares(list("abc"))] == [1, 1, 1]
