"""What every way an attempt ends shares: closing its row, the retry decision, events and logs.

Used by jobs.services.attempt_finish (the attempt's own outcome),
jobs.services.worker_loss (its child died) and jobs.services.attempt_start
(a retry held by the retry budget at its start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs import budget, events
from jobs.decisions import Action, Decision, decide
from jobs.models import Attempt, Job
from jobs.policy import Policy
from jobs.services.records import AttemptReport, without_nul
from observability import tracing

logger = logging.getLogger(__name__)


def savepoint_if_nested() -> Any:
    """A context manager for a one-statement write: a savepoint inside a transaction, else nothing.

    The statement needs no transaction of its own; inside a caller's
    transaction (tests), a savepoint keeps a refused write (DataError) from
    aborting it, as the general path's atomic block does.
    """
    return transaction.atomic() if transaction.get_connection().in_atomic_block else nullcontext()


def close_attempt(
    row: Attempt, report: AttemptReport, *, now: datetime, decision: Decision | None = None
) -> None:
    """Write how attempt `row` ended (`report`, at `now`) and send attempt_finished after commit.

    Error type, message and traceback are cut to their columns (255, 10,000
    and the last 20,000 characters) and stripped of NUL, which PostgreSQL
    text refuses. Raises the database's errors.
    """
    # Sent after commit, when `row.job` holds the job's final state; the
    # decision travels with it so telemetry never re-derives it.
    transaction.on_commit(
        lambda: events.attempt_finished.send(
            sender=Job, job=row.job, attempt=row, decision=decision
        )
    )
    row.finished_at = now
    row.outcome = report.outcome
    # An attempt ended from outside its child (hard limit, lost worker) is in its
    # job's trace too: every attempt of a job shares the submitting request's trace.
    row.trace_id = report.trace_id or row.trace_id or tracing.trace_id_from(row.job.trace_parent)
    row.error_type = without_nul(report.error_type[:255])
    row.error_message = without_nul(report.error_message[:10_000])
    row.traceback = without_nul(report.traceback[-20_000:])
    row.save()


def job_completed(job: Job) -> None:
    """Send jobs.events.job_completed for `job` (now terminal) once the transaction commits."""
    transaction.on_commit(lambda: events.job_completed.send(sender=Job, job=job))


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
