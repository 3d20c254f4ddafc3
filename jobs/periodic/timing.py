"""When a schedule ticks: cron (cronsim, in the schedule's time zone) or a fixed interval.

Tick times are aware UTC datetimes. A cron schedule ticks as Debian's cron
would on a host in its time zone (cronsim's rules): across a DST change a
job at a fixed wall-clock time (minute and hour fields not `*`) runs once
for each local time; in a skipped hour it runs at the first minute after
the change. An interval schedule of N seconds ticks at multiples of N
seconds since the Unix epoch, so every scheduler computes the same ticks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidTiming(ValueError):
    """A cron expression, time zone or interval that cannot tick (one readable line)."""


@dataclass(frozen=True)
class Timing:
    """How a schedule ticks: `cron` in `timezone`, or every `interval_seconds`."""

    cron: str = ""
    interval_seconds: int | None = None
    timezone: str = "UTC"

    def validate(self) -> None:
        """Raise InvalidTiming unless exactly one of cron and interval is set and valid."""
        if bool(self.cron) == (self.interval_seconds is not None):
            raise InvalidTiming("give either a cron expression or an interval, not both or neither")
        if self.interval_seconds is not None:
            if not isinstance(self.interval_seconds, int) or self.interval_seconds < 1:
                raise InvalidTiming(f"interval {self.interval_seconds!r} is not whole seconds >= 1")
            return
        zone = self.zone()
        try:
            next(CronSim(self.cron, datetime(2000, 1, 1, tzinfo=zone)))
        except CronSimError as exc:
            raise InvalidTiming(f"cron expression {self.cron!r}: {exc}") from None
        except StopIteration:
            raise InvalidTiming(f"cron expression {self.cron!r} never matches") from None

    def zone(self) -> ZoneInfo:
        """The time zone. Raises InvalidTiming for an unknown name."""
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidTiming(f"unknown time zone {self.timezone!r}") from None

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment` (aware), in UTC. Raises InvalidTiming."""
        if self.interval_seconds is not None:
            step = self.interval_seconds
            elapsed = (moment - EPOCH).total_seconds()
            return EPOCH + timedelta(seconds=(int(elapsed // step) + 1) * step)
        try:
            found = next(CronSim(self.cron, moment.astimezone(self.zone())))
        except (CronSimError, StopIteration) as exc:
            raise InvalidTiming(f"cron expression {self.cron!r}: no next tick ({exc})") from None
        if found <= moment:  # cronsim drops microseconds: never hand back the same tick
            return self.next_after(moment + timedelta(seconds=1))
        return found.astimezone(UTC)

    def ticks(self, *, start: datetime, until: datetime) -> Iterator[datetime]:
        """Every tick from `start` (itself a tick) to `until`, both included, in order."""
        tick = start
        while tick <= until:
            yield tick
            tick = self.next_after(tick)


@dataclass(frozen=True)
class DueTicks:
    """The ticks of one schedule due at a pass: the last of them and how many came before it."""

    last: datetime
    earlier: int  # ticks before `last`, all missed (a later one is due)
    next_tick: datetime  # the first tick after the pass's now


def due_ticks(timing: Timing, *, first: datetime, now: datetime, count_limit: int) -> DueTicks:
    """The ticks from `first` (the schedule's next tick, due) up to `now`.

    Counts at most `count_limit` earlier ticks one by one for cron (an
    interval's are counted by arithmetic); past it the count says at least.
    """
    if timing.interval_seconds is not None:
        step = timing.interval_seconds
        behind = int((now - first).total_seconds() // step)
        last = first + timedelta(seconds=behind * step)
        return DueTicks(last=last, earlier=behind, next_tick=timing.next_after(now))
    last, earlier = first, 0
    for tick in timing.ticks(start=timing.next_after(first), until=now):
        last, earlier = tick, earlier + 1
        if earlier >= count_limit:
            # Far behind: count no further; the last tick is the one before now.
            last = _previous_tick(timing, now=now, after=tick)
            break
    return DueTicks(last=last, earlier=earlier, next_tick=timing.next_after(now))


def _previous_tick(timing: Timing, *, now: datetime, after: datetime) -> datetime:
    """The last tick at or before `now`, no earlier than `after` (a tick); reversed cronsim."""
    try:
        found = next(CronSim(timing.cron, now.astimezone(timing.zone()), reverse=True))
    except (CronSimError, StopIteration):
        return after
    found = found.astimezone(UTC)
    return found if found >= after else after
