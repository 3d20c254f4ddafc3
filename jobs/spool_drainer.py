"""The worker main process's thread that writes this host's spooled outcomes to the database.

jobs.services.outcomes keeps an outcome the database would not take in a
file on the worker's host; this thread writes those files with
attempt_finish every JOBS_OUTCOME_SPOOL_POLL seconds (1 s), so a finished
attempt is recorded within about a second of the database coming back,
even when Redis lost its copy. It runs in the main process, beside the
pool: its database connection is its own (Django's are per thread), and
nothing here blocks the consumer's event loop. Each pass is a
jobs.fork_gate section: a fork of the main process waits for it.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import DatabaseError

from jobs import fork_gate, services
from jobs.db import close_connections, is_unavailable

logger = logging.getLogger(__name__)

THREAD_NAME = "jobs-outcome-spool"
_started: dict[str, threading.Thread] = {}


def drain_once() -> int:
    """One pass: write what the spool directory holds; return how many were written.

    Never raises: an unavailable database closes this thread's connection
    and leaves the files for the next pass; any other error is logged.
    """
    try:
        return services.outcomes_drain_local(limit=settings.JOBS_SCHEDULER_BATCH)
    except DatabaseError as exc:
        close_connections()
        if not is_unavailable(exc):
            logger.exception("spooled outcomes not written")
        return 0
    except Exception:
        logger.exception("spooled outcomes not written")
        return 0


def start(stop: threading.Event | None = None) -> threading.Thread:
    """Start the drainer thread once per process (a daemon); return it.

    `stop` ends it (tests); a worker's thread ends with the process.
    """
    if THREAD_NAME in _started and _started[THREAD_NAME].is_alive():
        return _started[THREAD_NAME]
    stop = stop or threading.Event()
    interval = settings.JOBS_OUTCOME_SPOOL_POLL

    def loop() -> None:
        while not stop.wait(interval):
            # This process forks pool children: a fork waits for the pass.
            with fork_gate.section("outcome spool"):
                drain_once()
        close_connections()

    thread = fork_gate.start_thread(loop, name=THREAD_NAME)
    _started[THREAD_NAME] = thread
    return thread
