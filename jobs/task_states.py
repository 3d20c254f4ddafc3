"""Celery task states of an attempt: what Flower and celery-exporter users see.

Each attempt is one Celery task (id `<job id>:<attempt>`). Its state follows
the attempt's recorded end and the one retry decision (jobs.decisions), so a
retry storm shows as retries and failures where Celery users already look:

| attempt end                                 | state    | event (worker main process) |
|---------------------------------------------|----------|-----------------------------|
| succeeded                                   | SUCCESS  | task-succeeded, result = summary() |
| failed, another attempt follows             | RETRY    | task-retried                |
| failed, job dead (error, exhausted, poison, budget) | FAILURE | task-failed (exception named as the attempt's) |
| cancelled (the job was cancelled)           | REVOKED  | task-revoked                |
| delivery dropped unrun (duplicate, stale), or an outcome nobody could use | IGNORED | task-ignored |

Celery retries nothing: RETRY comes from raising `celery.exceptions.Retry`
directly, never through the task's retry method, so Celery publishes no message (no
countdown, no ETA); the scheduler stays the only way back to the queue. The
message is acknowledged in every case (acks_late), exactly as before; a lost
child's message is still requeued by jobs.tasks.AttemptRequest.

While an attempt runs, each progress report written (jobs.progress) is sent
as a custom `task-progress` event: Flower shows the task in state PROGRESS
with `done`, `total`, `ratio` and `message` (Celery users' PROGRESS state;
not through `update_state`, which needs a result backend and this platform
keeps results in its database).

REVOKED and IGNORED are raised as Ignore subclasses (Celery acknowledges
and sends nothing for Ignore); the worker's main process turns them into
the task-revoked / task-ignored events (jobs.tasks.AttemptRequest).
IGNORED is Celery's own state name for a task that raised Ignore; Celery
sends no event for it, so Flower would leave such a task STARTED forever.
Not REJECTED: Celery's event state ranks REJECTED below STARTED
(celery.states.PRECEDENCE), so a task-rejected after task-started never
shows; a custom event's state ranks above it. celery-exporter has no
counter for task-ignored, so none of its counters move; our
jobs_duplicate_deliveries_total counts these deliveries by reason.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from celery.exceptions import Ignore, Retry

from jobs.attempt_errors import AttemptError, error_class
from jobs.decisions import Action
from jobs.engine.values import AttemptEnd, AttemptReport
from jobs.models import AttemptOutcome, JobStatus

MIB = 1024 * 1024


class AttemptRevoked(Ignore):
    """The attempt ended because its job was cancelled: Celery state REVOKED."""


class DeliveryIgnored(Ignore):
    """The delivery ran nothing that counts (duplicate, stale, or overtaken): state IGNORED."""


def summary(
    *,
    job_id: str,
    attempt: int,
    outcome: str,
    duration_seconds: float,
    rss_before_bytes: int | None,
    rss_after_bytes: int | None,
) -> dict[str, Any]:
    """The SUCCESS result: a small JSON object (Flower shows its repr).

    Keys: job_id, attempt, outcome, duration_seconds (wall time of the
    attempt, seconds), rss_before_bytes / rss_after_bytes (the child's
    resident memory around the attempt, bytes) and rss_growth_bytes (after
    minus before; None when either is unknown).
    """
    growth = (
        rss_after_bytes - rss_before_bytes
        if rss_before_bytes is not None and rss_after_bytes is not None
        else None
    )
    return {
        "job_id": job_id,
        "attempt": attempt,
        "outcome": outcome,
        "duration_seconds": round(duration_seconds, 6),
        "rss_before_bytes": rss_before_bytes,
        "rss_after_bytes": rss_after_bytes,
        "rss_growth_bytes": growth,
    }


def _iso(moment: datetime | None) -> str:
    if moment is None:
        return "now"
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def attempt_exception(*, error_type: str, error_message: str, end: AttemptEnd) -> AttemptError:
    """The exception the task raises for a failed attempt: named as the attempt's error.

    Its message is the attempt's message followed by what the decision
    made of it, e.g. `refused [retry: attempt 3 of 5 at 2026-11-30T10:00:01.234Z]`
    or `refused [dead: exhausted after attempt 5 of 5]`.
    """
    decision = end.decision
    attempt, max_attempts = end.attempt, end.max_attempts
    if decision is None:
        tail = ""
    elif decision.action == Action.RETRY:
        tail = (
            f" [retry: attempt {attempt + 1} of {max_attempts} at {_iso(end.next_attempt_at)},"
            f" in {decision.delay_seconds:.3f}s"
            + (", deferred by the retry budget" if decision.budget_deferred else "")
            + "]"
        )
    elif decision.action == Action.REQUEUE:
        tail = f" [retry: attempt {attempt + 1} of {max_attempts}, queued again now]"
    else:
        tail = f" [dead: {decision.dead_reason} after attempt {attempt} of {max_attempts}]"
    return error_class(error_type)(f"{error_message}{tail}")


def raise_for(
    *,
    end: AttemptEnd | None,
    report: AttemptReport | None,
    attempt: int,
    max_attempts: int,
    result: dict[str, Any],
) -> dict[str, Any]:
    """Return `result` (SUCCESS) or raise what gives the attempt its Celery state (table above).

    `end` is None when the delivery was dropped before it started anything.
    Raises Retry (RETRY), an AttemptError subclass (FAILURE), AttemptRevoked
    (REVOKED) or DeliveryIgnored (IGNORED).
    """
    if end is None or report is None:
        raise DeliveryIgnored(f"delivery for attempt {attempt} dropped unrun (duplicate or stale)")
    if end.spooled:
        # Written later by the scheduler: the work is done, its decision not made yet.
        if end.outcome == AttemptOutcome.SUCCEEDED:
            return result
        exc = error_class(report.error_type)(report.error_message)
        exc.add_note("outcome spooled: the database was unreachable; the scheduler records it")
        raise exc from report.exception
    if end.outcome == AttemptOutcome.CANCELLED or (
        end.status is None and end.job_status == JobStatus.CANCELLED
    ):
        raise AttemptRevoked("job cancelled")
    if end.status is None:
        raise DeliveryIgnored(
            f"attempt {attempt} ended {end.outcome} after the job had moved on "
            f"(job {end.job_status or 'gone'}); nothing recorded"
        )
    if end.outcome == AttemptOutcome.SUCCEEDED:
        return result
    exc = attempt_exception(
        error_type=report.error_type, error_message=report.error_message, end=end
    )
    exc.add_note(
        f"attempt {attempt} of {max_attempts}: outcome {end.outcome}; child RSS before "
        f"{_mib(result.get('rss_before_bytes'))}, after {_mib(result.get('rss_after_bytes'))}"
    )
    if end.decision is not None and end.decision.retries:
        # Raised directly: Celery records RETRY and republishes nothing.
        raise Retry(
            message=f"Retry at {_iso(end.next_attempt_at)}: {exc!r}",
            exc=exc,
            when=end.next_attempt_at,
        ) from report.exception
    raise exc from report.exception


def _mib(value: Any) -> str:
    return f"{value / MIB:.1f} MiB" if isinstance(value, int) else "unknown"


def send_progress(task: Any, progress: Any) -> None:
    """Send `progress` (a jobs.progress.Progress) as the running task's `task-progress` event."""
    task.send_event("task-progress", retry=False, **progress.as_dict())
