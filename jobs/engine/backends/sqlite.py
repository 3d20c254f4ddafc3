"""The SQLite backend (3.35+, for RETURNING): the PostgreSQL backend's transitions, two statements each.

SQLite has no data-modifying CTE, so each one-statement transition becomes
an UPDATE ... RETURNING of the job and a write of the attempt (SQL in
jobs/engine/sql/sqlite.sql), in one IMMEDIATE transaction (Django's SQLite
backend begins `transaction.atomic()` that way when `"transaction_mode":
"IMMEDIATE"` is set): the writer lock taken at BEGIN serialises every
writer, as the row lock does on PostgreSQL. Datetimes and the job id are
adapted here to what SQLite stores (naive UTC text, 32 hex digits).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from jobs.engine import sql
from jobs.engine.backends.postgres import PostgresBackend
from jobs.models import Job

# The attempt columns the finish reads back, in RETURNING's order.
ATTEMPT_COLUMNS = (
    "id",
    "worker_hostname",
    "worker_pid",
    "started_at",
    "rss_before_bytes",
    "retry_delay_seconds",
    "trace_id",
)


def _stored(params: dict[str, Any]) -> dict[str, Any]:
    """`params` with datetimes and the job id as SQLite stores them."""
    adapted = {
        name: connection.ops.adapt_datetimefield_value(value)
        if isinstance(value, datetime)
        else value
        for name, value in params.items()
    }
    adapted["job_id"] = Job._meta.pk.get_db_prep_value(uuid.UUID(str(params["job_id"])), connection)
    return adapted


class SqliteBackend(PostgresBackend):
    """PostgresBackend's paths with SQLite's statements."""

    name = "sqlite"
    dialect = "sqlite"

    def start_statement(self, params: dict[str, Any]) -> tuple[Job, int, datetime] | None:
        """The start as an UPDATE ... RETURNING of the job and the attempt's INSERT; the
        attempt starts at `now`, or at the job's enqueue when that reads later."""
        queries = sql.queries(self.dialect)
        now = params["now"]
        ends = {
            kind: connection.ops.adapt_datetimefield_value(now + timedelta(seconds=seconds))
            for kind, seconds in self.leases().items()
            if seconds >= 0  # a kind with a fuse (negated): the general path, always
        }
        stored = _stored(params) | {"leases": json.dumps(ends)}
        with transaction.atomic():
            name = "start_job_limited" if "limits" in params else "start_job"
            rows = list(Job.objects.raw(queries[name], stored))
            if not rows:
                return None
            enqueued = rows[0].enqueued_at
            started = max(now, enqueued) if enqueued is not None else now
            with connection.cursor() as cursor:
                cursor.execute(
                    queries["start_attempt"],
                    stored | {"started": connection.ops.adapt_datetimefield_value(started)},
                )
                (attempt_id,) = cursor.fetchone()
        return rows[0], attempt_id, started

    def finish_statement(self, params: dict[str, Any]) -> tuple[Job, dict[str, Any]] | None:
        """The finish as the job's UPDATE ... RETURNING, then the attempt's."""
        queries = sql.queries(self.dialect)
        stored = _stored(params)
        with transaction.atomic():
            rows = list(Job.objects.raw(queries["finish_job"], stored))
            if not rows:
                return None
            with connection.cursor() as cursor:
                cursor.execute(queries["finish_attempt"], stored)
                values = cursor.fetchone()
        return rows[0], dict(zip(ATTEMPT_COLUMNS, values, strict=True))
