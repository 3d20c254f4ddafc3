"""One engine statement on PostgreSQL: bound by the server, prepared once per connection.

The attempt's two statements (jobs.engine.backends.postgres) ran as Django
raw querysets on Django's default psycopg cursor, which binds parameters on
the client: psycopg quoted every parameter into the text (22.8% of a P1
worker child's busy samples, docs/profiles/p1-child-2026-12-04.md), the
server parsed and planned the statement anew each time (half its server
time), and the queryset built the job through its raw-model machinery.

Here the statement goes through Django's cursor wrapper (so query capture,
execute wrappers and database-error translation stay as they were) around
a server-binding psycopg cursor; with `JOBS_ENGINE_PREPARED` (default on)
it is prepared on its first run on a connection and executed by name after
that. The row comes back as a tuple and becomes a `Job` through
`Model.from_db` with the fields' database converters, as a queryset would
build it; the statement's other columns come back in a dict.

Prepared statements live in a server session: a pooler in transaction mode
(PgBouncer before 1.21) breaks them; set JOBS_ENGINE_PREPARED=false there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from django.conf import settings
from django.db import NotSupportedError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from jobs.models import Job

# Runs before psycopg prepares a statement: 0, at its first run on a connection.
# Django's connections have None (nothing prepared); its own cursors bind on the
# client and never prepare, whatever the threshold.
PREPARE_THRESHOLD = 0

Reader = Callable[[Sequence[Any]], tuple[Job, dict[str, Any]]]
_readers: dict[tuple[str, tuple[str, ...]], Reader] = {}


@cache
def _cursor_class() -> type:
    """ServerBindingCursor, keeping the query it ran by name where Django's debug cursor
    reads it (`_query`: psycopg leaves it None for a prepared run, and query capture —
    CaptureQueriesContext, DEBUG's connection.queries — would log None)."""
    # Why here: django.db.backends.postgresql.base imports psycopg, absent on SQLite installs.
    from django.db.backends.postgresql.base import ServerBindingCursor  # noqa: PLC0415

    class EngineCursor(ServerBindingCursor):
        def _send_query_prepared(self, name: bytes, pgq: Any, **kwargs: Any) -> None:
            self._query = pgq
            super()._send_query_prepared(name, pgq, **kwargs)  # type: ignore[misc]

    return EngineCursor


def _server_binding_cursor(connection: BaseDatabaseWrapper, prepared: bool) -> Any:
    """Django's cursor wrapper around a server-binding psycopg cursor of `connection`.

    The steps of BaseDatabaseWrapper._cursor, with the cursor class swapped
    (the connection's own factory binds on the client, Django's default).
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        if prepared and raw.prepare_threshold is None:
            # Only server-binding cursors prepare, and the engine's are the only ones.
            raw.prepare_threshold = PREPARE_THRESHOLD
        elif not prepared and raw.prepare_threshold is not None:
            raw.prepare_threshold = None
        cursor = _cursor_class()(raw)
        return connection._prepare_cursor(cursor)  # type: ignore[attr-defined]


def _reader(connection: BaseDatabaseWrapper, columns: tuple[str, ...]) -> Reader:
    """A function turning a row with `columns` into (Job, {other column: value}).

    Built once per connection alias and column list: which positions are the
    job's fields, and their converters (compiler.get_converters, as
    RawModelIterable applies them).
    """
    key = (connection.alias, columns)
    found = _readers.get(key)
    if found is not None:
        return found
    first = {column: position for position, column in reversed(list(enumerate(columns)))}
    names: list[str] = []
    positions: list[int] = []
    converters: list[tuple[int, list[Any], Any]] = []
    # In the model's field order: Model.from_db reads a partial row that way.
    for field in Job._meta.concrete_fields:
        if field.column not in first:
            continue
        names.append(field.attname)
        positions.append(first[field.column])
        col = field.get_col(Job._meta.db_table)
        found_converters = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if found_converters:
            converters.append((len(names) - 1, found_converters, col))
    taken = set(positions)
    others = [(column, pos) for pos, column in enumerate(columns) if pos not in taken]
    alias = connection.alias

    def read(row: Sequence[Any]) -> tuple[Job, dict[str, Any]]:
        values = [row[position] for position in positions]
        for index, functions, expression in converters:
            value = values[index]
            for function in functions:
                value = function(value, expression, connection)
            values[index] = value
        return Job.from_db(alias, names, values), {name: row[pos] for name, pos in others}

    _readers[key] = read
    return read


def run(query: str, params: dict[str, Any]) -> tuple[Job, dict[str, Any]] | None:
    """Execute `query` (named %(param)s placeholders) on the default connection; the job
    of its first row and the row's other columns, or None when it returns no row.

    A prepared statement whose result columns changed under it (a migration
    added a column to jobs_job while this process ran: PostgreSQL's "cached
    plan must not change result type") is dropped and the statement run once
    more, outside a transaction only: the failed statement wrote nothing.
    """
    connection = connections["default"]
    prepared = bool(getattr(settings, "JOBS_ENGINE_PREPARED", True))
    try:
        return _run(connection, query, params, prepared)
    except NotSupportedError:
        if not prepared or connection.in_atomic_block:
            raise
        with connection.cursor() as cursor:
            # psycopg forgets its prepared statements when it sees this command succeed.
            cursor.execute("DEALLOCATE ALL")
        return _run(connection, query, params, prepared)


def _run(
    connection: BaseDatabaseWrapper, query: str, params: dict[str, Any], prepared: bool
) -> tuple[Job, dict[str, Any]] | None:
    with _server_binding_cursor(connection, prepared) as cursor:
        cursor.execute(query, params)
        row = cursor.fetchone()
        if row is None:
            return None
        columns = tuple(column.name for column in cursor.description)
    return _reader(connection, columns)(row)
