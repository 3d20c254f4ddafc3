"""Row changes: what each transition writes on the job row and the attempt row.

`ending` is the one mapping from an attempt's end (its report and the one
retry decision, jobs.decisions) to column values; every backend applies it
(the ORM with `save(update_fields=...)`, PostgreSQL and SQLite as statement
parameters, jobs.engine.sql). The other transitions (start, hold, hold by a
pause, cancel, queue again, requeue, submit) have one small function each. Values are
column name -> value; an expression (Now()) is evaluated by the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models.functions import Now

from jobs import waiting
from jobs.decisions import Action, Decision
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.waiting import Waiting

from .values import AttemptReport, without_nul

# Column limits of jobs.models.Attempt and Job (characters).
ERROR_TYPE_MAX = 255
ERROR_MESSAGE_MAX = 10_000
TRACEBACK_KEEP = 20_000


# A job no attempt runs and none is due for.
_NOT_DUE = {"next_attempt_at": None, "lease_expires_at": None}


@dataclass(frozen=True)
class RowChanges:
    """Columns to set: `job` on the job row, `attempt` on the attempt row (empty: none)."""

    job: dict[str, Any]
    attempt: dict[str, Any] = field(default_factory=dict)


def last_error(report: AttemptReport) -> str:
    """The job's `last_error` for a failed attempt: "<type>: <message>", cut and NUL-free."""
    return str(without_nul(f"{report.error_type}: {report.error_message}"[:ERROR_MESSAGE_MAX]))


def ending(
    decision: Decision | None, *, report: AttemptReport, now: datetime, requeued: bool = False
) -> RowChanges:
    """The row changes of an attempt that ended with `report` at `now`, by `decision`.

    `decision` is None after a success, else the one retry decision:
    `retry` -> retrying after its delay (the attempt keeps the delay),
    `requeue` -> queued again at once (a lost worker; `requeued`: the
    broker still holds its message, so it counts as published now),
    `dead` -> dead with the decision's reason. The attempt's trace id is
    left to the backend (it falls back to the row's and the job's).
    """
    attempt = closed(report, decision, now=now)
    job: dict[str, Any] = {"lease_expires_at": None}
    if decision is None and report.outcome == AttemptOutcome.SUCCEEDED:
        job |= {
            "status": JobStatus.SUCCEEDED,
            "result": without_nul(report.result),
            "finished_at": now,
            **waiting.NOT_WAITING,
        }
        return RowChanges(job=job, attempt=attempt)
    if decision is None:
        raise ValueError(f"a {report.outcome} attempt needs a decision")
    job["last_error"] = last_error(report)
    if decision.action == Action.DEAD:
        job |= {
            "status": JobStatus.DEAD,
            "dead_reason": decision.dead_reason,
            "finished_at": now,
            **waiting.NOT_WAITING,
        }
    elif decision.action == Action.RETRY:
        job |= {
            "status": JobStatus.RETRYING,
            "next_attempt_at": now + timedelta(seconds=decision.delay_seconds),
            **waiting.fields(decision.waiting),
        }
    else:
        # The message goes back on the queue now: stamped on the database's
        # clock, like every publish (jobs.services.lost_messages compares them).
        job |= {
            "status": JobStatus.QUEUED,
            "enqueued_at": now,
            "published_at": Now() if requeued else None,
            **waiting.NOT_WAITING,
        }
    return RowChanges(job=job, attempt=attempt)


def closed(report: AttemptReport, decision: Decision | None, *, now: datetime) -> dict[str, Any]:
    """The attempt row of an attempt that ended with `report` at `now` (a retry keeps its
    delay). Error type, message and traceback are cut to their columns (255, 10,000 and
    the last 20,000 characters) and stripped of NUL, which PostgreSQL text refuses."""
    columns: dict[str, Any] = {
        "finished_at": now,
        "outcome": report.outcome,
        "error_type": without_nul(report.error_type[:ERROR_TYPE_MAX]),
        "error_message": without_nul(report.error_message[:ERROR_MESSAGE_MAX]),
        "traceback": without_nul(report.traceback[-TRACEBACK_KEEP:]),
    }
    if decision is not None and decision.action == Action.RETRY:
        columns["retry_delay_seconds"] = decision.delay_seconds
    return columns


def started(*, number: int, started_at: datetime, lease_expires_at: datetime) -> dict[str, Any]:
    """The job row of a job starting attempt `number` (no longer waiting; an earlier
    attempt's progress is not this one's, jobs.progress). `started_at` is kept when set."""
    return {
        "status": JobStatus.RUNNING,
        "attempts_made": number,
        "started_at": started_at,
        "lease_expires_at": lease_expires_at,
        "progress_done": None,
        "progress_total": None,
        "progress_message": "",
        "progress_at": None,
        **waiting.NOT_WAITING,
    }


def held(*, until: datetime | None, held_by: Waiting | None, now: datetime) -> dict[str, Any]:
    """A retry about to start sent back by the retry budget: retrying until `until`
    (why: `held_by`), or, with no slot (`until` None), dead with reason `budget`."""
    if until is None:
        return {
            "status": JobStatus.DEAD,
            "dead_reason": DeadReason.BUDGET,
            "finished_at": now,
            **waiting.NOT_WAITING,
        }
    return {"status": JobStatus.RETRYING, "next_attempt_at": until, **waiting.fields(held_by)}


def held_by_pause(held_by: Waiting) -> dict[str, Any]:
    """A queued job a pause holds (why: `held_by`): still queued, unpublished and
    unclaimed, so nothing publishes it until the leader releases it after the resume."""
    unpublished = {"published_at": None, "publish_claimed_by": "", "publish_claimed_until": None}
    return {**unpublished, **waiting.fields(held_by)}


def dropped_by_broker(*, now: datetime) -> dict[str, Any]:
    """A queued job whose message the broker dropped past its delivery limit: dead
    with reason `delivery_limit` (RabbitMQ's x-delivery-limit, docs/brokers.md)."""
    return {
        "status": JobStatus.DEAD,
        "dead_reason": DeadReason.DELIVERY_LIMIT,
        "finished_at": now,
        **waiting.NOT_WAITING,
    }


def cancelled(*, now: datetime) -> dict[str, Any]:
    """A non-terminal job cancelled at `now`."""
    return {"status": JobStatus.CANCELLED, "finished_at": now, **_NOT_DUE, **waiting.NOT_WAITING}


def queued(*, now: datetime) -> dict[str, Any]:
    """A job queued for its next attempt at `now`, waiting for its publish (the outbox)."""
    unpublished = {"enqueued_at": now, "published_at": None}
    return {
        "status": JobStatus.QUEUED,
        "next_attempt_at": None,
        **unpublished,
        **waiting.NOT_WAITING,
    }


def requeued(*, now: datetime, max_attempts: int) -> dict[str, Any]:
    """A dead job queued again with `max_attempts`; the poison count starts again."""
    return {
        **queued(now=now),
        "max_attempts": max_attempts,
        "worker_losses": 0,
        "dead_reason": "",
        "finished_at": None,
    }


def submitted(
    *,
    delayed: bool,
    run_after: datetime | None,
    held_by: Waiting | None = None,
    held_until: datetime | None = None,
    **columns: Any,
) -> Job:
    """A new job row (unsaved): `delayed` until `run_after`, else queued (held, unpublished,
    when `held_by` says why: an open fuse, a rate limit with its reserved start
    `held_until`); `columns` the rest."""
    why = waiting.for_run_after(run_after=run_after) if delayed else held_by
    return Job(
        status=JobStatus.DELAYED if delayed else JobStatus.QUEUED,
        run_after=run_after,
        next_attempt_at=run_after if delayed else held_until,
        **waiting.fields(why),
        **columns,
    )


def apply(row: Any, columns: dict[str, Any]) -> list[str]:
    """Set `columns` on the model instance `row`; returns their names (for the ORM's save)."""
    for name, value in columns.items():
        setattr(row, name, value)
    return list(columns)
