"""Cancellation requests to a running attempt, through the state store (jobs.state_store).

`cancel_request(job_id)` is sent after job_cancel commits; the running
attempt's supervisor (jobs.supervisor) asks `requested(job_id)` every tick.

- PostgreSQL store: the cancelled job row is the request; nothing is sent.
  The worker's main process (CancelRelay, a thread of its own with its own
  connection) reads every JOBS_CANCEL_POLL_SECONDS which of its children's
  jobs are cancelled and leaves a flag file for each on this host; the
  child's supervisor looks for its job's file (CancelPoller), so a child
  keeps one database connection and a slow database never delays the
  supervisor's deadlines. A cancel stops a cooperative attempt on any host
  within that interval plus a tick.
- Redis store: a key `jobs:cancel:<job id>` on the broker's Redis with a
  time-to-live of JOBS_CANCEL_TTL seconds, read by the supervisor.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import Error

from jobs import fork_gate, state_store
from jobs.db import close_connections
from jobs.host_dirs import spool_dir
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)

RELAY_THREAD_NAME = "jobs-cancel-relay"


def cancel_key(job_id: object) -> str:
    """Redis key whose presence asks the running attempt of `job_id` to stop (Redis store)."""
    return f"jobs:cancel:{job_id}"


def cancel_request(job_id: uuid.UUID | str) -> None:
    """Ask the running attempt of the (committed, cancelled) job `job_id` to stop.

    PostgreSQL store: nothing to send. Redis store: one SET with a TTL;
    raises the client's errors (the caller logs them: the job is cancelled
    either way, the attempt then runs to its limit).
    """
    if state_store.uses_postgres():
        return
    from jobs.broker import broker_client  # noqa: PLC0415 - Redis store only

    broker_client().set(cancel_key(job_id), "1", ex=settings.JOBS_CANCEL_TTL)


def flag_dir() -> Path:
    """This host's directory of cancellation flags (PostgreSQL store): one empty file per job.

    Beside the outcome spool (jobs.services.outcomes.spool_dir), so platforms
    that share a host but not a database never see each other's flags.
    """
    return spool_dir().parent / f"{spool_dir().name}-cancel"


class CancelPoller:
    """Whether the job asked about was cancelled, from this host's flag files (PostgreSQL store).

    The worker's main process reads the database for every child (CancelRelay)
    and leaves a flag file per cancelled job; a child only looks for its
    job's file, so it keeps its one database connection (none for polling).
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory

    def requested(self, job_id: object) -> bool:
        """Whether job `job_id`'s flag file exists; never blocks on the database, never raises."""
        try:
            return (self._directory or flag_dir()).joinpath(str(job_id)).exists()
        except (OSError, ValueError):
            return False


class CancelRelay:
    """The worker main process's reader of cancellations for the attempts its children run.

    Every JOBS_CANCEL_POLL_SECONDS: the job ids of the requests the pool has
    accepted (`active`, a callable), one primary-key read of which are
    cancelled, a flag file for each (CancelPoller reads it) and its own
    flags of jobs no longer running here removed (other workers on the host
    share the directory and keep theirs). One connection per worker, its
    own thread's; a cancel reaches a cooperative attempt on any host within
    that interval plus a supervisor tick.
    """

    def __init__(self, active: Callable[[], set[str]], directory: Path | None = None) -> None:
        self._active = active
        self._directory = directory
        # The flags this relay wrote: other workers on this host share the directory.
        self._flagged: set[str] = set()

    def relay_once(self) -> int:
        """One pass; returns how many flags exist after it. Never raises."""
        directory = self._directory or flag_dir()
        running = self._active()
        try:
            cancelled = (
                {
                    str(job)
                    for job in Job.objects.filter(
                        id__in=running, status=JobStatus.CANCELLED
                    ).values_list("id", flat=True)
                }
                if running
                else set()
            )
        except (Error, ValueError) as exc:  # Error: any database error; ValueError: not a job id
            logger.debug("cancellations not read: %s", exc)
            close_connections()
            return 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for job in cancelled:
                directory.joinpath(job).touch()
            for job in self._flagged - running:
                directory.joinpath(job).unlink(missing_ok=True)
            self._flagged = (self._flagged | cancelled) & running
        except OSError as exc:
            logger.warning("cancellation flags not written in %s: %s", directory, exc)
        return len(cancelled)

    def start(self, stop: threading.Event | None = None) -> threading.Thread:
        """Run relay_once every JOBS_CANCEL_POLL_SECONDS in a daemon thread; `stop` ends it."""
        stop = stop or threading.Event()

        def loop() -> None:
            while not stop.wait(settings.JOBS_CANCEL_POLL_SECONDS):
                # This process forks pool children: a fork waits for the pass.
                with fork_gate.section("cancellation relay"):
                    self.relay_once()
            close_connections()

        return fork_gate.start_thread(loop, name=RELAY_THREAD_NAME)
