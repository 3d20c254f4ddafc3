"""The common attempt transitions in one PostgreSQL statement each (the per-attempt fast path).

Profiled on a worker child draining no-op jobs (docs/performance.md), the
attempt's own bookkeeping was ~12 round trips in two transactions (BEGIN,
SELECT ... FOR UPDATE, one UPDATE per save, the Attempt INSERT, COMMIT) and
most of the child's time. The two transitions almost every attempt takes
are done here as one conditional statement each, in autocommit (a single
statement is its own transaction):

- start: `queued` with `attempts_made = n - 1` -> `running`, the lease
  taken and the Attempt row inserted (a data-modifying CTE);
- finish: `running` with this attempt current and unfinished -> the
  outcome, the attempt row and the job row written together, with the retry
  decision (jobs.decisions) computed before the write.

The row lock the UPDATE takes replaces SELECT ... FOR UPDATE: a concurrent
writer (the lease sweep, a cancel, a redelivery) either commits first, and
then the WHERE no longer matches, or waits for this statement. When the
condition does not hold, nothing is written and the caller falls back to
the general path (jobs.services.attempt_start, attempt_finish), which
handles every other case (duplicates, redeliveries after a lost worker, a
resumed start, an attempt already recorded).

On SQLite (3.35+, for RETURNING) each transition is two statements in one
IMMEDIATE transaction instead (jobs.services.attempt_sql_sqlite). Other
databases always take the general path.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import waiting
from jobs.decisions import Decision
from jobs.kinds import registry
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.pause_gate import NOT_PAUSED
from jobs.services import attempt_sql_sqlite
from jobs.services.attempt_sql_clauses import (
    ATTEMPT_TABLE,
    FINISH_ATTEMPT_SET,
    FINISH_JOB_WHERE,
    JOB_TABLE,
    START_NOT_WAITING,
    finish_job_set,
    retry_counted_where,
)
from jobs.services.records import AttemptReport, without_nul

_lease_cache: dict[str, Any] = {"key": None, "json": "{}"}


SQLITE_RETURNING = (3, 35, 0)


def enabled() -> bool:
    """Whether the fast path applies: PostgreSQL, or SQLite with RETURNING (3.35+)."""
    if connection.vendor == "postgresql":
        return True
    if connection.vendor == "sqlite":
        return sqlite3.sqlite_version_info >= SQLITE_RETURNING
    return False


def _sqlite() -> bool:
    return connection.vendor == "sqlite"


def _aware(value: Any) -> datetime:
    """A non-null datetime column read by raw SQL outside a model field, made aware
    (SQLite returns naive UTC, as text or as a datetime from the column's declared
    type). Raises ValueError for anything else."""
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return timezone.make_aware(parsed, UTC) if timezone.is_naive(parsed) else parsed


def _leases_json() -> str:
    """JSON {kind: lease seconds} (hard time limit + JOBS_LEASE_GRACE) of every registered kind.

    Computed once per process and recomputed only when the registry, the
    overrides or the grace change (tests swap settings).
    """
    overrides = settings.JOBS_KIND_OVERRIDES
    grace = settings.JOBS_LEASE_GRACE
    key = (len(registry._KINDS), id(overrides), grace)
    if _lease_cache["key"] != key:
        leases = {}
        for name in registry._KINDS:
            try:
                leases[name] = float(registry.policy_for(name).hard_time_limit) + float(grace)
            except ValueError:
                continue  # an invalid override: the general path raises it
        _lease_cache["json"] = json.dumps(leases)
        _lease_cache["key"] = key
    return str(_lease_cache["json"])


_START_SQL = f"""
WITH j AS (
    UPDATE {JOB_TABLE}
    SET deliveries = deliveries + 1,
        status = %(running)s,
        attempts_made = %(number)s,
        started_at = COALESCE(started_at, GREATEST(%(now)s, enqueued_at)),
        lease_expires_at = %(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8),
        {START_NOT_WAITING}
    WHERE id = %(job_id)s
      AND status = %(queued)s
      AND attempts_made = %(number)s - 1
      AND %(leases)s::jsonb ? kind
      AND {NOT_PAUSED}
      AND {retry_counted_where("extract(epoch FROM p.finished_at)::float8")}
    RETURNING {JOB_TABLE}.*
), a AS (
    INSERT INTO {ATTEMPT_TABLE} (
        job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome,
        error_type, error_message, traceback, rss_before_bytes, rss_after_bytes,
        retry_delay_seconds, trace_id
    )
    SELECT j.id, %(number)s, %(hostname)s, %(pid)s, GREATEST(%(now)s, j.enqueued_at), NULL, '',
           '', '', '', %(rss)s, NULL, NULL, ''
    FROM j
    RETURNING id, started_at
)
SELECT j.*, a.id AS jobs_attempt_id, a.started_at AS jobs_attempt_started_at FROM j, a
"""


def start(
    *,
    job_id: uuid.UUID | str,
    number: int,
    hostname: str,
    pid: int,
    rss_bytes: int | None,
    now: datetime,
    due_range: tuple[float, float] = (0.0, 0.0),
) -> tuple[Job, Attempt] | None:
    """Start attempt `number` of a queued job whose previous attempts are `number - 1`.

    Counts the delivery, sets the job running with its lease (the kind's
    hard time limit + JOBS_LEASE_GRACE from `now`) and inserts the Attempt
    row, in one statement. The attempt starts at `now`, or at the job's
    enqueue when that reads later (another host's estimate of the database's
    clock, jobs.clock): an attempt never reads as started before the enqueue
    it ran from. A retry (`number` > 1) starts only if its due
    time lies in `due_range` (epoch seconds, inclusive: where the retry
    budget counted it, jobs.budget.admitted_due_range). Returns the job
    (after the change) and the new attempt, or None when the job is not in
    that state (nothing written). Raises the database's errors.
    """
    due_from, due_to = due_range
    if _sqlite():
        started = attempt_sql_sqlite.start(
            job_id=job_id,
            number=number,
            hostname=hostname,
            pid=pid,
            rss_bytes=rss_bytes,
            now=now,
            leases=json.loads(_leases_json()),
            due_range=due_range,
        )
        if started is None:
            return None
        job, attempt_id, at = started
        return job, _started_row(job, attempt_id, number, hostname, pid, rss_bytes, at)
    rows = list(
        Job.objects.raw(
            _START_SQL,
            {
                "job_id": str(job_id),
                "number": number,
                "hostname": hostname,
                "pid": pid,
                "rss": rss_bytes,
                "now": now,
                "running": JobStatus.RUNNING.value,
                "queued": JobStatus.QUEUED.value,
                "leases": _leases_json(),
                "due_from": due_from,
                "due_to": due_to,
            },
        )
    )
    if not rows:
        return None
    extra = vars(rows[0])
    return rows[0], _started_row(
        rows[0],
        extra.pop("jobs_attempt_id"),
        number,
        hostname,
        pid,
        rss_bytes,
        _aware(extra.pop("jobs_attempt_started_at")),
    )


def _started_row(
    job: Job,
    attempt_id: int,
    number: int,
    hostname: str,
    pid: int,
    rss_bytes: int | None,
    now: datetime,
) -> Attempt:
    row = Attempt(
        id=attempt_id,
        job=job,
        number=number,
        worker_hostname=hostname,
        worker_pid=pid,
        started_at=now,
        rss_before_bytes=rss_bytes,
    )
    row._state.adding = False
    return row


_FINISH_SQL = f"""
WITH j AS (
    UPDATE {JOB_TABLE}
    SET {finish_job_set("%(result)s::jsonb")}
    WHERE {FINISH_JOB_WHERE}
    RETURNING {JOB_TABLE}.*
), a AS (
    UPDATE {ATTEMPT_TABLE}
    SET {FINISH_ATTEMPT_SET}
    WHERE job_id = %(job_id)s AND number = %(number)s AND EXISTS (SELECT 1 FROM j)
    RETURNING id AS a_id, worker_hostname AS a_worker_hostname, worker_pid AS a_worker_pid,
              started_at AS a_started_at, rss_before_bytes AS a_rss_before_bytes,
              retry_delay_seconds AS a_retry_delay_seconds, trace_id AS a_trace_id
)
SELECT j.*, a.* FROM j, a
"""


def finish(
    *,
    job_id: uuid.UUID | str,
    number: int,
    report: AttemptReport,
    rss_bytes: int | None,
    now: datetime,
    status: str,
    decision: Decision | None,
    next_attempt_at: datetime | None,
    parent_trace_id: str,
) -> tuple[Job, Attempt] | None:
    """Write how attempt `number` ended and the job's new `status`, in one statement.

    Applies only while the job is running this attempt and the attempt is
    unfinished; returns the job and the attempt after the change, or None
    (nothing written). `decision` (None after a success) was made by the
    caller before the write; `next_attempt_at` is set when retrying.
    `parent_trace_id` is the job's trace id, stored when neither the report
    nor the row has one. Raises the database's errors (DataError for a
    result the database cannot store).
    """
    succeeded = report.outcome == AttemptOutcome.SUCCEEDED
    retrying = status == JobStatus.RETRYING
    terminal = status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    last_error = (
        "" if succeeded else without_nul(f"{report.error_type}: {report.error_message}"[:10_000])
    )
    result = without_nul(report.result)
    params = {
        "job_id": str(job_id),
        "number": number,
        "status": status,
        "running": JobStatus.RUNNING.value,
        "succeeded": succeeded,
        "retrying": retrying,
        "terminal": terminal,
        "result": None if result is None else json.dumps(result, allow_nan=False),
        "now": now,
        "dead_reason": decision.dead_reason if decision is not None else "",
        "next_attempt_at": next_attempt_at,
        "last_error": last_error,
        "outcome": str(report.outcome),
        "trace_id": report.trace_id,
        "parent_trace_id": parent_trace_id,
        "error_type": without_nul(report.error_type[:255]),
        "error_message": without_nul(report.error_message[:10_000]),
        "traceback": without_nul(report.traceback[-20_000:]),
        "rss": rss_bytes,
        "delay": decision.delay_seconds if decision is not None else None,
        **waiting.fields(decision.waiting if retrying and decision is not None else None),
    }
    if _sqlite():
        found = attempt_sql_sqlite.finish(params)
        if found is None:
            return None
        job, extra = found
    else:
        rows = list(Job.objects.raw(_FINISH_SQL, params))
        if not rows:
            return None
        job = rows[0]
        # The attempt's columns came back as extra attributes of the raw job row.
        extra = {name[2:]: vars(job).pop(name) for name in list(vars(job)) if name.startswith("a_")}
    row = Attempt(
        id=extra["id"],
        job=job,
        number=number,
        worker_hostname=extra["worker_hostname"],
        worker_pid=extra["worker_pid"],
        started_at=_aware(extra["started_at"]),
        finished_at=now,
        outcome=report.outcome,
        error_type=without_nul(report.error_type[:255]),
        error_message=without_nul(report.error_message[:10_000]),
        traceback=without_nul(report.traceback[-20_000:]),
        rss_before_bytes=extra["rss_before_bytes"],
        rss_after_bytes=rss_bytes,
        retry_delay_seconds=extra["retry_delay_seconds"],
        trace_id=extra["trace_id"],
    )
    row._state.adding = False
    return job, row
