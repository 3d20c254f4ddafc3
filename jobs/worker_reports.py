"""The workers' own reports (format: observability.worker_report), kept in the state store.

Written by each worker's main process (jobs.telemetry.worker_report), read
by the admin overview (jobs.overview). Every report is scored by the
database's clock: on PostgreSQL by `now()` at the write and at the read (one
statement each); on Redis by jobs.clock (this host's estimate of the
database's clock) on both sides. A host whose own clock is off therefore
neither hides other hosts' workers nor lingers (issue 21: a host 90 s ahead
made the others vanish).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from jobs import clock, state_store
from observability import worker_report

# Prunes reports older than the writer's time-to-live, then upserts this one.
_WRITE = """
WITH gone AS (
    DELETE FROM jobs_workerreport
    WHERE reported_at < now() - make_interval(secs => %s) AND hostname <> %s
)
INSERT INTO jobs_workerreport (hostname, report, reported_at) VALUES (%s, %s, now())
ON CONFLICT (hostname) DO UPDATE SET report = EXCLUDED.report, reported_at = now()
"""

_READ = """
SELECT report FROM jobs_workerreport
WHERE reported_at >= now() - make_interval(secs => %s)
ORDER BY reported_at DESC LIMIT %s
"""


def write(report: dict[str, Any], *, ttl: float) -> None:
    """Store `report` (its "at" is set here: the database's time) for `ttl` seconds.

    Raises the store's errors (DatabaseError, redis.RedisError).
    """
    report = {**report, "at": clock.now().timestamp()}
    if state_store.uses_postgres():
        with connection.cursor() as cursor:
            cursor.execute(
                _WRITE, [ttl, report["hostname"], report["hostname"], json.dumps(report)]
            )
        return
    from jobs.broker import broker_client  # noqa: PLC0415 - Redis store only

    worker_report.write_report(broker_client(), report, ttl=ttl)


def read(*, max_age: float) -> list[dict[str, Any]]:
    """Live reports (written less than `max_age` seconds ago by the database's clock), newest
    first, at most worker_report.MAX_WORKERS, each checked by worker_report.parse_report.

    Raises the store's errors.
    """
    if state_store.uses_postgres():
        with connection.cursor() as cursor:
            cursor.execute(_READ, [max_age, worker_report.MAX_WORKERS])
            rows = cursor.fetchall()
        parsed = (worker_report.parse_report(raw) for (raw,) in rows)
        return [report for report in parsed if report is not None]
    from jobs.broker import broker_client  # noqa: PLC0415 - Redis store only

    return worker_report.read_reports(broker_client(), max_age=max_age, now=clock.now().timestamp())
