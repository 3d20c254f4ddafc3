"""A deadline on every PostgreSQL round trip, enforced from outside the waiting thread.

A server that stops answering while its host still acknowledges the bytes
(a frozen process, a proxy or a partition that holds data, a response lost
when a partition heals) leaves a connection silent: libpq waits for the
answer for ever, TCP keepalives and tcp_user_timeout see nothing wrong, and
the server's own statement_timeout cannot fire. One such wait froze the
scheduler for good (no retry promoted again, so jobs stayed `retrying`) and
held the web's request threads.

So each process that talks to PostgreSQL runs one watchdog thread. Every
second it looks at each connection Django opened in this process: one that
has been busy (libpq's transaction status ACTIVE: a command sent, its
answer not yet read) for longer than DATABASE_QUERY_DEADLINE seconds gets
its socket shut down. The waiting call then fails at once with
OperationalError, which every caller already handles as a lost connection
(jobs.db: retried on a fresh connection, answered 503, or spooled).

It runs only where `enable()` was called: the web's workers (gunicorn's
post_fork), the scheduler and the worker's main process, where each look
is a jobs.fork_gate section (that process forks pool children). Worker children
are left out (`disable()` at fork): the attempt's own queries may
legitimately run long, and the whole attempt is bounded by its hard time
limit anyway; so are management commands such as `migrate`, whose index
builds may take minutes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created

from jobs import fork_gate

logger = logging.getLogger(__name__)

THREAD_NAME = "jobs-db-deadline"
ACTIVE = 1  # psycopg.pq.TransactionStatus.ACTIVE
CHECK_EVERY_SECONDS = 1.0

_state: dict[str, Any] = {"pid": None, "enabled": False}
_lock = threading.Lock()
# id(DatabaseWrapper) -> (weak reference to it, monotonic time it was first seen busy or None)
_watched: dict[int, tuple[weakref.ReferenceType[Any], float | None]] = {}


def enable() -> None:
    """Put this process's PostgreSQL connections under the deadline: those this thread
    already opened, and every one opened from now on (any thread)."""

    _state["enabled"] = True
    for wrapper in connections.all(initialized_only=True):
        watch(wrapper)


def disable() -> None:
    """No deadline in this process (a worker child: its attempt has a hard time limit)."""
    _state["enabled"] = False


def watch(wrapper: Any) -> None:
    """Put a Django PostgreSQL connection (DatabaseWrapper) under the deadline; start the
    watchdog thread in this process if it is not running. No-op unless enabled, for
    other databases, and when the deadline is 0."""
    if not _state["enabled"] or wrapper.vendor != "postgresql" or deadline_seconds() <= 0:
        return
    with _lock:
        if _state["pid"] != os.getpid():  # first use, or a fork: threads are not inherited
            _watched.clear()
            _state["pid"] = os.getpid()
            fork_gate.start_thread(_loop, name=THREAD_NAME)
        _watched[id(wrapper)] = (weakref.ref(wrapper), None)


def deadline_seconds() -> float:
    """DATABASE_QUERY_DEADLINE (seconds; 0 turns the watchdog off)."""
    return float(settings.DATABASE_QUERY_DEADLINE)


def _busy(wrapper: Any) -> bool:
    raw = getattr(wrapper, "connection", None)
    pgconn = getattr(raw, "pgconn", None)
    try:
        return pgconn is not None and pgconn.transaction_status == ACTIVE
    except Exception:  # closed meanwhile by its own thread
        return False


def check(now: float | None = None) -> int:
    """One look at every watched connection; returns how many were cut. Never raises."""
    now = time.monotonic() if now is None else now
    deadline = deadline_seconds()
    cut = 0
    with _lock:
        items = list(_watched.items())
    for key, (ref, busy_since) in items:
        wrapper = ref()
        if wrapper is None:
            with _lock:
                _watched.pop(key, None)
            continue
        if not _busy(wrapper):
            busy_since = None
        elif busy_since is None:
            busy_since = now
        elif now - busy_since > deadline:
            cut += _cut(wrapper, now - busy_since)
            busy_since = None
        with _lock:
            if key in _watched:
                _watched[key] = (ref, busy_since)
    return cut


def _cut(wrapper: Any, waited: float) -> int:
    try:
        fd = wrapper.connection.pgconn.socket
        # A duplicate of the descriptor shares the socket: shutting it down
        # wakes the thread blocked on the original with end-of-file.
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception as exc:  # the connection closed meanwhile
        logger.debug("could not cut a database connection: %s", exc)
        return 0
    logger.warning(
        "database connection cut: no answer for %.1f s (DATABASE_QUERY_DEADLINE=%s); "
        "the waiting call fails as a lost connection",
        waited,
        deadline_seconds(),
    )
    return 1


def _loop() -> None:
    while True:
        time.sleep(CHECK_EVERY_SECONDS)
        if _state["pid"] != os.getpid():
            return  # a forked copy of this thread's process: the new one runs its own
        with fork_gate.section("database deadline"):
            check()


def _on_connection_created(sender: Any, connection: Any, **_: Any) -> None:
    watch(connection)


connection_created.connect(_on_connection_created, dispatch_uid="jobs.db_deadline")
