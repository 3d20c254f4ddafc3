"""One prune batch: delete up to `size` prunable jobs with their attempts and History, in one transaction.

`delete_batch(where, after, size)` locks the oldest prunable jobs
(`FOR UPDATE SKIP LOCKED`, keyset from `after`), deletes their admin History
(`LogEntry`) and attempts, clears the schedule references to them (the
SET_NULL foreign keys `Schedule.last_job` and `ScheduleTick.job`: raw
deletes bypass Django's emulation, and the deferred constraints would
refuse the commit), deletes the jobs, and commits.

On PostgreSQL that is **one statement** (data-modifying CTEs over the picked
ids: one round trip, one plan, no ids through Python) in a transaction with
`synchronous_commit = off`: the prune never waits for the WAL flush, and a
batch lost in a crash is simply deleted again by the next run. Elsewhere
(SQLite) the same steps run as separate statements.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.db.models import Field, Model, Q

from jobs.models import Attempt, Job
from jobs.periodic.models import Schedule, ScheduleTick


@dataclass(frozen=True)
class Batch:
    """What one batch deleted; `last`: created_at of the newest job it took (the next keyset)."""

    jobs: int
    attempts: int
    history: int
    last: datetime | None


def delete_batch(where: Q, after: datetime | None, size: int) -> Batch:
    """Delete up to `size` jobs matching `where` (from `after` on, oldest first); see module doc."""
    rows = Job.objects.filter(where)
    if after is not None:
        # Keyset: each batch starts where the last one ended, so no batch walks
        # the dead index entries its predecessors left behind.
        rows = rows.filter(created_at__gte=after)
    with transaction.atomic():
        picked = (
            rows.order_by("created_at")
            .select_for_update(skip_locked=True)
            .values_list("id", "created_at")[:size]
        )
        if connection.vendor == "postgresql":
            return _one_statement(picked.query.sql_with_params(), after)
        return _statements(list(picked), after)


def _table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    assert field.column
    return connection.ops.quote_name(field.column)


def _one_statement(picked: tuple[str, Sequence[Any]], after: datetime | None) -> Batch:
    """The PostgreSQL batch: one statement over the picked ids, without waiting for the flush."""
    select, params = picked
    job_ct = ContentType.objects.get_for_model(Job).pk
    log, attempt = _table(LogEntry), _table(Attempt)
    schedule, tick, job = _table(Schedule), _table(ScheduleTick), _table(Job)
    sql = f"""
        WITH picked AS ({select}),
        history AS (
            DELETE FROM {log} WHERE {_column(LogEntry, "content_type")} = %s
            AND {_column(LogEntry, "object_id")} IN (SELECT id::text FROM picked) RETURNING 1
        ),
        schedules AS (
            UPDATE {schedule} SET {_column(Schedule, "last_job")} = NULL
            WHERE {_column(Schedule, "last_job")} IN (SELECT id FROM picked) RETURNING 1
        ),
        ticks AS (
            UPDATE {tick} SET {_column(ScheduleTick, "job")} = NULL
            WHERE {_column(ScheduleTick, "job")} IN (SELECT id FROM picked) RETURNING 1
        ),
        attempts AS (
            DELETE FROM {attempt} WHERE {_column(Attempt, "job")} IN (SELECT id FROM picked)
            RETURNING 1
        ),
        gone AS (DELETE FROM {job} WHERE id IN (SELECT id FROM picked) RETURNING created_at)
        SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM attempts),
               (SELECT count(*) FROM history), (SELECT max(created_at) FROM gone)
    """  # noqa: S608 - names from model metadata, values bound
    with connection.cursor() as cursor:
        # A lost batch is redone by the next run: no need to wait for the WAL flush.
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute(sql, [*params, job_ct])  # the picked CTE's values come first
        jobs, attempts, history, last = cursor.fetchone()
    return Batch(jobs=jobs, attempts=attempts, history=history, last=last or after)


def _statements(taken: list[tuple[uuid.UUID, datetime]], after: datetime | None) -> Batch:
    """The portable batch (SQLite): the same steps as separate statements, inside the caller's transaction."""
    if not taken:
        return Batch(jobs=0, attempts=0, history=0, last=after)
    ids = [job_id for job_id, _ in taken]
    history, _ = LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Job),
        object_id__in=[str(job_id) for job_id in ids],
    ).delete()
    Schedule.objects.filter(last_job__in=ids).update(last_job=None)
    ScheduleTick.objects.filter(job__in=ids).update(job=None)
    attempts = _delete_rows(Attempt, "job_id", ids)
    jobs = _delete_rows(Job, "id", ids)
    return Batch(jobs=jobs, attempts=attempts, history=history, last=taken[-1][1])


def _delete_rows(model: type[Model], column: str, ids: Sequence[uuid.UUID]) -> int:
    """DELETE rows of `model` whose `column` is one of the job `ids`; returns how many.

    One statement, no rows fetched: QuerySet.delete() would load every Job
    (payload, result and all) to cascade by hand.
    """
    pk = Job._meta.pk
    assert pk is not None
    params = [pk.get_db_prep_value(job_id, connection) for job_id in ids]
    marks = ", ".join(["%s"] * len(params))
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_table(model)} WHERE {connection.ops.quote_name(column)} IN ({marks})",  # noqa: S608
            params,
        )
        return max(cursor.rowcount, 0)
