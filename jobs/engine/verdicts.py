"""The verdict on a failed attempt (the one decision with its retry budget) and the engine's log lines.

Used by every backend (jobs.engine.backends): the decision is made before
the write, so the one-statement paths and the ORM path decide alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from jobs import budget
from jobs.decisions import Action, Decision, decide
from jobs.engine.values import AttemptReport, StartedAttempt
from jobs.kinds import policy_for
from jobs.models import AttemptOutcome, Job
from jobs.policy import Policy
from observability import tracing

logger = logging.getLogger(__name__)


def log_decision(job: Job, attempt: int, outcome: str, decision: Decision, error: str) -> None:
    """One line per failed attempt: WARNING when the job is dead, INFO when it gets another attempt."""
    trace_id = tracing.trace_id_from(job.trace_parent)
    first_line = error.splitlines()[0][:500] if error else ""
    if decision.action == Action.DEAD:
        logger.warning(
            "job dead job_id=%s kind=%s attempt=%s outcome=%s reason=%s trace_id=%s: %s",
            job.id,
            job.kind,
            attempt,
            outcome,
            decision.dead_reason,
            trace_id,
            first_line,
        )
    else:
        logger.info(
            "job retry scheduled job_id=%s kind=%s attempt=%s outcome=%s action=%s "
            "delay=%.3fs budget_deferred=%s trace_id=%s: %s",
            job.id,
            job.kind,
            attempt,
            outcome,
            decision.action,
            decision.delay_seconds,
            decision.budget_deferred,
            trace_id,
            first_line,
        )


def log_budget_exhausted(kind: str) -> None:
    """Log that `kind`'s retry budget ran out, with the budget's settings.

    Called once per kind and budget window across all workers (the first
    exhaustion jobs.budget reports), not per job.
    """
    logger.warning(
        "retry budget exhausted kind=%s window=%ss ratio=%s floor=%s: retries are "
        "deferred, or dead with reason budget past %ss",
        kind,
        settings.JOBS_RETRY_BUDGET_WINDOW,
        settings.JOBS_RETRY_BUDGET_RATIO,
        settings.JOBS_RETRY_BUDGET_FLOOR,
        settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL,
    )


def budget_for(kind: str, *, now: datetime) -> Callable[[float], budget.Reservation]:
    """The decision's retry-budget callback for a `kind` job: delay (seconds) -> budget.Reservation."""
    at = now.timestamp()

    def ask(delay: float) -> budget.Reservation:
        return budget.reserve(kind, now=at, due=at + delay)

    return ask


def decide_failure(
    *,
    kind: str,
    policy: Policy,
    report: AttemptReport,
    attempts_made: int,
    max_attempts: int,
    now: datetime,
) -> Decision:
    """The one retry decision (jobs.decisions.decide) on a failed attempt of a `kind` job.

    The retry budget is asked for the retry's window (budget_for); its
    first exhaustion in a window is logged once (log_budget_exhausted).
    """
    decision = decide(
        policy=policy,
        outcome=report.outcome,
        retryable=report.retryable,
        attempts_made=attempts_made,
        max_attempts=max_attempts,
        retry_after=report.retry_after,
        budget=budget_for(kind, now=now),
        kind=kind,
    )
    if decision.budget_first_exhaustion:
        log_budget_exhausted(kind)
    return decision


def log_started(job: Job, number: int) -> None:
    """One INFO line per attempt started."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "attempt started job_id=%s kind=%s attempt=%s trace_id=%s",
            job.id,
            job.kind,
            number,
            tracing.trace_id_from(job.trace_parent),
        )


def log_finished(job: Job, attempt: int, report: AttemptReport) -> None:
    """One INFO line per attempt recorded, with the job's status after it."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "attempt finished job_id=%s kind=%s attempt=%s outcome=%s status=%s trace_id=%s",
            job.id,
            job.kind,
            attempt,
            report.outcome,
            job.status,
            report.trace_id or tracing.trace_id_from(job.trace_parent),
        )


def started_attempt(job: Job, number: int, policy: Policy | None = None) -> StartedAttempt:
    """What the runner needs to run attempt `number` of `job` (the kind's policy when not given)."""
    return StartedAttempt(
        job_id=job.id,
        kind=job.kind,
        payload=job.payload,
        attempt=number,
        max_attempts=job.max_attempts,
        policy=policy or policy_for(job.kind),
        queue=job.queue,
        trace_parent=job.trace_parent,
    )


def decide_end(
    started: StartedAttempt, report: AttemptReport, *, now: datetime, attempts_made: int = 0
) -> Decision | None:
    """The decision on an attempt of `started` that ended with `report`: None after a
    success, else decide_failure's (`attempts_made`: the job's, default `started.attempt`)."""
    if report.outcome == AttemptOutcome.SUCCEEDED:
        return None
    return decide_failure(
        kind=started.kind,
        policy=started.policy,
        report=report,
        attempts_made=attempts_made or started.attempt,
        max_attempts=started.max_attempts,
        now=now,
    )
