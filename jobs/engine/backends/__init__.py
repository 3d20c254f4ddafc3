"""The engine's backends, one chosen per process (jobs.engine.Engine): ORM, PostgreSQL, SQLite.

`choose(vendor)` picks by the database's vendor: PostgreSQL and SQLite
3.35+ (RETURNING) get their one-statement paths; any other database, or an
older SQLite, the ORM path alone.
"""

from __future__ import annotations

import sqlite3

from jobs.engine.backends.orm import OrmBackend
from jobs.engine.backends.postgres import PostgresBackend
from jobs.engine.backends.sqlite import SqliteBackend

SQLITE_RETURNING = (3, 35, 0)

__all__ = ["OrmBackend", "PostgresBackend", "SqliteBackend", "choose"]


def choose(
    vendor: str, *, sqlite_version: tuple[int, ...] = sqlite3.sqlite_version_info
) -> OrmBackend:
    """The backend for a database of `vendor` (Django's `connection.vendor`)."""
    if vendor == "postgresql":
        return PostgresBackend()
    if vendor == "sqlite" and sqlite_version >= SQLITE_RETURNING:
        return SqliteBackend()
    return OrmBackend()
