"""Counts that stay cheap on a big table: exact when small, PostgreSQL's estimate when large.

An exact COUNT(*) reads every matching row (or index entry): about 10 ms per
100,000 jobs on PostgreSQL, growing without bound. The admin only needs
"about how many" once a count is large, so:

- `bounded_count(qs)` asks the planner first (EXPLAIN, no rows read) and
  counts exactly only when the estimate is below `exact_below`; a count
  the planner thought small but was not still reads at most what the
  planner misjudged.
- `status_estimates()` reads every status's share from the statistics
  ANALYZE keeps (pg_stats) times the table's row estimate (pg_class).

On other databases (SQLite in the unit tests) every count is exact.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import connections
from django.db.models import QuerySet

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Count:
    """A row count; `exact` is False when it is the planner's estimate."""

    value: int
    exact: bool


def _is_postgres(alias: str) -> bool:
    return connections[alias].vendor == "postgresql"


def planner_rows(qs: QuerySet) -> int | None:
    """The planner's row estimate for `qs` (one EXPLAIN, no rows read), or None off PostgreSQL."""
    if not _is_postgres(qs.db):
        return None
    sql, params = qs.order_by().values("pk").query.sql_with_params()
    with connections[qs.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def bounded_count(qs: QuerySet, *, exact_below: int | None = None) -> Count:
    """Rows of `qs`: exact when the planner expects fewer than `exact_below`, else its estimate.

    `exact_below` defaults to settings.JOBS_ADMIN_EXACT_COUNT_LIMIT. At most
    two queries (EXPLAIN, then COUNT when small).
    """
    limit = settings.JOBS_ADMIN_EXACT_COUNT_LIMIT if exact_below is None else exact_below
    estimate = planner_rows(qs)
    if estimate is None or estimate < limit:
        return Count(qs.count(), exact=True)
    return Count(estimate, exact=False)


def table_rows(table: str, *, using: str = "default") -> int | None:
    """pg_class's row estimate for `table` (kept by ANALYZE/autovacuum); None if unknown."""
    if not _is_postgres(using):
        return None
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)", [table]
        )
        row = cursor.fetchone()
    # reltuples is -1 for a table never analyzed (PostgreSQL 14+).
    return int(row[0]) if row and row[0] is not None and row[0] >= 0 else None


def status_estimates(
    table: str, column: str, *, using: str = "default"
) -> tuple[int, dict[str, int]] | None:
    """(table rows, {value: rows}) from the column's most-common-values statistics.

    One query. None off PostgreSQL, or when the table has not been analyzed.
    Values missing from the statistics are rare by definition and absent.
    """
    if not _is_postgres(using):
        return None
    with connections[using].cursor() as cursor:
        cursor.execute(
            """
            SELECT c.reltuples::bigint, s.most_common_vals::text::text[], s.most_common_freqs
            FROM pg_class c
            LEFT JOIN pg_stats s
              ON s.schemaname = current_schema() AND s.tablename = %s AND s.attname = %s
            WHERE c.oid = to_regclass(%s)
            """,
            [table, column, table],
        )
        row = cursor.fetchone()
    if not row or row[0] is None or row[0] < 0 or row[1] is None:
        return None
    total, values, freqs = int(row[0]), row[1], row[2]
    return total, {v: round(total * f) for v, f in zip(values, freqs, strict=True)}
