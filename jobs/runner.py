"""Runs one attempt inside a worker child: start, execute the kind, finish.

The platform side of the kind contract: it owns the time limits, the
cancellation flag and error capture, so kinds stay plain code.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DatabaseError, DataError
from opentelemetry import trace

from jobs import child_retire, engine, events, memory_guard, services, state_store
from jobs.attempt_classify import run_kind
from jobs.child_gc import ChildCollector
from jobs.db import is_unavailable, run_with_reconnect
from jobs.engine.values import (
    AttemptEnd,
    AttemptRef,
    AttemptReport,
    AttemptRun,
    Delivery,
    StartedAttempt,
)
from jobs.kinds import AttemptContext, get_kind
from jobs.models import AttemptOutcome, Job, JobStatus
from jobs.progress import Progress, ProgressReporter
from jobs.reasons import RecycleReason
from jobs.supervisor import (
    SUPERVISOR_THREAD_NAME,
    guard_soft_limit_signal,
    supervisor,
)
from observability import tracing
from observability.memory import LeakTracker, live_threads, rss_bytes

logger = logging.getLogger(__name__)


def execute_attempt(
    *,
    job_id: str,
    attempt: int,
    hostname: str,
    collector: ChildCollector | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> AttemptRun:
    """Run the attempt of job `job_id` that a message published as number `attempt`.

    Returns the AttemptRun: how the attempt ended, what was recorded and
    decided (`end`; None when the delivery was dropped unrun: duplicate,
    stale, terminal job), and the child's RSS around it. Exceptions from the
    kind never escape. `collector` is this child's ChildCollector (a fresh
    one when not given: no failure counted yet). A lost database connection is retried on a fresh one
    (jobs.db); an outcome the database cannot take in time is spooled to
    Redis for the scheduler (jobs.services.outcomes), never dropped. Other
    database errors escape (Celery logs the failure, the lease sweep
    recovers the job). `on_progress` is called with each progress report
    written (jobs.progress; the Celery task sends Flower's event with it).
    """
    guard_soft_limit_signal()
    rss_before = rss_bytes()
    pid = os.getpid()
    started = run_with_reconnect(
        lambda retry: engine.current().start(
            Delivery(
                job_id=job_id,
                attempt=attempt,
                hostname=hostname,
                pid=pid,
                rss_bytes=rss_before,
                resume=retry > 0,
            )
        ),
        what=f"starting attempt {attempt} of job {job_id}",
    )
    if started is None:
        return AttemptRun(job_id=str(job_id), attempt=attempt, rss_before_bytes=rss_before)
    kind = get_kind(started.kind)
    began = now = time.monotonic()
    reporter = ProgressReporter(
        job_id=uuid.UUID(str(started.job_id)),
        attempt=started.attempt,
        kind=started.kind,
        queue=started.queue,
        interval=settings.JOBS_PROGRESS_INTERVAL,
        publish=on_progress,
    )
    ctx = AttemptContext(
        job_id=uuid.UUID(str(started.job_id)),
        kind=started.kind,
        attempt=started.attempt,
        max_attempts=started.max_attempts,
        soft_deadline=now + started.policy.soft_time_limit,
        hard_deadline=now + started.policy.hard_time_limit,
        progress_sink=reporter if settings.JOBS_PROGRESS_INTERVAL >= 0 else None,
    )
    threads_before = live_threads()
    guard = memory_guard.AttemptMemoryGuard(
        ctx=ctx,
        policy=started.policy,
        queue=started.queue,
        hostname=hostname,
        record=functools.partial(_record_memory_limit, ctx),
    )
    with tracing.attempt_span(
        traceparent=started.trace_parent,
        job_id=started.job_id,
        kind=started.kind,
        attempt=started.attempt,
        queue=started.queue,
    ) as span:
        guard.watch(span=span)
        try:
            report = run_kind(kind, started.payload, ctx, started.policy)
        finally:
            report_note = guard.unwatch()
            reporter.flush()  # the last report, while the attempt is still the running one
            if reporter.reports:
                logger.info(
                    "progress job_id=%s attempt=%s reports=%s writes=%s cost=%.6fs",
                    ctx.job_id,
                    ctx.attempt,
                    reporter.reports,
                    reporter.writes,
                    reporter.seconds,
                )
        if supervisor.last_interrupted:
            # Whatever the kind's code held where it was interrupted is suspect.
            child_retire.retire_after_attempt(
                reason=RecycleReason.ABORTED,
                why=f"{supervisor.last_interrupted} was raised into attempt {ctx.attempt}"
                f" of job {ctx.job_id} ({ctx.kind}, {report.outcome})",
            )
        if report.outcome == AttemptOutcome.MEMORY_LIMIT:
            report = replace(report, error_message=f"{report_note}: {report.error_message}")
        rss_after = rss_bytes()
        if report.outcome != AttemptOutcome.SUCCEEDED:
            rss_after = (collector or ChildCollector()).after_failure(report.outcome, rss=rss_after)
        report = replace(report, trace_id=tracing.trace_id_of(span))
        end = _finish(
            job_id=str(started.job_id),
            attempt=started.attempt,
            report=report,
            rss=rss_after,
            hard_deadline=ctx.hard_deadline,
            started=started,
        )
        span.set_attribute("job.outcome", str(report.outcome))
        span.set_attributes(tracing.decision_attributes(end.decision))
        if report.outcome != AttemptOutcome.SUCCEEDED:
            span.set_status(trace.Status(trace.StatusCode.ERROR, report.error_type))
    leaked = leak_tracker().check(
        kind=started.kind,
        job_id=started.job_id,
        threads_before=threads_before,
        rss_before=rss_before,
        rss_after=rss_bytes(),
    )
    for resource in leaked:
        events.leak_suspected.send(sender=Job, kind=started.kind, resource=resource)
    return AttemptRun(
        job_id=str(started.job_id),
        attempt=started.attempt,
        max_attempts=started.max_attempts,
        end=end,
        report=report,
        duration_seconds=time.monotonic() - began,
        rss_before_bytes=rss_before,
        rss_after_bytes=rss_after,
    )


def _record_memory_limit(ctx: AttemptContext, report: AttemptReport) -> None:
    """Record, from the memory watchdog's thread, the attempt `ctx` ended at its hard memory limit."""
    _finish(
        job_id=str(ctx.job_id),
        attempt=ctx.attempt,
        report=report,
        rss=rss_bytes(),
        hard_deadline=ctx.hard_deadline,
    )


@functools.cache
def leak_tracker() -> LeakTracker:
    """This process's LeakTracker, configured from settings (JOBS_LEAK_*)."""
    return LeakTracker(
        rss_threshold_bytes=settings.JOBS_LEAK_RSS_THRESHOLD_BYTES,
        consecutive=settings.JOBS_LEAK_RSS_CONSECUTIVE,
        # The platform's own threads of a child, started by its first attempt.
        ignore=frozenset({SUPERVISOR_THREAD_NAME, memory_guard.WATCHDOG_THREAD_NAME}),
    )


def _finish(
    *,
    job_id: str,
    attempt: int,
    report: AttemptReport,
    rss: int | None,
    hard_deadline: float,
    started: StartedAttempt | None = None,
) -> AttemptEnd:
    """Record the outcome, retrying the write (never the work) on a fresh connection.

    The retries stop a second before the attempt's hard deadline (unix
    seconds; past it the worker kills this child) or after
    JOBS_DB_RETRY_SECONDS; then the outcome is spooled to this host's disk
    and to Redis, to be written later (jobs.services.outcomes). `started` (what
    attempt_start returned) lets the common case be one statement.
    """
    within = min(settings.JOBS_DB_RETRY_SECONDS, max(0.0, hard_deadline - time.monotonic() - 1.0))
    # The soft-limit signal can land while we record the outcome; the
    # outcome is already known, so record it again rather than lose it.
    for _ in range(4):
        try:
            return run_with_reconnect(
                lambda _retry: _record(
                    job_id=job_id, attempt=attempt, report=report, rss=rss, started=started
                ),
                what=f"recording attempt {attempt} of job {job_id}",
                within=within,
            )
        except SoftTimeLimitExceeded:
            continue
        except DatabaseError as exc:
            if not is_unavailable(exc):
                raise
            break
    _spool(job_id=job_id, attempt=attempt, report=report, rss=rss)
    return AttemptEnd(
        status=None,
        job_status=JobStatus.RUNNING,
        outcome=report.outcome,
        attempt=attempt,
        spooled=True,
    )


def _spool(*, job_id: str, attempt: int, report: AttemptReport, rss: int | None) -> None:
    """Keep an outcome the database would not take, on this host's disk (and in Redis with the
    Redis state store: jobs.services.outcomes); each copy is tried whatever happened to the other."""
    kept = []
    try:
        services.outcome_spool_local(job_id=job_id, attempt=attempt, report=report, rss_bytes=rss)
        kept.append("disk")
    except OSError as exc:
        logger.error("outcome not spooled to disk job_id=%s attempt=%s: %s", job_id, attempt, exc)
    try:
        # A second copy, off this host, only where the state store is Redis
        # (jobs.state_store); never read before the lease sweep.
        if not state_store.uses_postgres():
            services.outcome_spool(job_id=job_id, attempt=attempt, report=report, rss_bytes=rss)
            kept.append("redis")
    except Exception as exc:  # the broker's client raises many types for one outage
        logger.error(
            "outcome not spooled to Redis job_id=%s attempt=%s: %s: %s",
            job_id,
            attempt,
            type(exc).__name__,
            exc,
        )
    logger.warning(
        "outcome of job_id=%s attempt=%s outcome=%s kept in %s until the database takes it",
        job_id,
        attempt,
        report.outcome,
        " and ".join(kept) or "nothing (lost: the lease sweep will call the attempt lost)",
    )


def _record(
    *,
    job_id: str,
    attempt: int,
    report: AttemptReport,
    rss: int | None,
    started: StartedAttempt | None = None,
) -> AttemptEnd:
    ref = AttemptRef(job_id=job_id, number=attempt, started=started, rss_bytes=rss)
    try:
        return engine.current().finish(ref, report)
    except DataError as exc:
        # The database refused this outcome (a value it cannot store). Record
        # that as a permanent error rather than leave the job running until
        # its lease expires and counts as a worker loss.
        logger.error("outcome not storable job_id=%s attempt=%s: %s", job_id, attempt, exc)
        unstorable = AttemptReport(
            outcome=AttemptOutcome.ERROR,
            error_type="UnstorableOutcome",
            error_message=f"the database refused the attempt's {report.outcome} outcome: {exc}"[
                :2000
            ],
            retryable=False,
            trace_id=report.trace_id,
        )
        return engine.current().finish(ref, unstorable)
