"""Database work that survives a dropped connection.

A managed PostgreSQL drops connections during maintenance or failover
(`pg_terminate_backend`, a proxy restart); the next statement on such a
connection raises OperationalError or InterfaceError, and Django keeps the
broken connection until something closes it. Outside a request cycle (the
worker's main process, its children between Celery's per-task hooks, the
scheduler) nothing does. So every unit of database work that records a
job's state runs through `run_with_reconnect`: one whole transaction,
retried on a fresh connection when the connection was lost, for a bounded
time. Only the write is retried, never the work that produced it.

A transaction whose COMMIT was sent but whose answer was lost may have
committed; the services are written so that running them again is safe
(they read the job row under a lock and do nothing for an attempt already
recorded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections

logger = logging.getLogger(__name__)

T = TypeVar("T")
CONNECTION_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
# SQLSTATEs (PostgreSQL appendix A) that say "this server cannot take the
# work right now", whatever class Django wraps them in: a failover that
# lands the connection on a standby or a demoted primary answers writes
# with 25006 (as InternalError), a server shutting down or starting up with
# 57P01-57P03, a full server with 53300; class 08 is a connection exception.
UNAVAILABLE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03", "53300"})


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` means the database is unreachable or cannot take writes for now.

    True for Django's OperationalError and InterfaceError (a lost or refused
    connection; SQLite's "database is locked"), and for any DatabaseError
    whose driver error carries an SQLSTATE of class 08 or in
    UNAVAILABLE_SQLSTATES (read-only transaction after a failover, server
    shutting down or starting, too many connections). Such errors are
    retried on a fresh connection, answered 503, or spooled; never a 500.
    """
    if isinstance(exc, CONNECTION_ERRORS):
        return True
    if not isinstance(exc, DatabaseError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    return sqlstate.startswith("08") or sqlstate in UNAVAILABLE_SQLSTATES


FIRST_PAUSE_SECONDS = 0.05
MAX_PAUSE_SECONDS = 2.0


def close_connections() -> None:
    """Close this thread's database connections (the next query opens a fresh one). Never raises."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # closing a dead socket may raise anything; it is gone either way
            logger.debug("closing a broken connection raised", exc_info=True)


def run_with_reconnect(
    work: Callable[[int], T],
    *,
    what: str,
    within: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Return `work(try_number)`, retrying it on a fresh connection after a lost connection.

    `work` runs one whole transaction; it gets its try number (0 first) so a
    retry can allow for a first try that may have committed. Errors that
    say the database is unavailable (`is_unavailable`) close this thread's
    connections and retry after a pause (0.05 s doubling to 2 s) until
    `within` seconds (default settings.JOBS_DB_RETRY_SECONDS) have passed;
    then the last error is raised. Any other exception is raised at once.
    `what` names the work in log lines.
    """
    if within is None:
        within = settings.JOBS_DB_RETRY_SECONDS
    deadline = time.monotonic() + within
    pause = FIRST_PAUSE_SECONDS
    attempt = 0
    while True:
        try:
            return work(attempt)
        except DatabaseError as exc:
            if not is_unavailable(exc):
                raise
            close_connections()
            if time.monotonic() + pause > deadline:
                logger.error(
                    "database unreachable for %s after %s tries: %s", what, attempt + 1, exc
                )
                raise
            logger.warning(
                "database connection lost during %s (%s: %s); retrying on a fresh connection",
                what,
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )
            sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_SECONDS)
            attempt += 1
