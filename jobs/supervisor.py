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
  kills the child).

Cancellation is read from Redis (`cancel_key(job_id)`, set by
services.job_cancel), polled every POLL_SECONDS.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

import redis
from django.conf import settings

from jobs.kinds.base import AttemptContext

logger = logging.getLogger(__name__)

ABORT_SIGNAL = signal.SIGRTMIN + 3  # unused by Celery and billiard
POLL_SECONDS = 0.2
SUPERVISOR_THREAD_NAME = "jobs-attempt-supervisor"


class AttemptAbort(BaseException):  # noqa: N818 - mirrors SystemExit/KeyboardInterrupt
    """Raised in the attempt's thread to end it. A BaseException so `except Exception` cannot swallow it.

    `reason` is "soft_timeout" or "cancelled".
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def cancel_key(job_id: object) -> str:
    """Redis key whose presence asks the running attempt of `job_id` to stop."""
    return f"jobs:cancel:{job_id}"


@dataclass
class _Watch:
    ctx: AttemptContext
    main_thread_id: int
    reason: str | None = None
    flagged_at: float | None = None
    aborted: bool = False


class Supervisor:
    """Watches at most one attempt at a time (a prefork child runs one task at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watch: _Watch | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._redis: redis.Redis | None = None
        self._can_abort = False

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._redis = None
        try:
            signal.signal(ABORT_SIGNAL, self._on_abort_signal)
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

    def unwatch(self) -> str | None:
        """Stop watching; returns why the attempt was flagged ("soft_timeout", "cancelled") or None."""
        with self._lock:
            watch, self._watch = self._watch, None
        return watch.reason if watch else None

    def _on_abort_signal(self, signum: int, frame: object) -> None:
        with self._lock:
            watch = self._watch
        # The attempt may have ended between the decision and the signal.
        if watch is not None and watch.aborted:
            raise AttemptAbort(watch.reason or "soft_timeout")

    def _cancel_requested(self, job_id: object) -> bool:
        try:
            if self._redis is None:
                self._redis = redis.Redis.from_url(
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
        now = time.time()
        if watch.reason is None:
            if now >= watch.ctx.soft_deadline:
                reason = "soft_timeout"
            elif self._cancel_requested(watch.ctx.job_id):
                reason = "cancelled"
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
