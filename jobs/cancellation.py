"""Cancellation requests to a running attempt, through the state store (jobs.state_store).

`cancel_request(job_id)` is sent after job_cancel commits; the running
attempt's supervisor (jobs.supervisor) asks `requested(job_id)` every tick.

- PostgreSQL store: the cancelled job row is the request; nothing is sent.
  A poller thread in the worker child reads the watched job's status every
  JOBS_CANCEL_POLL_SECONDS on its own connection, so a slow or unreachable
  database never delays the supervisor's deadlines. A cancel stops a
  cooperative attempt on any host within that interval plus a tick.
- Redis store: a key `jobs:cancel:<job id>` on the broker's Redis with a
  time-to-live of JOBS_CANCEL_TTL seconds, read by the supervisor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from django.conf import settings
from django.db import Error, connection

from jobs import state_store
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)

POLLER_THREAD_NAME = "jobs-cancel-poll"
# The poller stops reading once nobody asked about a job for this long (s).
IDLE_SECONDS = 2.0


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


class CancelPoller:
    """Reads, in a thread of its own, whether the job last asked about was cancelled (PostgreSQL store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._job: str | None = None
        self._asked_at = 0.0
        self._cancelled: str | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def requested(self, job_id: object) -> bool:
        """Whether job `job_id` was seen cancelled; never blocks, never raises."""
        job = str(job_id)
        with self._lock:
            self._job, self._asked_at = job, time.monotonic()
            cancelled = self._cancelled == job
        self._ensure_thread()
        return cancelled

    def poll_once(self) -> None:
        """One read of the asked job's status (the thread's loop body; tests call it)."""
        with self._lock:
            job, fresh = self._job, time.monotonic() - self._asked_at < IDLE_SECONDS
            done = self._cancelled == job
        if job is None or not fresh or done:
            return
        try:
            cancelled = Job.objects.filter(id=job, status=JobStatus.CANCELLED).exists()
        except (Error, ValueError) as exc:  # Error: any database error; ValueError: not a job id
            logger.debug("cancellation not read for job_id=%s: %s", job, exc)
            connection.close()
            return
        if cancelled:
            with self._lock:
                self._cancelled = job

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name=POLLER_THREAD_NAME, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(settings.JOBS_CANCEL_POLL_SECONDS)
            try:
                self.poll_once()
            except Exception:  # the poller must outlive any one read
                logger.exception("cancellation poll failed")
