"""Fixed-window request counters in the database: the API's rate limits (jobs.api.throttling).

One statement counts a request: INSERT ... ON CONFLICT (key, window_start)
DO UPDATE SET hits = hits + 1 RETURNING hits (PostgreSQL; SQLite 3.35+), so
requests from every gunicorn worker and host count exactly, whatever their
concurrency. (DRF's own throttle reads and writes a list of times in a cache
without a lock: over Django's DatabaseCache, 50 requests from 8 threads all
passed a limit of 30 a minute.) Windows are fixed: around a window's end up
to twice the limit can pass within one window's length. They are numbered
from this host's clock; hosts that agree to within a second agree on them.
A request that opens a window deletes expired rows one time in CLEANUP_ONE_IN.
"""

from __future__ import annotations

import math
import random
import time
from datetime import UTC, datetime

from django.db import connection

from jobs.models import RateWindow

CLEANUP_ONE_IN = 100


def _window(duration: int, now: float | None) -> tuple[int, float]:
    now = time.time() if now is None else now
    start = int(math.floor(now / duration) * duration)
    return start, start + duration - now


def rate_window_hit(*, key: str, duration: int, now: float | None = None) -> tuple[int, float]:
    """Count one request for `key` in the current `duration`-second window.

    Returns (requests counted in the window, this one included; seconds left
    in it). Raises the database's errors.
    """
    start, left = _window(duration, now)
    table = connection.ops.quote_name(RateWindow._meta.db_table)
    key_col, start_col, hits_col, expires_col = (
        connection.ops.quote_name(name) for name in ("key", "window_start", "hits", "expires_at")
    )
    expires = datetime.fromtimestamp(start + duration, tz=UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({key_col}, {start_col}, {hits_col}, {expires_col}) "
            f"VALUES (%s, %s, 1, %s) ON CONFLICT ({key_col}, {start_col}) "
            f"DO UPDATE SET {hits_col} = {table}.{hits_col} + 1 RETURNING {hits_col}",
            [key, start, expires],
        )
        hits = int(cursor.fetchone()[0])
    if hits == 1 and random.random() < 1 / CLEANUP_ONE_IN:  # noqa: S311 - not security
        RateWindow.objects.filter(expires_at__lt=datetime.fromtimestamp(start, tz=UTC)).delete()
    return hits, left


def rate_window_hits(*, key: str, duration: int, now: float | None = None) -> tuple[int, float]:
    """(requests counted for `key` in the current window, seconds left in it); counts nothing."""
    start, left = _window(duration, now)
    hits = (
        RateWindow.objects.filter(key=key, window_start=start)
        .values_list("hits", flat=True)
        .first()
    )
    return int(hits or 0), left
