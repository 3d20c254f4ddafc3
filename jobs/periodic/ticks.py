"""The leader's tick pass: each due schedule's tick claimed and its job submitted, once.

For each enabled schedule whose `next_run_at` has passed (the database's
clock), in one transaction: the schedule row is locked (`FOR UPDATE SKIP
LOCKED`: a second leader skips it), the due ticks are worked out, each tick
that gets a row is claimed by inserting its ScheduleTick (unique per
schedule and tick time: a second leader, a restarted scheduler or a
replayed tick finds it taken and creates nothing), its job is submitted
through jobs.client.submit (idempotency key `schedule:<id>:<tick>`,
backpressure, the outbox: published when the transaction commits) and the
schedule moves on to its next tick. docs/periodic.md has the rules for
missed and overlapping ticks.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from jobs import client, clock
from jobs.errors import IdempotencyConflict, InvalidSubmission, QueueFull
from jobs.models import TERMINAL_STATUSES, Job
from jobs.periodic.models import MissedPolicy, OverlapPolicy, Schedule, ScheduleTick
from jobs.periodic.timing import InvalidTiming, Timing, due_ticks
from jobs.reasons import TickOutcome

logger = logging.getLogger(__name__)

# Earlier ticks of a cron schedule counted one by one after a long gap.
MISSED_COUNT_LIMIT = 100_000


@dataclass
class TickReport:
    """What one pass did: (schedule name, outcome, ticks) counts and the lags of created jobs."""

    ticks: list[tuple[str, TickOutcome, int]] = field(default_factory=list)
    lags: list[tuple[str, float]] = field(default_factory=list)

    def count(self, outcome: TickOutcome) -> int:
        return sum(n for _, o, n in self.ticks if o == outcome)


def idempotency_key(schedule: Schedule, tick_at: datetime) -> str:
    """The submission key of a tick's job: one job per (schedule, tick) whoever submits it."""
    return f"schedule:{schedule.pk}:{tick_at.isoformat()}"


def timing_of(schedule: Schedule) -> Timing:
    return Timing(
        cron=schedule.cron, interval_seconds=schedule.interval_seconds, timezone=schedule.timezone
    )


def schedules_tick(
    *, claimer: str = "", limit: int = 100, now: datetime | None = None
) -> TickReport:
    """Create the jobs of every due tick of up to `limit` schedules; returns what it did.

    Call it while leading (jobs.scheduler). `now` (tests: a fixed clock)
    defaults to the database's clock. Each schedule is its own
    transaction. Raises the database's errors (the transaction of the
    schedule at hand rolls back: neither its tick nor its job is kept).
    """
    report = TickReport()
    fixed = now
    due = Q(next_run_at__isnull=True) | Q(next_run_at__lte=fixed or clock.now())
    names = list(
        Schedule.objects.filter(due, enabled=True)
        .order_by("next_run_at")
        .values_list("pk", flat=True)[:limit]
    )
    for pk in names:
        with transaction.atomic():
            schedule = (
                Schedule.objects.select_for_update(skip_locked=True)
                .filter(due, pk=pk, enabled=True)
                .first()
            )
            if schedule is not None:
                _tick_one(schedule, now=fixed or clock.now(), claimer=claimer, report=report)
    return report


def _store(schedule: Schedule, *fields: str) -> None:
    """Write `fields` of `schedule`'s row as they are on the instance (one UPDATE)."""
    Schedule.objects.filter(pk=schedule.pk).update(**{f: getattr(schedule, f) for f in fields})


def _tick_one(schedule: Schedule, *, now: datetime, claimer: str, report: TickReport) -> None:
    """Work out and claim `schedule`'s due ticks at `now` (its row locked by the caller)."""
    timing = timing_of(schedule)
    try:
        if schedule.next_tick_at is None:
            # New, edited or re-enabled: its first tick is the next one from now.
            _plan(schedule, timing.next_after(now))
            _store(schedule, "next_tick_at", "next_run_at")
            return
        ticks = due_ticks(
            timing, first=schedule.next_tick_at, now=now, count_limit=MISSED_COUNT_LIMIT
        )
    except InvalidTiming as exc:
        logger.error("schedule %s disabled: %s", schedule.name, exc)
        schedule.enabled = False
        _store(schedule, "enabled")
        return
    # Jitter belongs to the schedule's next tick only; the last due tick is judged by it.
    due_at = schedule.next_run_at if ticks.earlier == 0 and schedule.next_run_at else ticks.last
    on_time = (now - due_at).total_seconds() <= settings.JOBS_SCHEDULE_MISSED_AFTER
    missed = ticks.earlier + (0 if on_time else 1)
    if missed:
        # The newest missed tick stands for all of them: one catch-up job, or none.
        newest_missed = ticks.last if not on_time else _before(timing, ticks.last)
        outcome = (
            TickOutcome.CAUGHT_UP
            if schedule.missed_policy == MissedPolicy.CATCH_UP
            else TickOutcome.MISSED
        )
        _claim(
            schedule,
            tick_at=newest_missed,
            due_at=newest_missed,
            now=now,
            outcome=outcome,
            missed=missed - 1,
            claimer=claimer,
            report=report,
        )
    if on_time:
        _claim(
            schedule,
            tick_at=ticks.last,
            due_at=due_at,
            now=now,
            outcome=TickOutcome.CREATED,
            missed=0,
            claimer=claimer,
            report=report,
        )
    _plan(schedule, ticks.next_tick)
    _store(schedule, "next_tick_at", "next_run_at", "last_tick_at", "last_run_at", "last_job")


def _before(timing: Timing, tick: datetime) -> datetime:
    """The tick before `tick` (for an interval exact; for cron, the reversed expression)."""
    if timing.interval_seconds is not None:
        return tick - timedelta(seconds=timing.interval_seconds)
    from cronsim import CronSim  # noqa: PLC0415 - only on the rare missed-ticks path

    previous = next(CronSim(timing.cron, tick.astimezone(timing.zone()), reverse=True))
    return previous.astimezone(tick.tzinfo)


def _plan(schedule: Schedule, tick: datetime) -> None:
    """Set the next tick and its run time: the tick plus a random jitter in [0, jitter]."""
    schedule.next_tick_at = tick
    jitter = random.uniform(0, schedule.jitter_seconds) if schedule.jitter_seconds else 0.0  # noqa: S311
    schedule.next_run_at = tick + timedelta(seconds=jitter)


def _claim(
    schedule: Schedule,
    *,
    tick_at: datetime,
    due_at: datetime,
    now: datetime,
    outcome: TickOutcome,
    missed: int,
    claimer: str,
    report: TickReport,
) -> None:
    """Claim the tick (its row) and, unless skipped, submit its job; a taken tick does nothing."""
    if outcome != TickOutcome.MISSED and _live(schedule):
        if schedule.overlap_policy == OverlapPolicy.SKIP:
            outcome = TickOutcome.OVERLAP
    tick = ScheduleTick(
        schedule=schedule,
        tick_at=tick_at,
        due_at=due_at,
        created_at=now,
        outcome=outcome,
        missed=missed,
        claimed_by=claimer,
    )
    try:
        with transaction.atomic():
            tick.save(force_insert=True)
    except IntegrityError:
        logger.warning("schedule %s tick %s already claimed", schedule.name, tick_at.isoformat())
        return
    if outcome in (TickOutcome.CREATED, TickOutcome.CAUGHT_UP):
        job = _submit(schedule, tick_at)
        if job is None:
            outcome = TickOutcome.REJECTED
            ScheduleTick.objects.filter(pk=tick.pk).update(outcome=outcome)
        else:
            ScheduleTick.objects.filter(pk=tick.pk).update(job=job)
            schedule.last_job = job
            schedule.last_run_at = now
            if outcome == TickOutcome.CREATED:
                report.lags.append((schedule.name, max(0.0, (now - due_at).total_seconds())))
    schedule.last_tick_at = tick_at
    report.ticks.append((schedule.name, outcome, 1))
    if missed:
        report.ticks.append((schedule.name, TickOutcome.MISSED, missed))
    logger.info(
        "schedule %s tick %s: %s%s",
        schedule.name,
        tick_at.isoformat(),
        outcome,
        f" (standing for {missed} missed ticks)" if missed else "",
    )


def _live(schedule: Schedule) -> bool:
    """Whether the schedule's last job is still live (not terminal; a deleted one is not)."""
    if schedule.last_job_id is None:
        return False
    status = Job.objects.filter(pk=schedule.last_job_id).values_list("status", flat=True).first()
    return status is not None and status not in TERMINAL_STATUSES


def _submit(schedule: Schedule, tick_at: datetime) -> Job | None:
    """Submit the tick's job (the ordinary path); None when refused (logged)."""
    try:
        return client.submit(
            schedule.kind,
            schedule.payload,
            queue=schedule.queue or None,
            idempotency_key=idempotency_key(schedule, tick_at),
        )
    except IdempotencyConflict:
        # The tick's job exists (made before the schedule was edited): it is the tick's job.
        return (
            Job.objects.filter(
                kind=schedule.kind,
                idempotency_key=idempotency_key(schedule, tick_at),
                created_by__isnull=True,
            )
            .only("id")
            .first()
        )
    except (InvalidSubmission, QueueFull) as exc:
        logger.warning("schedule %s tick %s refused: %s", schedule.name, tick_at.isoformat(), exc)
        return None
