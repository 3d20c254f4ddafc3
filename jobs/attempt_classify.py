"""How an attempt's run of its kind ended: the kind's code under the supervisor, classified.

`run_kind` is the one place an attempt's exception (or late return) becomes
an AttemptOutcome and an AttemptReport (jobs.runner records it).
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import replace
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from jobs import memory_guard, redaction
from jobs.engine.values import AttemptReport
from jobs.kinds import AttemptContext, Cancelled, Kind, PermanentError, RetryableError
from jobs.models import AttemptOutcome
from jobs.policy import Policy
from jobs.reasons import AbortReason
from jobs.supervisor import AttemptAbort, supervisor

MEMORY_LIMIT_ERROR = memory_guard.MEMORY_LIMIT_ERROR


def run_kind(
    kind: Kind, payload: dict[str, Any], ctx: AttemptContext, policy: Policy
) -> AttemptReport:
    """Execute `kind.run` under the supervisor and classify how it ended. Never raises
    (except SystemExit and KeyboardInterrupt, which belong to the worker).

    An attempt that returns after its soft deadline is `soft_timeout`, even
    when the kind swallowed SoftTimeLimitExceeded; one that ignores its
    cancellation flag is ended by AttemptAbort (jobs.supervisor). The
    report's exception keeps its traceback (for Celery's FAILURE/RETRY), with
    the finished frames' locals cleared: no frame -> exception -> traceback
    -> frame cycle is left for the garbage collector. The context's
    cancellation flag is set when it returns.
    """
    secrets = redaction.secrets_of(kind, payload)
    report = _run_and_classify(kind, payload, ctx, policy)
    # The attempt is over, however it ended (Celery's own soft limit can win
    # the race with the supervisor's flag): helper threads it started and
    # that wait on the flag stop now, rather than outlive it with what they
    # hold (the incident's attempts that were never cancelled).
    ctx.cancel_event.set()
    if report.exception is not None and report.exception.__traceback__ is not None:
        traceback.clear_frames(report.exception.__traceback__)
    # The one boundary where an attempt's error becomes text (jobs.redaction).
    return redaction.redact_report(report, secrets)


def _run_and_classify(
    kind: Kind, payload: dict[str, Any], ctx: AttemptContext, policy: Policy
) -> AttemptReport:
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
    late_return = time.monotonic() >= ctx.soft_deadline
    if error is not None and (
        flagged == AbortReason.MEMORY_LIMIT or isinstance(error, MemoryError)
    ):
        # Stopped on the memory guard's flag (or out of memory outright): the
        # outcome says why, whatever the kind raised on its way out.
        report = _failure(AttemptOutcome.MEMORY_LIMIT, error, retryable=False)
        return replace(report, error_type=MEMORY_LIMIT_ERROR)
    if isinstance(error, AttemptAbort):
        reason = error.reason
        outcome = (
            AttemptOutcome.CANCELLED
            if reason == AbortReason.CANCELLED
            else AttemptOutcome.SOFT_TIMEOUT
        )
        return _failure(outcome, error, retryable=outcome == AttemptOutcome.SOFT_TIMEOUT)
    if isinstance(error, SoftTimeLimitExceeded):
        return _failure(AttemptOutcome.SOFT_TIMEOUT, error, retryable=True)
    if isinstance(error, Cancelled):
        if flagged == AbortReason.SOFT_TIMEOUT or (flagged is None and late_return):
            return _failure(AttemptOutcome.SOFT_TIMEOUT, error, retryable=True)
        return _failure(AttemptOutcome.CANCELLED, error, retryable=False)
    if error is not None and flagged == AbortReason.CANCELLED:
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
        exception=exc,
    )
