"""Runs one attempt inside a worker child: start, execute the kind, finish.

The platform side of the kind contract: it owns the time limits, the
cancellation flag and error capture, so kinds stay plain code.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
import traceback
import uuid
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from jobs import services
from jobs.kinds import AttemptContext, Cancelled, Kind, PermanentError, RetryableError, get_kind
from jobs.models import AttemptOutcome
from jobs.policy import Policy
from jobs.services import AttemptReport
from observability.memory import rss_bytes

logger = logging.getLogger(__name__)


def execute_attempt(*, job_id: str, attempt: int, hostname: str) -> str | None:
    """Run attempt `attempt` of job `job_id` in this process.

    Returns the job's status afterwards, or None when the delivery was
    dropped (duplicate, stale, terminal job). Exceptions from the kind never
    escape; database errors do (Celery then logs the failure and the lease
    sweep recovers the job).
    """
    started = services.attempt_start(
        job_id=job_id, attempt=attempt, hostname=hostname, pid=os.getpid(), rss_bytes=rss_bytes()
    )
    if started is None:
        return None
    kind = get_kind(started.kind)
    now = time.time()
    ctx = AttemptContext(
        job_id=uuid.UUID(str(started.job_id)),
        kind=started.kind,
        attempt=attempt,
        max_attempts=started.max_attempts,
        soft_deadline=now + started.policy.soft_time_limit,
        hard_deadline=now + started.policy.hard_time_limit,
    )
    report = run_kind(kind, started.payload, ctx, started.policy)
    if report.outcome != AttemptOutcome.SUCCEEDED:
        # A failed attempt leaves exception-info cycles (~155 KB measured on
        # Celery 5.7) that only a full collection frees; collect now so the
        # per-child memory limit recycles on real growth, not garbage.
        gc.collect()
    return _finish(job_id=job_id, attempt=attempt, report=report)


def _finish(*, job_id: str, attempt: int, report: AttemptReport) -> str | None:
    # The soft-limit signal can land while we record the outcome; the
    # outcome is already known, so record it again rather than lose it.
    for _ in range(3):
        try:
            return services.attempt_finish(
                job_id=job_id, attempt=attempt, report=report, rss_bytes=rss_bytes()
            )
        except SoftTimeLimitExceeded:
            continue
    return services.attempt_finish(
        job_id=job_id, attempt=attempt, report=report, rss_bytes=rss_bytes()
    )


def run_kind(
    kind: Kind, payload: dict[str, Any], ctx: AttemptContext, policy: Policy
) -> AttemptReport:
    """Execute `kind.run` and classify how it ended. Never raises.

    An attempt that returns after its soft deadline is `soft_timeout`, even
    when the kind swallowed SoftTimeLimitExceeded. The context's cancel flag
    is set when the soft deadline passes.
    """
    timer = threading.Timer(max(0.0, ctx.soft_deadline - time.time()), ctx.cancel_event.set)
    timer.daemon = True
    timer.start()
    try:
        result = kind.run(payload, ctx)
    except SoftTimeLimitExceeded as exc:
        return _failure(AttemptOutcome.SOFT_TIMEOUT, exc, retryable=True)
    except Cancelled as exc:
        if time.time() >= ctx.soft_deadline:
            return _failure(AttemptOutcome.SOFT_TIMEOUT, exc, retryable=True)
        return _failure(AttemptOutcome.CANCELLED, exc, retryable=False)
    except RetryableError as exc:
        return _failure(AttemptOutcome.ERROR, exc, retryable=True, retry_after=exc.retry_after)
    except PermanentError as exc:
        return _failure(AttemptOutcome.ERROR, exc, retryable=False)
    except Exception as exc:
        return _failure(AttemptOutcome.ERROR, exc, retryable=policy.retry_unexpected_errors)
    finally:
        timer.cancel()
    if time.time() >= ctx.soft_deadline:
        return AttemptReport(
            outcome=AttemptOutcome.SOFT_TIMEOUT,
            error_type="SoftTimeLimitExceeded",
            error_message=f"returned after the soft time limit of {policy.soft_time_limit}s",
        )
    try:
        json.dumps(result)
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
