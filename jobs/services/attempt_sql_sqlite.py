"""The attempt fast path on SQLite (3.35+): each transition as two statements in one transaction.

SQLite has no data-modifying CTE, so jobs.services.attempt_sql's single
PostgreSQL statements become an UPDATE ... RETURNING of the job and a write
of the attempt, in one IMMEDIATE transaction (Django's SQLite backend
begins `transaction.atomic()` that way when `"transaction_mode":
"IMMEDIATE"` is set): the writer lock taken at BEGIN serialises every
writer, as the row lock does on PostgreSQL. Parameters are those
attempt_sql builds; datetimes and the job id are adapted here to what
SQLite stores (naive UTC text, 32 hex digits).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from jobs.models import Job, JobStatus
from jobs.pause_gate import NOT_PAUSED
from jobs.services.attempt_sql_clauses import (
    ATTEMPT_TABLE,
    FINISH_ATTEMPT_SET,
    FINISH_JOB_WHERE,
    JOB_TABLE,
    START_NOT_WAITING,
    finish_job_set,
    retry_counted_where,
)

# The lease's end per kind, computed in Python from `now` (SQLite's date
# functions keep milliseconds only; the stored times keep microseconds).
_LEASE = "json_extract(%(leases)s, '$.\"' || kind || '\"')"
_START_JOB = f"""
UPDATE {JOB_TABLE}
SET deliveries = deliveries + 1,
    status = %(running)s,
    attempts_made = %(number)s,
    started_at = COALESCE(started_at, MAX(%(now)s, COALESCE(enqueued_at, %(now)s))),
    lease_expires_at = {_LEASE},
    {START_NOT_WAITING}
WHERE id = %(job_id)s
  AND status = %(queued)s
  AND attempts_made = %(number)s - 1
  AND {_LEASE} IS NOT NULL
  AND {NOT_PAUSED}
  AND {retry_counted_where("(julianday(p.finished_at) - 2440587.5) * 86400.0")}
RETURNING *
"""
_START_ATTEMPT = f"""
INSERT INTO {ATTEMPT_TABLE} (
    job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome,
    error_type, error_message, traceback, rss_before_bytes, rss_after_bytes,
    retry_delay_seconds, trace_id
)
VALUES (%(job_id)s, %(number)s, %(hostname)s, %(pid)s, %(started)s, NULL, '', '', '', '',
        %(rss)s, NULL, NULL, '')
RETURNING id
"""
_FINISH_JOB = f"""
UPDATE {JOB_TABLE}
SET {finish_job_set("%(result)s")}
WHERE {FINISH_JOB_WHERE}
RETURNING *
"""
_FINISH_ATTEMPT = f"""
UPDATE {ATTEMPT_TABLE}
SET {FINISH_ATTEMPT_SET}
WHERE job_id = %(job_id)s AND number = %(number)s
RETURNING id, worker_hostname, worker_pid, started_at, rss_before_bytes,
          retry_delay_seconds, trace_id
"""
_ATTEMPT_COLUMNS = (
    "id",
    "worker_hostname",
    "worker_pid",
    "started_at",
    "rss_before_bytes",
    "retry_delay_seconds",
    "trace_id",
)


def _db_datetime(value: datetime | None) -> Any:
    """`value` as the database stores it (SQLite: naive UTC text), for raw SQL parameters."""
    return connection.ops.adapt_datetimefield_value(value)


def _db_job_id(job_id: uuid.UUID | str) -> Any:
    """The job's primary key as the database stores it (SQLite: 32 hex digits)."""
    return Job._meta.pk.get_db_prep_value(uuid.UUID(str(job_id)), connection)


def start(
    *,
    job_id: uuid.UUID | str,
    number: int,
    hostname: str,
    pid: int,
    rss_bytes: int | None,
    now: datetime,
    leases: dict[str, float],
    due_range: tuple[float, float] = (0.0, 0.0),
) -> tuple[Job, int, datetime] | None:
    """attempt_sql.start on SQLite: returns the job after the change, the new
    attempt's id and its start (`now`, or the job's enqueue if later), or None when the job is not queued with `number - 1` attempts
    made, or is a retry due outside `due_range` (nothing written). `leases`
    maps each kind to its lease in seconds. Raises the database's errors."""
    params = {
        "job_id": _db_job_id(job_id),
        "number": number,
        "hostname": hostname,
        "pid": pid,
        "rss": rss_bytes,
        "now": _db_datetime(now),
        "running": JobStatus.RUNNING.value,
        "queued": JobStatus.QUEUED.value,
        "due_from": due_range[0],
        "due_to": due_range[1],
        "leases": json.dumps(
            {
                kind: _db_datetime(now + timedelta(seconds=seconds))
                for kind, seconds in leases.items()
            }
        ),
    }
    with transaction.atomic():
        rows = list(Job.objects.raw(_START_JOB, params))
        if not rows:
            return None
        enqueued = rows[0].enqueued_at
        started = max(now, enqueued) if enqueued is not None else now
        with connection.cursor() as cursor:
            cursor.execute(_START_ATTEMPT, {**params, "started": _db_datetime(started)})
            (attempt_id,) = cursor.fetchone()
    return rows[0], attempt_id, started


def finish(params: dict[str, Any]) -> tuple[Job, dict[str, Any]] | None:
    """attempt_sql.finish on SQLite: the job row, then the attempt row, in one transaction.

    `params` are attempt_sql.finish's statement parameters. Returns the job
    after the change and the attempt's columns read back ({column: value}),
    or None when the job is not running this unfinished attempt (nothing
    written). Raises the database's errors.
    """
    params = {
        **params,
        "job_id": _db_job_id(params["job_id"]),
        "now": _db_datetime(params["now"]),
        "next_attempt_at": _db_datetime(params["next_attempt_at"]),
    }
    with transaction.atomic():
        rows = list(Job.objects.raw(_FINISH_JOB, params))
        if not rows:
            return None
        with connection.cursor() as cursor:
            cursor.execute(_FINISH_ATTEMPT, params)
            values = cursor.fetchone()
    return rows[0], dict(zip(_ATTEMPT_COLUMNS, values, strict=True))
