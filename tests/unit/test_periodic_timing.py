"""jobs.periodic.timing: cron ticks in a time zone (DST on a fixed clock) and interval ticks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs.periodic.timing import InvalidTiming, Timing, due_ticks

NEW_YORK = ZoneInfo("America/New_York")


def _local_runs(timing: Timing, start: datetime, days: int) -> list[datetime]:
    ticks, tick = [], timing.next_after(start)
    while tick < start + timedelta(days=days):
        ticks.append(tick.astimezone(NEW_YORK))
        tick = timing.next_after(tick)
    return ticks


@pytest.mark.parametrize(
    ("cron", "day"),
    [
        # 2026-03-08: 02:00 -> 03:00 in New York (02:30 does not exist)
        ("30 2 * * *", datetime(2026, 3, 7, tzinfo=UTC)),
        # 2026-11-01: 02:00 -> 01:00 in New York (01:30 happens twice)
        ("30 1 * * *", datetime(2026, 10, 31, tzinfo=UTC)),
        ("30 2 * * *", datetime(2026, 10, 31, tzinfo=UTC)),
    ],
)
def test_timing_dst_change_runs_each_local_wall_clock_time_once(cron: str, day: datetime) -> None:
    # given a daily schedule at a fixed local time in New York, over three days around a change
    timing = Timing(cron=cron, timezone="America/New_York")

    # when its ticks are listed on a fixed clock
    runs = _local_runs(timing, day, days=3)

    # then each local day has exactly one run, never two (and none lost in a skipped hour)
    days = [run.date() for run in runs]
    assert len(days) == len(set(days)) == 3, runs
    # and the real times between runs are a day, give or take the hour that changed
    gaps = {(b - a).total_seconds() / 3600 for a, b in zip(runs, runs[1:], strict=False)}
    assert gaps <= {23.0, 23.5, 24.0, 24.5, 25.0}, gaps


def test_timing_spring_forward_runs_a_skipped_time_just_after_the_change() -> None:
    timing = Timing(cron="30 2 * * *", timezone="America/New_York")
    run = timing.next_after(datetime(2026, 3, 8, 5, 0, tzinfo=UTC))  # 00:00 local
    assert run.astimezone(NEW_YORK).replace(tzinfo=None) == datetime(2026, 3, 8, 3, 0)


def test_timing_interval_ticks_at_multiples_of_the_interval_since_the_epoch() -> None:
    timing = Timing(interval_seconds=10)
    assert timing.next_after(datetime(2026, 1, 1, 0, 0, 3, 500, tzinfo=UTC)) == datetime(
        2026, 1, 1, 0, 0, 10, tzinfo=UTC
    )
    assert timing.next_after(datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)) == datetime(
        2026, 1, 1, 0, 0, 20, tzinfo=UTC
    )


def test_timing_cron_next_after_is_strictly_later() -> None:
    timing = Timing(cron="* * * * *")
    tick = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert timing.next_after(tick) == tick + timedelta(minutes=1)
    assert timing.next_after(tick - timedelta(microseconds=1)) == tick


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        (Timing(cron="61 * * * *"), "cron expression"),
        (Timing(cron="* * * * *", timezone="Mars/Olympus"), "unknown time zone"),
        (Timing(cron="* * * * *", interval_seconds=5), "not both"),
        (Timing(), "not both or neither"),
        (Timing(interval_seconds=0), "interval"),
    ],
)
def test_timing_validate_refuses_with_one_line(timing: Timing, message: str) -> None:
    with pytest.raises(InvalidTiming, match=message):
        timing.validate()


def test_due_ticks_counts_missed_ticks_of_a_gap() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    now = start + timedelta(minutes=5, seconds=7)
    every = due_ticks(Timing(interval_seconds=10), first=start, now=now, count_limit=10)
    assert (every.earlier, every.last) == (30, start + timedelta(minutes=5))
    minutely = due_ticks(Timing(cron="* * * * *"), first=start, now=now, count_limit=1000)
    assert (minutely.earlier, minutely.last) == (5, start + timedelta(minutes=5))
    assert minutely.next_tick == start + timedelta(minutes=6)
    capped = due_ticks(Timing(cron="* * * * *"), first=start, now=now, count_limit=2)
    assert (capped.earlier, capped.last) == (2, start + timedelta(minutes=5))
