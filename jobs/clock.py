"""The database's clock, read without a round trip per call.

DESIGN.md ("Faults"): leases and due times are judged by one clock, the
database's, never by a host's. Every process stamps leases, due times,
finish times and retry-budget windows with `now()`: this host's wall clock
plus the offset to the database server's clock, measured with one
`SELECT statement_timestamp()` (database_now, re-exported by jobs.selectors) and measured
again

- every REFRESH_SECONDS (drift between two NTP-disciplined clocks is
  micro- to milliseconds per minute), and
- at once when this host's wall clock stepped (its distance to the
  monotonic clock moved by more than STEP_SECONDS: NTP step, a VM resumed,
  someone ran `date -s`).

The offset is exact to half the query's round trip (sub-millisecond on a
LAN). On SQLite (the demo, unit tests) the database is on this host: the
offset is 0. A measurement that fails (database unreachable) keeps the last
offset; the caller's own query meets the failure and handles it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.utils import timezone

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
STEP_SECONDS = 0.5


@dataclass(frozen=True)
class _Measure:
    offset: timedelta  # database clock minus this host's wall clock
    at_monotonic: float  # when it was measured (time.monotonic)
    wall_minus_monotonic: float  # this host's wall clock then, against the monotonic one


_lock = threading.Lock()
_last: _Measure | None = None


def now() -> datetime:
    """The database server's current time (aware UTC datetime), to within a round trip.

    Costs a clock read; a query only when a measurement is due (see the
    module docstring). Never raises: a failed measurement keeps the last
    offset (0 before the first).
    """
    wall, mono = time.time(), time.monotonic()
    last = _last
    if (
        last is None
        or mono - last.at_monotonic > REFRESH_SECONDS
        or abs((wall - mono) - last.wall_minus_monotonic) > STEP_SECONDS
    ):
        last = _measure() or last
    offset = last.offset if last is not None else timedelta(0)
    return timezone.now() + offset


def database_now() -> datetime:
    """The database server's current time (aware), the clock job_publish stamps with (one query).

    PostgreSQL's statement_timestamp(), not now(): the latter is the start
    of an enclosing transaction. Raises the database's errors.
    """
    sql = "SELECT statement_timestamp()" if connection.vendor == "postgresql" else None
    if sql is None:  # SQLite (tests, the demo): the host is the database's host
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def _measure() -> _Measure | None:
    """Measure the offset now; None when the database cannot be read."""
    global _last
    sent = time.time()
    try:
        database = database_now()
    except DatabaseError as exc:
        logger.debug("database clock not measured: %s", exc)
        return None
    received, mono = time.time(), time.monotonic()
    midpoint = datetime.fromtimestamp((sent + received) / 2, tz=database.tzinfo)
    measure = _Measure(
        offset=database - midpoint,
        at_monotonic=mono,
        wall_minus_monotonic=received - mono,
    )
    with _lock:
        _last = measure
    if abs(measure.offset) > timedelta(seconds=1):
        logger.info(
            "this host's clock is %.3f s %s the database's; times are taken from the database's",
            abs(measure.offset.total_seconds()),
            "behind" if measure.offset > timedelta(0) else "ahead of",
        )
    return measure


def forget() -> None:
    """Drop the measured offset (tests; a process that changed database)."""
    global _last
    with _lock:
        _last = None
