"""Helpers of tests/integration/test_periodic*.py: schedules declared through the environment,
the tick rows read back, and ticks accounted for by tick time."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tests.integration.harness import Platform


def schedules_env(schedules: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The environment declaring `schedules` in code (settings JOBS_SCHEDULES)."""
    return {"JOBS_SCHEDULES": json.dumps(schedules)}


@dataclass
class Tick:
    tick_at: datetime
    due_at: datetime
    created_at: datetime
    outcome: str
    missed: int
    job_id: str | None

    @property
    def lag(self) -> float:
        return (self.created_at - self.due_at).total_seconds()


@dataclass
class Accounting:
    """One schedule's ticks over a run, accounted for by tick time."""

    name: str
    step: timedelta
    ticks: list[Tick]
    expected: list[datetime] = field(default_factory=list)
    with_job: set[datetime] = field(default_factory=set)
    skipped: list[datetime] = field(default_factory=list)
    unaccounted: list[datetime] = field(default_factory=list)
    jobs_per_tick_max: int = 0

    def account(self, jobs_per_key: dict[str, int]) -> Accounting:
        """Fill the sets: every tick from the first row's to the last's, by what became of it."""
        if not self.ticks:
            return self
        first, last = self.ticks[0].tick_at, self.ticks[-1].tick_at
        tick = first
        while tick <= last:
            self.expected.append(tick)
            tick += self.step
        covered: set[datetime] = set()
        for row in self.ticks:
            covered.add(row.tick_at)
            if row.job_id is not None:
                self.with_job.add(row.tick_at)
            else:
                self.skipped.append(row.tick_at)
            for k in range(1, row.missed + 1):
                covered.add(row.tick_at - k * self.step)
                self.skipped.append(row.tick_at - k * self.step)
        self.unaccounted = [t for t in self.expected if t not in covered]
        self.jobs_per_tick_max = max(jobs_per_key.values(), default=0)
        return self


def read_ticks(platform: Platform, name: str) -> list[Tick]:
    rows = platform.rows(
        "SELECT t.tick_at, t.due_at, t.created_at, t.outcome, t.missed, t.job_id::text "
        "FROM jobs_scheduletick t JOIN jobs_schedule s ON s.id = t.schedule_id "
        "WHERE s.name = %s ORDER BY t.tick_at",
        (name,),
    )
    return [Tick(*row) for row in rows]


def jobs_per_key(platform: Platform, name: str) -> dict[str, int]:
    """Jobs per idempotency key of the schedule `name` (its ticks' keys)."""
    rows = platform.rows(
        "SELECT j.idempotency_key, count(*) FROM jobs_job j "
        "WHERE j.idempotency_key LIKE 'schedule:' || "
        "(SELECT id FROM jobs_schedule WHERE name = %s)::text || ':%%' "
        "GROUP BY j.idempotency_key",
        (name,),
    )
    return {key: n for key, n in rows}


def account(platform: Platform, name: str, step: timedelta) -> Accounting:
    return Accounting(name=name, step=step, ticks=read_ticks(platform, name)).account(
        jobs_per_key(platform, name)
    )


def database_now(platform: Platform) -> datetime:
    return platform.scalar("SELECT now()")
