"""Per-child attempt supervisor: deadlines, cancellation and the abort that cannot be swallowed.

Celery's soft time limit raises SoftTimeLimitExceeded, an ordinary
Exception, once; job code with a broad `except Exception` swallows it and
keeps running (billiard issue 240). The supervisor is one daemon thread per
worker child that watches the attempt in progress:

- at the soft deadline, or when the job is cancelled, it sets the context's
  cancellation flag (cooperative code stops here);
- `grace` seconds later it interrupts the main thread with AttemptAbort, a
  BaseException, which `except Exception` does not catch;
- code that swallows even that is ended by the hard time limit (the parent
  kills the child);
- `freeze` stops the main thread where it is, for a child about to end
  (jobs.memory_guard's hard limit: the attempt must not grow while its end
  is recorded).

Cancellation is read from the state store (jobs.cancellation: the job row
on PostgreSQL, read by a poller thread; a Redis key otherwise), asked every
POLL_SECONDS.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import redis
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from jobs import state_store
from jobs.broker_transport import redis_client
from jobs.cancellation import CancelPoller, cancel_key
from jobs.kinds.base import AttemptContext
from jobs.reasons import AbortReason

logger = logging.getLogger(__name__)

ABORT_SIGNAL = signal.SIGRTMIN + 3  # unused by Celery and billiard
FREEZE_SIGNAL = signal.SIGRTMIN + 5  # +4 is observability.dumps's DUMP_SIGNAL
# How long a frozen main thread waits (seconds); its child ends well before
# (jobs.memory_guard.HARD_EXIT_SECONDS).
FREEZE_SECONDS = 60.0
POLL_SECONDS = 0.2
SUPERVISOR_THREAD_NAME = "jobs-attempt-supervisor"


class AttemptAbort(BaseException):  # noqa: N818 - mirrors SystemExit/KeyboardInterrupt
    """Raised in the attempt's thread to end it. A BaseException so `except Exception` cannot swallow it.

    `reason` is a jobs.reasons.AbortReason.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


__all__ = ["AttemptAbort", "Supervisor", "cancel_key", "supervisor"]


@dataclass
class _Watch:
    ctx: AttemptContext
    main_thread_id: int
    reason: str | None = None
    flagged_at: float | None = None
    aborted: bool = False
    # An exception was raised into the attempt's code by a signal handler
    # (AttemptAbort, Celery's SoftTimeLimitExceeded): jobs.child_retire.
    interrupted: str | None = None


class Supervisor:
    """Watches at most one attempt at a time (a prefork child runs one task at a time)."""

    def __init__(self) -> None:
        # Reentrant: the abort and soft-limit signal handlers take it in the
        # main thread, which may hold it when the signal lands (watch/unwatch).
        self._lock = threading.RLock()
        self._watch: _Watch | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._redis: redis.Redis | None = None
        self._poller = CancelPoller()
        self._can_abort = False
        self._freeze = threading.Event()
        self._frozen = threading.Event()
        self.last_interrupted: str | None = None

    def start(self) -> None:
        """Start this process's supervising thread now (a worker child calls it at birth).

        Otherwise the first `watch` starts it. Call it from the thread that
        runs attempts: the abort and freeze signal handlers are set here.
        """
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._redis = None
        self._freeze, self._frozen = threading.Event(), threading.Event()
        try:
            signal.signal(ABORT_SIGNAL, self._on_abort_signal)
            signal.signal(FREEZE_SIGNAL, self._on_freeze_signal)
            self._can_abort = True
        except ValueError:
            # Not the main thread (a threads pool): flag only; the hard limit still applies.
            self._can_abort = False
        self._thread = threading.Thread(target=self._loop, name=SUPERVISOR_THREAD_NAME, daemon=True)
        self._thread.start()

    def watch(self, ctx: AttemptContext) -> None:
        """Start watching `ctx`. Must be called from the thread that runs the attempt."""
        self._ensure_thread()
        with self._lock:
            self._watch = _Watch(ctx=ctx, main_thread_id=threading.get_ident())
            self.last_interrupted = None

    def unwatch(self) -> str | None:
        """Stop watching; returns why the attempt was flagged ("soft_timeout", "cancelled") or None.

        Afterwards `last_interrupted` names the exception a signal handler
        raised into the attempt's code ("AttemptAbort", "SoftTimeLimitExceeded"), or is None.
        """
        with self._lock:
            watch, self._watch = self._watch, None
            if watch is not None:
                self.last_interrupted = watch.interrupted
        return watch.reason if watch else None

    def flag(self, ctx: AttemptContext, reason: str) -> bool:
        """Set `ctx`'s cancellation flag for `reason` (e.g. "memory_limit"), from any thread.

        The attempt is then aborted `grace` seconds later if it ignores the
        flag, as at the soft deadline. Returns False when `ctx` is not the
        attempt being watched or it was flagged already (the first reason stays).
        """
        with self._lock:
            watch = self._watch
            if watch is None or watch.ctx is not ctx or watch.reason is not None:
                return False
            watch.reason, watch.flagged_at = reason, time.monotonic()
            ctx.cancel_event.set()
        logger.info(
            "attempt flagged job_id=%s attempt=%s reason=%s", ctx.job_id, ctx.attempt, reason
        )
        return True

    def freeze(self, ctx: AttemptContext) -> bool:
        """Stop the thread running `ctx` where it is, for good; from another thread.

        For a child that is about to end: its main thread (where a prefork
        child runs attempts) blocks in a signal handler at its next bytecode
        and stays there (FREEZE_SECONDS at most), so it allocates nothing
        more and holds the GIL no longer. A C call in progress finishes
        first. Returns False, doing nothing, when `ctx` is not the watched
        attempt or the attempt's thread cannot be signalled (a threads pool).
        Returns once the thread is frozen or after 1 s.
        """
        with self._lock:
            watch = self._watch
        if watch is None or watch.ctx is not ctx or not self._can_abort:
            return False
        self._freeze.set()
        signal.pthread_kill(watch.main_thread_id, FREEZE_SIGNAL)
        self._frozen.wait(1.0)
        return True

    def _on_freeze_signal(self, signum: int, frame: object) -> None:
        # No lock, no logging here: the thread may have been stopped holding either.
        if self._freeze.is_set():
            self._frozen.set()
            threading.Event().wait(FREEZE_SECONDS)

    def _on_abort_signal(self, signum: int, frame: object) -> None:
        with self._lock:
            watch = self._watch
        # The attempt may have ended between the decision and the signal.
        if watch is not None and watch.aborted:
            watch.interrupted = "AttemptAbort"
            raise AttemptAbort(watch.reason or AbortReason.SOFT_TIMEOUT)

    def _cancel_requested(self, job_id: object) -> bool:
        if state_store.uses_postgres():
            return self._poller.requested(job_id)
        try:
            if self._redis is None:
                self._redis = redis_client(
                    settings.CELERY_BROKER_URL,
                    socket_connect_timeout=1,
                    socket_timeout=1,
                    protocol=2,
                )
            return bool(self._redis.exists(cancel_key(job_id)))
        except Exception:  # this thread enforces limits: a client failure must not end it
            self._redis = None
            return False

    def _loop(self) -> None:
        while True:
            time.sleep(POLL_SECONDS)
            try:
                self._tick(settings.JOBS_ABORT_GRACE)
            except Exception:  # keep enforcing limits whatever one tick hit
                logger.exception("attempt supervisor tick failed")

    def _tick(self, grace: float) -> None:
        """Flag the watched attempt at its soft deadline or on cancel; abort it `grace` s later."""
        with self._lock:
            watch = self._watch
        if watch is None:
            return
        now = time.monotonic()
        if watch.reason is None:
            if now >= watch.ctx.soft_deadline:
                reason = AbortReason.SOFT_TIMEOUT
            elif self._cancel_requested(watch.ctx.job_id):
                reason = AbortReason.CANCELLED
            else:
                return
            with self._lock:
                if self._watch is watch:
                    watch.reason, watch.flagged_at = reason, now
                    watch.ctx.cancel_event.set()
            logger.info(
                "attempt flagged job_id=%s attempt=%s reason=%s",
                watch.ctx.job_id,
                watch.ctx.attempt,
                reason,
            )
            return
        if (
            not self._can_abort
            or watch.aborted
            or watch.flagged_at is None
            or now - watch.flagged_at < grace
        ):
            return
        with self._lock:
            if self._watch is not watch:
                return
            watch.aborted = True
        logger.warning(
            "attempt ignored its %s flag for %ss; aborting job_id=%s attempt=%s",
            watch.reason,
            grace,
            watch.ctx.job_id,
            watch.ctx.attempt,
        )
        signal.pthread_kill(watch.main_thread_id, ABORT_SIGNAL)


supervisor = Supervisor()

# billiard's soft time limit signal (billiard.pool.SIG_SOFT_TIMEOUT).
SOFT_LIMIT_SIGNAL = signal.SIGUSR1
# A soft limit signal this long before the watched attempt's own soft
# deadline belongs to an earlier attempt (seconds).
SOFT_LIMIT_SLACK = 0.5


def _soft_limit_handler(signum: int, frame: object) -> None:
    with supervisor._lock:
        watch = supervisor._watch
    if watch is not None and time.monotonic() >= watch.ctx.soft_deadline - SOFT_LIMIT_SLACK:
        watch.interrupted = watch.interrupted or "SoftTimeLimitExceeded"
        raise SoftTimeLimitExceeded()
    logger.warning(
        "late soft time limit signal ignored: it was sent for an attempt that already ended"
    )


def guard_soft_limit_signal() -> None:
    """Let Celery's soft time limit signal raise only inside the kind's code of an overdue attempt.

    billiard's parent sends the signal from its timeout thread, which looks
    at a job up to a second late and, on a loaded host, after the child has
    finished it: the signal then lands in the next attempt, often inside a
    database call, where a SoftTimeLimitExceeded breaks the connection
    mid-transaction (psycopg "another command is already in progress", then
    "Cannot open a new connection in an atomic block" on every later
    attempt of that child) or ends the child in its work loop. Found by
    `manage.py jobs_storm`. The supervisor already enforces the soft
    deadline inside the kind's code, so a signal with no overdue attempt
    to end is logged and dropped. Call it in the child before each attempt:
    billiard installs its own handler after `worker_process_init`.
    """
    if signal.getsignal(SOFT_LIMIT_SIGNAL) is not _soft_limit_handler:
        try:
            signal.signal(SOFT_LIMIT_SIGNAL, _soft_limit_handler)
        except ValueError:  # not the main thread (a threads pool): billiard sends none
            pass
