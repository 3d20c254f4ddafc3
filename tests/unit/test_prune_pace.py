"""jobs.prune_pace: the duty cycle and the time-bounded batch size (pure arithmetic)."""

from __future__ import annotations

import pytest

from jobs.prune_pace import FIRST_BATCH, Pace


def test_pace_rests_so_the_prune_deletes_at_most_its_duty_of_the_time() -> None:
    quarter = Pace(duty=0.25, min_pause=0.0)
    for took in (0.001, 0.1, 1.5):
        rest = quarter.pause_after(took)
        assert rest == pytest.approx(3 * took)
        assert took / (took + rest) == pytest.approx(0.25)


def test_pace_rests_longer_when_the_server_is_slower_and_never_below_the_floor() -> None:
    pace = Pace(duty=0.5, min_pause=0.05)

    assert pace.pause_after(0.4) > pace.pause_after(0.1)  # a loaded server: it backs off more
    assert pace.pause_after(0.01) == 0.05  # a fast batch still rests the floor
    assert pace.pause_after(-1.0) == 0.05  # a clock step back is no negative rest
    assert Pace(duty=1.0, min_pause=0.0).pause_after(2.0) == 0.0  # duty 1: no rest at all


def test_pace_sizes_batches_toward_the_target_time_in_bounded_steps() -> None:
    pace = Pace(target_seconds=0.1, max_batch=500)

    assert pace.first_size() == FIRST_BATCH
    assert pace.next_size(100, 0.1) == 100  # on target: unchanged
    assert pace.next_size(100, 0.2) == 50  # twice too slow: half
    assert pace.next_size(100, 0.01) == 200  # ten times too fast: at most doubled
    assert pace.next_size(100, 5.0) == 25  # far too slow: at most a quarter
    assert pace.next_size(400, 0.01) == 500  # never above max_batch
    assert pace.next_size(1, 9.0) == 1  # never below one job
    assert pace.next_size(100, 0.0) == 200  # an unmeasurably fast batch grows
    assert Pace(max_batch=10).first_size() == 10


@pytest.mark.parametrize(
    "fields",
    [{"duty": 0.0}, {"duty": 1.5}, {"target_seconds": 0}, {"max_batch": 0}, {"min_pause": -1}],
)
def test_pace_refuses_values_it_cannot_work_with(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="duty|required"):
        Pace(**fields)  # type: ignore[arg-type]
