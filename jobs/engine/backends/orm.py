"""The general path: every attempt transition through Django's ORM, the job row locked.

Each operation runs in a transaction that locks the job row (SELECT ...
FOR UPDATE), so concurrent workers, the scheduler and the API never
interleave on one job. Used alone on databases without a fast path, and as
the fallback of the PostgreSQL and SQLite backends for every case their
statements do not match (duplicates, redeliveries after a lost worker, a
resumed start, an attempt already recorded). Events go into the `Effects`
passed in; the engine's boundary sends them after commit (jobs.engine).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.functions import Now

from jobs import budget, concurrency_gate, events, fuse_gate, rate_gate, waiting
from jobs.decisions import Decision, decide
from jobs.engine import changes, fusing, limiting, pausing, rating
from jobs.engine.flow_limits import FlowLimits
from jobs.engine.overlap import provably_over
from jobs.engine.values import (
    AttemptEnd,
    AttemptRef,
    AttemptReport,
    Delivery,
    Effects,
    Loss,
    StartedAttempt,
)
from jobs.engine.verdicts import (
    decide_end,
    log_budget_exhausted,
    log_decision,
    log_finished,
    log_started,
    started_attempt,
)
from jobs.kinds import policy_for
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.reasons import DropReason
from observability import tracing

logger = logging.getLogger(__name__)

# A queued job held unpublished in the database with one of these reasons: the leader publishes it.
HELD_REASONS = waiting.HELD_REASONS


class OrmBackend:
    """Attempt transitions through the ORM (module docstring). `name` is for logs and tests."""

    name = "orm"

    def __init__(self) -> None:
        self.flow = FlowLimits()
        # The kinds with a fuse (jobs.fuse_gate), judged in start; their ends counted by the
        # engine's boundary (jobs.engine.fusing.record).
        self.fuses = fuse_gate.ConfigCache()

    def limits(self) -> dict[str, concurrency_gate.KindLimit]:
        """The concurrency limits of the registered kinds (jobs.engine.flow_limits)."""
        return self.flow.now().limits

    def rates(self) -> dict[str, rate_gate.KindRate]:
        """The rate limits of the registered kinds (jobs.engine.flow_limits)."""
        return self.flow.now().rates

    def start(
        self, delivery: Delivery, *, now: datetime, effects: Effects
    ) -> StartedAttempt | None:
        """jobs.engine.Engine.start's general path."""
        flow = self.flow.now()
        limits, rates, pg = flow.limits, flow.rates, connection.vendor == "postgresql"
        with transaction.atomic():
            # A limited kind's (kind, key) locks come before the row lock (jobs.concurrency_sql,
            # jobs.rate_sql): the concurrency one, then the rate one, as in start_limited.
            admitted = (
                limiting.admit_first(delivery.job_id, flow.limits_json) if limits and pg else None
            )
            rate_admitted = (
                rating.admit_first(delivery.job_id, flow.rates_json, now) if rates and pg else None
            )
            job = Job.objects.select_for_update().filter(id=delivery.job_id).first()
            if job is None:
                # Usually another deployment sharing this broker and queue name.
                logger.warning(
                    "delivery dropped unrun: no job %s in this database (is another stack "
                    "consuming the same broker and queue?)",
                    delivery.job_id,
                )
                return None
            # jobs_rate_admit moved the bucket before the row lock (the lock order); a job the
            # checks below do not start gives that slot back, so pause, fuse and concurrency
            # holds spend no rate slot (the ORM's rate check comes after them).
            rate = rates.get(job.kind)
            spent = rate if rate_admitted and rate is not None else None
            if delivery.resume and job.status == JobStatus.RUNNING:
                mine = job.attempts.filter(
                    number=job.attempts_made,
                    worker_pid=delivery.pid,
                    worker_hostname=delivery.hostname,
                ).first()
                if job.attempts_made >= delivery.attempt and mine and mine.finished_at is None:
                    rating.give_back(job, spent)
                    return started_attempt(job, mine.number)
            job.deliveries += 1
            job.save(update_fields=["deliveries"])
            number, why = self._number(job, delivery, now=now, effects=effects)
            if number is None:
                rating.give_back(job, spent)
                _dropped(job, delivery.attempt, why, effects)
                return None
            if pausing.hold_if_paused(job):
                rating.give_back(job, spent)
                _dropped(job, delivery.attempt, DropReason.PAUSED, effects)
                return None
            fuse = self.fuses.get().get(job.kind)
            if fuse is not None and fusing.hold_if_open(job, fuse, now=now):
                rating.give_back(job, spent)
                _dropped(job, delivery.attempt, DropReason.FUSE, effects)
                return None
            limit = limits.get(job.kind)
            if limit is not None and limiting.hold_if_over_limit(job, limit, admitted=admitted):
                rating.give_back(job, spent)
                _dropped(job, delivery.attempt, DropReason.CONCURRENCY, effects)
                return None
            if rate is not None and rating.hold_if_over_rate(
                job, rate, admitted=rate_admitted, now=now, rates_json=flow.rates_json
            ):
                _dropped(job, delivery.attempt, DropReason.RATE, effects)
                return None
            if number > 1 and self.hold(job, number, now=now, effects=effects):
                _dropped(job, delivery.attempt, DropReason.BUDGET, effects)
                return None
            policy = policy_for(job.kind)
            # Never before the enqueue it runs from (stamped by another host's
            # estimate of the database's clock: jobs.clock, to half a round trip).
            at = max(now, job.enqueued_at) if job.enqueued_at is not None else now
            lease = timedelta(seconds=policy.hard_time_limit + settings.JOBS_LEASE_GRACE)
            columns = changes.started(
                number=number, started_at=job.started_at or at, lease_expires_at=now + lease
            )
            job.save(update_fields=changes.apply(job, columns))
            row = Attempt.objects.create(
                job=job,
                number=number,
                worker_hostname=delivery.hostname,
                worker_pid=delivery.pid,
                started_at=at,
                rss_before_bytes=delivery.rss_bytes,
            )
        effects.send(events.attempt_started, job=job, attempt=row)
        if number == 1:
            # The retry budget's denominator: one pipelined write, never raises.
            effects.call(lambda: budget.record_first(job.kind, now=now.timestamp()))
        log_started(job, number)
        return started_attempt(job, number, policy)

    def _number(
        self, job: Job, delivery: Delivery, *, now: datetime, effects: Effects
    ) -> tuple[int | None, str]:
        """The attempt a delivery may start on the locked `job`, or None and why not."""
        attempt = delivery.attempt
        if job.is_terminal:
            return None, DropReason.TERMINAL
        if job.status == JobStatus.QUEUED and job.attempts_made == attempt - 1:
            return attempt, ""
        last = job.attempts.filter(number=job.attempts_made).first()
        if job.status == JobStatus.QUEUED and 0 < attempt <= job.attempts_made:
            # A requeued message keeps the number it was first published for.
            if last is not None and last.outcome == AttemptOutcome.WORKER_LOST:
                return job.attempts_made + 1, ""
        elif job.status == JobStatus.RUNNING and 0 < attempt <= job.attempts_made:
            if last is None or not provably_over(last, job, now=now, hostname=delivery.hostname):
                return None, DropReason.LIVE
            message = "worker lost: the process running this attempt is gone (found on redelivery)"
            self.lose_locked(job, last, now=now, requeued=True, message=message, effects=effects)
            if job.status == JobStatus.QUEUED:
                return job.attempts_made + 1, ""
        return None, DropReason.STALE

    def hold(self, job: Job, number: int, *, now: datetime, effects: Effects) -> bool:
        """Whether retry attempt `number` may not start now by the kind's retry budget (row locked).

        The retry decision counted the retry in the budget window of its due
        time; one that waited in the queue into a later window is counted
        again where it starts (jobs.budget.admit). Over budget there, the job
        goes back to `retrying` until the budget's next free slot, or is dead
        with reason `budget`, and True is returned. Retries no decision
        counted (a lost worker's requeue, a requeue from the dead-letter set)
        are not judged here.
        """
        previous = job.attempts.filter(number=number - 1).only("finished_at", "retry_delay_seconds")
        row = previous.first()
        if row is None or row.finished_at is None or row.retry_delay_seconds is None:
            return False
        due = row.finished_at.timestamp() + row.retry_delay_seconds
        slot = budget.admit(job.kind, due=due, now=now.timestamp())
        if slot is None or slot.fallback or (slot.granted and not slot.deferred):
            return False
        if slot.first_exhaustion:
            log_budget_exhausted(job.kind)
        if slot.granted:
            until = datetime.fromtimestamp(slot.due, tz=UTC)
            why = waiting.held_by_budget(kind=job.kind, held=slot.due - now.timestamp())
            job.save(
                update_fields=changes.apply(job, changes.held(until=until, held_by=why, now=now))
            )
            # The retry now waits until the slot it was counted in: its start
            # there must be judged against that slot, not the due time it was
            # first given (else it is counted again at each start, each time
            # with a fresh maximum deferral, and held for ever).
            previous.update(retry_delay_seconds=slot.due - row.finished_at.timestamp())
            logger.info(
                "retry held by the retry budget job_id=%s kind=%s attempt=%s next_attempt_at=%s",
                job.id,
                job.kind,
                number,
                until.isoformat(),
            )
        else:
            job.save(
                update_fields=changes.apply(job, changes.held(until=None, held_by=None, now=now))
            )
            effects.send(events.job_completed, job=job)
            logger.warning(
                "job dead job_id=%s kind=%s attempt=%s reason=budget: its retry started in a "
                "budget window with no room and found no slot within the maximum deferral",
                job.id,
                job.kind,
                number,
            )
        return True

    def finish(
        self, ref: AttemptRef, report: AttemptReport, *, now: datetime, effects: Effects
    ) -> AttemptEnd:
        """jobs.engine.Engine.finish's general path."""
        decision: Decision | None = None
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(id=ref.job_id).first()
            if job is None:
                return AttemptEnd(status=None, outcome=report.outcome)
            row = job.attempts.filter(number=ref.number).first()
            if row is None or row.finished_at is not None:
                return AttemptEnd(status=None, job_status=job.status, outcome=report.outcome)
            if job.status != JobStatus.RUNNING or job.attempts_made != ref.number:
                # The job moved on (cancelled): the attempt is closed, nothing decided.
                self._end(
                    job, row, report, None, now=now, rss=ref.rss_bytes, effects=effects, moves=False
                )
                return AttemptEnd(status=None, job_status=job.status, outcome=report.outcome)
            decision = decide_end(started_attempt(job, ref.number), report, now=now)
            self._end(job, row, report, decision, now=now, rss=ref.rss_bytes, effects=effects)
        log_finished(job, ref.number, report)
        return AttemptEnd.after(job, ref.number, report.outcome, decision)

    def lose(self, loss: Loss, *, now: datetime, effects: Effects) -> AttemptEnd:
        """jobs.engine.Engine.lose: the child running the job's current attempt died."""
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(id=loss.job_id).first()
            if job is None:
                return AttemptEnd(status=None)
            row = job.attempts.filter(number=job.attempts_made).first()
            ours = (
                row is not None
                and row.finished_at is None
                and (
                    row.worker_pid == loss.worker_pid
                    if loss.worker_pid
                    else row.number >= loss.attempt
                )
            )
            if job.status == JobStatus.RUNNING and ours and row is not None:
                decision = self.lose_locked(
                    job, row, now=now, requeued=True, message=loss.message, effects=effects
                )
                return AttemptEnd.after(job, row.number, AttemptOutcome.WORKER_LOST, decision)
            if job.status == JobStatus.QUEUED and job.waiting_reason not in HELD_REASONS:
                # A child lost before its attempt started: Celery puts the message
                # back on the queue; its publish time is now, so the lost-message
                # check does not take it for a vanished one. (A job a pause holds
                # stays unpublished: the leader publishes it after the resume.)
                Job.objects.filter(id=job.id, status=JobStatus.QUEUED).update(published_at=Now())
            return AttemptEnd(status=None, job_status=job.status)

    def lose_locked(
        self,
        job: Job,
        row: Attempt,
        *,
        now: datetime,
        requeued: bool,
        message: str,
        effects: Effects,
    ) -> Decision:
        """Close attempt `row` as worker_lost and apply the decision (job row locked by the caller).

        jobs.decisions.decide: dead "poison" once JOBS_POISON_AFTER attempts
        were lost, dead "exhausted" when no attempts remain, otherwise queued
        again at once. `requeued` says the broker still holds a message for
        the job (Celery requeued it), so nothing must be published.
        """
        job.worker_losses += 1
        decision = decide(
            policy=policy_for(job.kind),
            outcome=AttemptOutcome.WORKER_LOST,
            retryable=True,
            attempts_made=job.attempts_made,
            max_attempts=job.max_attempts,
            worker_losses=job.worker_losses,
            poison_after=settings.JOBS_POISON_AFTER,
        )
        report = AttemptReport(
            outcome=AttemptOutcome.WORKER_LOST, error_type="WorkerLostError", error_message=message
        )
        self._end(
            job,
            row,
            report,
            decision,
            now=now,
            rss=row.rss_after_bytes,
            effects=effects,
            requeued=requeued,
            counted={"worker_losses": job.worker_losses},
        )
        return decision

    def _end(
        self,
        job: Job,
        row: Attempt,
        report: AttemptReport,
        decision: Decision | None,
        *,
        now: datetime,
        rss: int | None,
        effects: Effects,
        requeued: bool = False,
        counted: dict[str, int] | None = None,
        moves: bool = True,
    ) -> None:
        """Write how attempt `row` ended and, when the job `moves` on with it, the job's next
        status by `decision` (row locked); `counted` are further job columns written with it
        (the lost-worker count). attempt_finished goes out with the decision."""
        if moves:
            ending = changes.ending(decision, report=report, now=now, requeued=requeued)
            job.save(update_fields=changes.apply(job, ending.job | (counted or {})))
        columns = changes.closed(report, decision, now=now)
        # An attempt ended from outside its child (hard limit, lost worker) is in its
        # job's trace too: every attempt of a job shares the submitting request's trace.
        columns["trace_id"] = (
            report.trace_id or row.trace_id or tracing.trace_id_from(job.trace_parent)
        )
        columns["rss_after_bytes"] = rss
        row.save(update_fields=changes.apply(row, columns))
        effects.send(events.attempt_finished, job=job, attempt=row, decision=decision)
        if moves and job.is_terminal:
            effects.send(events.job_completed, job=job)
        if moves and job.kind in self.limits():
            effects.slot_freed(job)
        if moves and decision is not None:
            log_decision(job, row.number, report.outcome, decision, job.last_error)


def _dropped(job: Job, attempt: int, why: str, effects: Effects) -> None:
    effects.send(events.delivery_dropped, job=job, reason=why)
    logger.info(
        "delivery dropped unrun (duplicate suppressed) job_id=%s attempt=%s status=%s reason=%s",
        job.id,
        attempt,
        job.status,
        why,
    )
