"""Runs one attempt inside a worker child: start, execute the kind, finish.

The platform side of the kind contract: it owns the time limits, the
cancellation flag and error capture, so kinds stay plain code.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import time
import traceback
import uuid
from dataclasses import replace
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import DataError
from opentelemetry import trace

from jobs import events, selectors, services
from jobs.kinds import AttemptContext, Cancelled, Kind, PermanentError, RetryableError, get_kind
from jobs.models import AttemptOutcome, Job
from jobs.policy import Policy
from jobs.services import AttemptReport
from jobs.supervisor import SUPERVISOR_THREAD_NAME, AttemptAbort, supervisor
from observability import tracing
from observability.memory import LeakTracker, live_threads, rss_bytes

logger = logging.getLogger(__name__)


def execute_attempt(*, job_id: str, attempt: int, hostname: str) -> str | None:
    """Run the attempt of job `job_id` that a message published as number `attempt`.

    Returns the job's status afterwards, or None when the delivery was
    dropped (duplicate, stale, terminal job). Exceptions from the kind never
    escape; database errors do (Celery then logs the failure and the lease
    sweep recovers the job).
    """
    rss_before = rss_bytes()
    started = services.attempt_start(
        job_id=job_id, attempt=attempt, hostname=hostname, pid=os.getpid(), rss_bytes=rss_before
    )
    if started is None:
        return None
    kind = get_kind(started.kind)
    now = time.time()
    ctx = AttemptContext(
        job_id=uuid.UUID(str(started.job_id)),
        kind=started.kind,
        attempt=started.attempt,
        max_attempts=started.max_attempts,
        soft_deadline=now + started.policy.soft_time_limit,
        hard_deadline=now + started.policy.hard_time_limit,
    )
    threads_before = live_threads()
    with tracing.attempt_span(
        traceparent=started.trace_parent,
        job_id=started.job_id,
        kind=started.kind,
        attempt=started.attempt,
        queue=started.queue,
    ) as span:
        report = run_kind(kind, started.payload, ctx, started.policy)
        if report.outcome != AttemptOutcome.SUCCEEDED:
            # A failed attempt leaves exception-info cycles (~155 KB measured on
            # Celery 5.7) that only a full collection frees; collect now so the
            # per-child memory limit recycles on real growth, not garbage.
            gc.collect()
        report = replace(report, trace_id=tracing.trace_id_of(span))
        status = _finish(job_id=str(started.job_id), attempt=started.attempt, report=report)
        span.set_attribute("job.outcome", str(report.outcome))
        if report.outcome != AttemptOutcome.SUCCEEDED:
            # Only a failed attempt can have scheduled a retry: no read after a success.
            delay = selectors.attempt_retry_delay(job_id=started.job_id, attempt=started.attempt)
            if delay is not None:
                span.set_attribute("job.retry_delay_seconds", delay)
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
    return status


@functools.cache
def leak_tracker() -> LeakTracker:
    """This process's LeakTracker, configured from settings (JOBS_LEAK_*)."""
    return LeakTracker(
        rss_threshold_bytes=settings.JOBS_LEAK_RSS_THRESHOLD_BYTES,
        consecutive=settings.JOBS_LEAK_RSS_CONSECUTIVE,
        ignore=frozenset({SUPERVISOR_THREAD_NAME}),
    )


def _finish(*, job_id: str, attempt: int, report: AttemptReport) -> str | None:
    # The soft-limit signal can land while we record the outcome; the
    # outcome is already known, so record it again rather than lose it.
    for _ in range(3):
        try:
            return _record(job_id=job_id, attempt=attempt, report=report)
        except SoftTimeLimitExceeded:
            continue
    return _record(job_id=job_id, attempt=attempt, report=report)


def _record(*, job_id: str, attempt: int, report: AttemptReport) -> str | None:
    try:
        return services.attempt_finish(
            job_id=job_id, attempt=attempt, report=report, rss_bytes=rss_bytes()
        )
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
        return services.attempt_finish(
            job_id=job_id, attempt=attempt, report=unstorable, rss_bytes=rss_bytes()
        )


def run_kind(
    kind: Kind, payload: dict[str, Any], ctx: AttemptContext, policy: Policy
) -> AttemptReport:
    """Execute `kind.run` under the supervisor and classify how it ended. Never raises
    (except SystemExit and KeyboardInterrupt, which belong to the worker).

    An attempt that returns after its soft deadline is `soft_timeout`, even
    when the kind swallowed SoftTimeLimitExceeded; one that ignores its
    cancellation flag is ended by AttemptAbort (jobs.supervisor).
    """
    error: BaseException | None = None
    result: Any = None
    supervisor.watch(ctx)
    try:
        try:
            result = kind.run(payload, ctx)
        except BaseException as exc:
            error = exc
        flagged = supervisor.unwatch()
    except AttemptAbort as late:  # landed after run() returned, before unwatch()
        error = error or late
        flagged = supervisor.unwatch() or late.reason
    if isinstance(error, SystemExit | KeyboardInterrupt):
        raise error
    late_return = time.time() >= ctx.soft_deadline
    if isinstance(error, AttemptAbort):
        reason = error.reason
        outcome = AttemptOutcome.CANCELLED if reason == "cancelled" else AttemptOutcome.SOFT_TIMEOUT
        return _failure(outcome, error, retryable=outcome == AttemptOutcome.SOFT_TIMEOUT)
    if isinstance(error, SoftTimeLimitExceeded):
        return _failure(AttemptOutcome.SOFT_TIMEOUT, error, retryable=True)
    if isinstance(error, Cancelled):
        if flagged == "soft_timeout" or (flagged is None and late_return):
            return _failure(AttemptOutcome.SOFT_TIMEOUT, error, retryable=True)
        return _failure(AttemptOutcome.CANCELLED, error, retryable=False)
    if error is not None and flagged == "cancelled":
        return _failure(AttemptOutcome.CANCELLED, error, retryable=False)
    if error is not None and late_return:
        # Whatever it raised, it raised past the soft limit.
        return _failure(AttemptOutcome.SOFT_TIMEOUT, error, retryable=True)
    if isinstance(error, RetryableError):
        return _failure(AttemptOutcome.ERROR, error, retryable=True, retry_after=error.retry_after)
    if isinstance(error, PermanentError):
        return _failure(AttemptOutcome.ERROR, error, retryable=False)
    if error is not None:
        return _failure(AttemptOutcome.ERROR, error, retryable=policy.retry_unexpected_errors)
    if late_return:
        return AttemptReport(
            outcome=AttemptOutcome.SOFT_TIMEOUT,
            error_type="SoftTimeLimitExceeded",
            error_message=f"returned after the soft time limit of {policy.soft_time_limit}s",
        )
    try:
        json.dumps(result, allow_nan=False)  # NaN/Infinity are not JSON (jsonb refuses them)
    except (TypeError, ValueError) as exc:
        return _failure(AttemptOutcome.ERROR, exc, retryable=False)
    return AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result=result)


def _failure(
    outcome: AttemptOutcome,
    exc: BaseException,
    *,
    retryable: bool,
    retry_after: float | None = None,
) -> AttemptReport:
    return AttemptReport(
        outcome=outcome,
        error_type=type(exc).__name__,
        error_message=str(exc),
        traceback="".join(traceback.format_exception(exc)),
        retryable=retryable,
        retry_after=retry_after,
    )
