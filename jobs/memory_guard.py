"""Memory guard: per-attempt soft and hard memory limits, and recycling, on memory a child owns.

The measure is observability.memory.owned_bytes(): the child's resident
memory grown since it was forked (why not ru_maxrss, USS or PSS: its
docstring and docs/memory.md). Three uses:

- During an attempt, a watchdog thread in each worker child samples it every
  JOBS_MEMORY_SAMPLE_INTERVAL seconds (default 0.1), more often while
  memory grows fast towards a limit (`next_interval`), and judges the growth
  since the attempt began against the kind's limits (`attempt_limits`):
  past the soft one the attempt's cancellation flag is set (and, like a soft
  time limit, the attempt is aborted JOBS_ABORT_GRACE seconds later if it
  ignores it); past the hard one the watchdog calls the runner's `on_hard`,
  which freezes the attempt's thread (jobs.supervisor.Supervisor.freeze),
  records the attempt `memory_limit` in the database and then ends the child
  (os._exit(MEMORY_LIMIT_EXIT_CODE)), so the pool forks a fresh one; if the
  record has not returned within HARD_EXIT_SECONDS the child ends anyway
  and the worker's main process records a lost worker.
  The watchdog needs no cooperation from the attempt's thread, which may be
  stuck allocating; it only needs the GIL back, which CPython hands over
  between bytecodes. A single C call that allocates a huge block while
  holding the GIL is seen when it returns (known gap).
- After each attempt, billiard's per-child memory check
  (worker_max_memory_per_child, from JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES)
  reads owned memory instead of ru_maxrss
  (jobs.memory_startup.install_recycle_measure).
- At worker start, jobs.memory_startup.fresh_child_owned_bytes forks a
  probe child that runs what a new pool child runs at start and reports
  what it then owns; a per-child limit at or below that is refused
  (config.startup).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from opentelemetry import trace

from jobs import events
from jobs.engine.values import AttemptReport
from jobs.kinds.base import AttemptContext
from jobs.models import AttemptOutcome, Job
from jobs.policy import Policy
from jobs.reasons import AbortReason, Limit
from jobs.supervisor import supervisor
from observability import tracing
from observability.memory import owned_bytes

logger = logging.getLogger(__name__)

WATCHDOG_THREAD_NAME = "jobs-memory-watchdog"
# The exit status of a child ended by a hard memory limit; the worker's main
# process reads it from billiard's WorkerLostError ("exitcode 86").
MEMORY_LIMIT_EXIT_CODE = 86
MIB = 1024 * 1024
# The error type of an attempt stopped by the memory guard: the name of the
# exception Celery's FAILURE / RETRY shows (jobs.attempt_errors).
MEMORY_LIMIT_ERROR = "MemoryLimitExceeded"
# The shortest pause between two samples (seconds), used while memory grows
# fast near a limit: statm costs ~9 us, so 200 samples a second cost 0.2% of
# a core, and CPython's GIL switch interval (5 ms) bounds how soon the
# watchdog runs anyway.
MIN_SAMPLE_INTERVAL = 0.005
# How long the hard path may take to record the attempt before the child
# ends regardless (seconds): the database may be away, or the frozen
# attempt's thread may hold a lock the record needs.
HARD_EXIT_SECONDS = 10.0


def next_interval(*, growth: int, rate: float, limit: int, interval: float) -> float:
    """Seconds to sleep before the next sample: `interval`, or less when a limit comes near fast.

    `growth` is the attempt's growth now and `limit` the nearest limit above
    it (bytes; 0 when none is left), `rate` the growth per second over the
    last sample (bytes/s). At that rate the next sample comes when half of
    the headroom is used, so the sample that sees the limit crossed comes at
    most MIN_SAMPLE_INTERVAL of growth late, instead of up to a whole
    `interval` of it (an attempt allocating 2.5 GiB/s grows 250 MiB in
    0.1 s). Never below MIN_SAMPLE_INTERVAL nor above `interval`.
    """
    if limit <= 0 or rate <= 0:
        return interval
    headroom = max(limit - growth, 0)
    return min(interval, max(MIN_SAMPLE_INTERVAL, headroom / rate / 2))


def attempt_limits(policy: Policy) -> tuple[int, int]:
    """(soft, hard) bytes an attempt of this policy may make its child own; 0 is no limit.

    A policy's None takes the global default (JOBS_MEMORY_SOFT_LIMIT_BYTES,
    JOBS_MEMORY_HARD_LIMIT_BYTES).
    """
    soft = policy.soft_memory_limit
    hard = policy.hard_memory_limit
    return (
        settings.JOBS_MEMORY_SOFT_LIMIT_BYTES if soft is None else soft,
        settings.JOBS_MEMORY_HARD_LIMIT_BYTES if hard is None else hard,
    )


def mib(value: float) -> str:
    """`value` bytes as "12.3 MiB"."""
    return f"{value / MIB:.1f} MiB"


@dataclass
class _Watch:
    ctx: AttemptContext
    soft: int
    hard: int
    on_soft: Callable[[int], None]
    on_hard: Callable[[int], None]
    start_bytes: int
    peak_growth: int = 0
    soft_hit: bool = False
    hard_hit: bool = False
    last_growth: int = 0
    last_at: float = 0.0
    rate: float = 0.0

    def nearest_limit(self) -> int:
        """The next limit the growth has not crossed yet (bytes), 0 when none."""
        if self.soft and not self.soft_hit:
            return self.soft
        return 0 if self.hard_hit else self.hard


class MemoryWatchdog:
    """Watches the memory of at most one attempt at a time (one daemon thread per child).

    `interval` (seconds) defaults to JOBS_MEMORY_SAMPLE_INTERVAL; `measure`
    (bytes) to owned_bytes(). Thread-safe.
    """

    def __init__(
        self, *, interval: float | None = None, measure: Callable[[], int] = owned_bytes
    ) -> None:
        self._interval = interval
        self._measure = measure
        self._lock = threading.Lock()
        self._watch: _Watch | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def start(self) -> None:
        """Start this process's sampling thread now (a worker child calls it at birth).

        Otherwise the first `watch` starts it; starting at birth keeps a
        child's thread count the same over its life.
        """
        self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name=WATCHDOG_THREAD_NAME, daemon=True)
        self._thread.start()

    def watch(
        self,
        ctx: AttemptContext,
        *,
        soft: int,
        hard: int,
        on_soft: Callable[[int], None],
        on_hard: Callable[[int], None],
    ) -> None:
        """Watch the attempt `ctx` from now on, against `soft` and `hard` bytes of growth.

        `on_soft(growth)` is called once when growth passes `soft`,
        `on_hard(growth)` once when it passes `hard`; both run in the
        watchdog thread. A limit of 0 is not checked.
        """
        self._ensure_thread()
        with self._lock:
            self._watch = _Watch(
                ctx=ctx,
                soft=soft,
                hard=hard,
                on_soft=on_soft,
                on_hard=on_hard,
                start_bytes=self._measure(),
                last_at=time.monotonic(),
            )

    def unwatch(self) -> tuple[int, bool]:
        """Stop watching; returns (largest growth seen in bytes, whether the soft limit was hit)."""
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is None:
            return 0, False
        return watch.peak_growth, watch.soft_hit

    def check(self) -> None:
        """Take one sample and act on it (the loop calls this; tests may call it directly)."""
        with self._lock:
            watch = self._watch
        if watch is None or watch.hard_hit:
            return
        growth = self._measure() - watch.start_bytes
        now = time.monotonic()
        if now > watch.last_at:
            watch.rate = (growth - watch.last_growth) / (now - watch.last_at)
        watch.last_growth, watch.last_at = growth, now
        watch.peak_growth = max(watch.peak_growth, growth)
        if watch.hard and growth > watch.hard:
            watch.hard_hit = True
            watch.on_hard(growth)
        elif watch.soft and growth > watch.soft and not watch.soft_hit:
            watch.soft_hit = True
            watch.on_soft(growth)

    def pause(self) -> float:
        """Seconds until the next sample (next_interval on the watched attempt's last sample)."""
        interval = self._interval or settings.JOBS_MEMORY_SAMPLE_INTERVAL
        with self._lock:
            watch = self._watch
        if watch is None:
            return interval
        return next_interval(
            growth=watch.last_growth,
            rate=watch.rate,
            limit=watch.nearest_limit(),
            interval=interval,
        )

    def _loop(self) -> None:
        while True:
            try:
                time.sleep(self.pause())
                self.check()
            except Exception:  # this thread enforces limits: keep it alive whatever one sample hit
                logger.exception("memory watchdog sample failed")
                time.sleep(MIN_SAMPLE_INTERVAL)


watchdog = MemoryWatchdog()


def exit_child() -> None:
    """End this worker child at once with MEMORY_LIMIT_EXIT_CODE (after its outcome is recorded).

    os._exit, not sys.exit: the attempt's thread may hold locks or be deep
    in an allocation; nothing of it must run on. Metric files are memory
    mapped, so their counts are already on disk.
    """
    logging.shutdown()
    os._exit(MEMORY_LIMIT_EXIT_CODE)


def _exit_now() -> None:
    # No logging.shutdown: the frozen attempt's thread may hold a handler's lock.
    os._exit(MEMORY_LIMIT_EXIT_CODE)


class AttemptMemoryGuard:
    """Connects one attempt to the child's memory watchdog.

    `record(report)` writes the attempt's outcome (jobs.runner's, retried on
    a fresh connection and spooled if the database stays away).

    Soft limit: the attempt is flagged through the supervisor (cancellation
    flag, then AttemptAbort after JOBS_ABORT_GRACE) and, however it then
    ends, recorded `memory_limit`. Hard limit: the watchdog thread records
    `memory_limit` itself (the attempt's thread may be stuck allocating) and
    then ends the child; the worker's main process reports the Celery state
    from the recorded end (jobs.tasks.AttemptRequest).
    """

    def __init__(
        self,
        *,
        ctx: AttemptContext,
        policy: Policy,
        queue: str,
        hostname: str,
        record: Callable[[AttemptReport], object],
    ) -> None:
        self.ctx, self.queue, self.hostname, self.record = ctx, queue, hostname, record
        self.soft, self.hard = attempt_limits(policy)
        self.note = ""
        self.span: Any = None

    def watch(self, *, span: Any = None) -> None:
        """Start watching the attempt (call right before it runs); `span` is its trace span.

        The span is ended here if the hard limit ends the child, which never
        returns to the code that opened it.
        """
        self.span = span
        watchdog.watch(
            self.ctx, soft=self.soft, hard=self.hard, on_soft=self.on_soft, on_hard=self.on_hard
        )

    def unwatch(self) -> str:
        """Stop watching; returns the note a memory_limit outcome's message starts with."""
        peak, _ = watchdog.unwatch()
        return self.note or (f"stopped for memory: the attempt made its child own {mib(peak)} more")

    def on_soft(self, growth: int) -> None:
        """Past the soft limit (`growth` bytes): flag the attempt through the supervisor."""
        self.note = (
            f"soft memory limit exceeded: the attempt made its child own "
            f"{mib(growth)} more (soft_memory_limit {mib(self.soft)}); "
            "asked to stop"
        )
        logger.warning(
            "memory limit job_id=%s attempt=%s %s", self.ctx.job_id, self.ctx.attempt, self.note
        )
        events.memory_limit_hit.send(
            sender=Job, kind=self.ctx.kind, queue=self.queue, limit=Limit.SOFT
        )
        supervisor.flag(self.ctx, AbortReason.MEMORY_LIMIT)

    def on_hard(self, growth: int) -> None:
        """Past the hard limit (`growth` bytes): record `memory_limit` with `record`, end the child.

        The attempt's thread is frozen first (Supervisor.freeze): left
        running, an attempt allocating fast grew another ~270 MiB while the
        record waited for the GIL and the database (measured in
        tests/integration/test_telemetry_memory_guard.py). The child ends
        after HARD_EXIT_SECONDS even if the record never returns.
        """
        ctx = self.ctx
        supervisor.freeze(ctx)
        deadline = threading.Timer(HARD_EXIT_SECONDS, _exit_now)
        deadline.daemon = True
        deadline.start()
        message = (
            f"hard memory limit exceeded: the attempt made its child own {mib(growth)} "
            f"more (hard_memory_limit {mib(self.hard)}); its child was ended"
        )
        logger.error("memory limit job_id=%s attempt=%s %s", ctx.job_id, ctx.attempt, message)
        report = AttemptReport(
            outcome=AttemptOutcome.MEMORY_LIMIT,
            error_type=MEMORY_LIMIT_ERROR,
            error_message=message,
            retryable=False,
        )
        try:
            # Recorded before the child ends, so nothing of the attempt is lost
            # or left for the lease sweep to call a lost worker.
            self.record(report)
        except Exception:
            logger.exception("could not record the memory limit of job %s", ctx.job_id)
        finally:
            self._end_span(message)
            events.memory_limit_hit.send(
                sender=Job, kind=ctx.kind, queue=self.queue, limit=Limit.HARD
            )
            events.child_recycling.send(
                sender=Job, hostname=self.hostname, reason=events.RecycleReason.MEMORY_LIMIT
            )
            exit_child()

    def _end_span(self, message: str) -> None:
        if self.span is None:
            return

        try:
            self.span.set_attribute("job.outcome", str(AttemptOutcome.MEMORY_LIMIT))
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, message))
            self.span.end()
            tracing.flush()
        except Exception:  # the outcome is recorded; a span lost is only a span
            logger.exception("could not end the span of job %s", self.ctx.job_id)
