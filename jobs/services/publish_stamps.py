"""`published_at` after a publish, written in batches off the request path.

A submission's row is committed, then its message published, then the row
stamped `published_at` (jobs.services.publishing). The stamp is one more
committed UPDATE of a row with many indexes; on the enqueue path it was the
largest cost the platform adds to a hand-written "insert a row and call
delay()" view (docs/performance.md, "Enqueue path"). So a web process hands
its stamps to one thread, which writes all it has every
JOBS_PUBLISH_STAMP_DELAY_SECONDS in one statement on its own connection.

Nothing is lost when a stamp is late or never written. A row left
unstamped is in the outbox: the sweep publishes it again after
JOBS_SWEEP_UNPUBLISHED_AFTER seconds and the attempt's start drops the
second delivery unrun (jobs.engine.Engine.start), exactly as after a
connection lost between the publish and the stamp. A stamp written later
than the publish only says the message was pushed "no later than" the
stamp, which is all the lost-message check reads from it
(jobs.services.lost_messages). And the backpressure's outbox count does not
count rows younger than `stamp_grace_seconds()`: their message is in the
broker's count already (jobs.selectors.queue_ready_count).

With JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0 every stamp is written at once by
the caller, on the caller's connection (the scheduler always does so).

Known window: when Redis restarts without persistence while a stamp is
pending, the scheduler's reopening of the outbox (jobs.services.sweeps.
outbox_reopen, rows stamped before the restart) does not see that row,
and the stamp then lands on a job whose message is gone. The lost-message
check republishes it (two checks, ~22 s by default), as it does for any
message the broker lost.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterable
from functools import reduce
from operator import or_

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import Case, OuterRef, Q, Subquery, When
from django.db.models.functions import Coalesce, Least, Now

from jobs.db import close_connections, is_unavailable, run_with_reconnect
from jobs.models import Attempt, Job, JobStatus
from jobs.waiting import HELD_REASONS

logger = logging.getLogger(__name__)

# Stamps written by one statement at most; more wait for the next one.
MAX_BATCH = 500
# Seconds the writer thread retries a batch on a fresh connection after a
# lost one; then the batch is left to the outbox sweep.
WRITE_RETRY_SECONDS = 2.0
# Seconds an exiting process waits for its pending stamps to be written.
EXIT_FLUSH_SECONDS = 2.0


# Seconds after its submission within which a row may still wait for its
# batched stamp: four of the longest delay jobs.E007 allows.
STAMP_GRACE_SECONDS = 1.0


def stamp_grace_seconds() -> float:
    """Seconds after its submission within which a row may still be waiting for its stamp.

    0 when stamps are written at once, else STAMP_GRACE_SECONDS (a stamp
    is written within JOBS_PUBLISH_STAMP_DELAY_SECONDS, at most 0.25 s, plus
    one UPDATE; a writer that falls further behind only makes the outbox
    count larger, which refuses early rather than late).
    """
    return STAMP_GRACE_SECONDS if settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS > 0 else 0.0


def write_stamps(stamps: Iterable[tuple[uuid.UUID, int]]) -> int:
    """Stamp `published_at` = the database's now on each (job id, published attempt); one UPDATE.

    Never later than the start of the attempt it was for, when a worker
    started it before the stamp was written.

    A row is stamped only while it still waits for that attempt's stamp:
    `published_at` NULL and either queued for that attempt or already
    running or past it. A later attempt waiting for its own publish keeps
    NULL, so the outbox sweep still sees it. Returns the rows stamped.
    Raises DatabaseError (the caller decides whether a lost stamp matters).
    """
    by_attempt: dict[int, list[uuid.UUID]] = defaultdict(list)
    for job_id, attempt in stamps:
        by_attempt[attempt].append(job_id)
    if not by_attempt:
        return 0
    waiting = reduce(
        or_,
        (
            Q(id__in=ids)
            & (
                Q(status=JobStatus.QUEUED, attempts_made=attempt - 1)
                | (Q(attempts_made=attempt) & ~Q(status=JobStatus.QUEUED))
            )
            for attempt, ids in by_attempt.items()
        ),
    )
    # The stamp is written after the publish, and a worker may have started
    # the attempt meanwhile: never later than that start (the publish came first).
    started = Subquery(
        Attempt.objects.filter(job=OuterRef("pk"), number=OuterRef("attempts_made")).values(
            "started_at"
        )[:1]
    )
    # A row a pause, a concurrency or rate limit or a fuse held after its publish stays unpublished
    # (jobs.engine.pausing, jobs.engine.limiting, jobs.engine.rating, jobs.engine.fusing).
    held = Q(waiting_reason__in=HELD_REASONS)
    return (
        Job.objects.filter(waiting, published_at__isnull=True)
        .exclude(held)
        .update(
            published_at=Case(
                When(status=JobStatus.QUEUED, then=Now()),
                default=Least(Now(), Coalesce(started, Now())),
            )
        )
    )


class StampWriter:
    """One process's pending stamps and the daemon thread that writes them.

    `add` never blocks on the database. The thread starts on the first
    `add` (again in a forked child, whose copy of a parent's thread does
    not run) and writes what has gathered `delay` seconds after the first
    pending stamp, up to MAX_BATCH per statement; while MAX_BATCH or more
    are pending it writes without waiting, so it keeps up with any rate
    the database can take.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        # Also the forked child's fresh start: a lock another thread held at
        # the fork would never be released there, and the parent's pending
        # stamps are the parent's to write.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[tuple[uuid.UUID, int]] = []
        self._writing = 0
        self._thread: threading.Thread | None = None

    def add(self, job_id: uuid.UUID, attempt: int) -> None:
        """Queue the stamp of `attempt` of job `job_id` for the writer thread.

        Raises RuntimeError when the thread cannot be started (the stamp is
        then not queued; the caller writes it itself).
        """
        with self._lock:
            self._ensure_thread()
            self._pending.append((job_id, attempt))
            if len(self._pending) == 1:
                self._wake.notify_all()

    def start(self) -> None:
        """Start the writer thread now rather than at the first `add`.

        Raises RuntimeError when the thread cannot be started.
        """
        with self._lock:
            self._ensure_thread()

    def pending(self) -> int:
        """Stamps queued or being written, not yet committed."""
        with self._lock:
            return len(self._pending) + self._writing

    def flush(self, timeout: float = EXIT_FLUSH_SECONDS) -> bool:
        """Wait up to `timeout` seconds until every queued stamp is written (or given up).

        Returns whether nothing is pending any more.
        """
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                return not self._pending
            self._wake.notify_all()
            return self._wake.wait_for(lambda: not self._pending and not self._writing, timeout)

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        thread = threading.Thread(target=self._run, name="jobs-publish-stamps", daemon=True)
        thread.start()
        self._thread = thread

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(lambda: bool(self._pending))
            # Let a batch gather, unless a full one is waiting already; an
            # exiting process's flush cuts the wait short.
            with self._lock:
                if len(self._pending) < MAX_BATCH:
                    self._wake.wait(settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS)
                batch = self._pending[:MAX_BATCH]
                del self._pending[:MAX_BATCH]
                self._writing = len(batch)
            try:
                self._write(batch)
            finally:
                with self._lock:
                    self._writing = 0
                    self._wake.notify_all()

    def _write(self, batch: list[tuple[uuid.UUID, int]]) -> None:
        try:
            # As Django does around each request: a connection past
            # CONN_MAX_AGE or found unusable is closed, the next query opens one.
            close_old_connections()
            run_with_reconnect(
                lambda _try: write_stamps(batch),
                what=f"stamping {len(batch)} published jobs",
                within=WRITE_RETRY_SECONDS,
            )
        except Exception as exc:  # this thread must outlive any error; the sweep covers it
            if isinstance(exc, DatabaseError) and is_unavailable(exc):
                close_connections()
            logger.warning(
                "published but not stamped: %s jobs (%s: %s); the outbox sweep publishes them"
                " again and the duplicate deliveries are dropped",
                len(batch),
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )


_writer = StampWriter()
os.register_at_fork(after_in_child=_writer._reset)


def defer_stamp(job_id: uuid.UUID, attempt: int) -> None:
    """Have this process's writer thread stamp `attempt` of job `job_id` as published.

    Returns at once; the stamp is committed within about
    JOBS_PUBLISH_STAMP_DELAY_SECONDS (callers write at once with
    `write_stamps` when that is 0). Raises RuntimeError when no thread
    could be started; the stamp is then not queued.
    """
    _writer.add(job_id, attempt)


def start_stamp_writer() -> None:
    """Start this process's writer thread now (a worker child calls it at birth).

    Otherwise the first `defer_stamp` starts it; starting at birth keeps a
    child's thread count the same over its life. Raises RuntimeError when
    the thread cannot be started.
    """
    _writer.start()


def flush_stamps(timeout: float = EXIT_FLUSH_SECONDS) -> bool:
    """Write this process's pending stamps now, waiting up to `timeout` seconds.

    Called when a web worker exits (config/gunicorn.py) and at interpreter
    exit; returns whether none is left pending.
    """
    return _writer.flush(timeout)


atexit.register(flush_stamps)
