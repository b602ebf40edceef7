"""How a run's candidates split into batches (one Celery task each)."""

from hypothesis import given
from hypothesis import strategies as st

from planner.models import SPLIT_FROM, batch_count_for, batch_indices


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
