"""The one retry decision and the Celery task state it gives an attempt (pure logic)."""

from __future__ import annotations

import inspect
import pickle
from datetime import UTC, datetime

import pytest
from celery.exceptions import Retry
from celery.worker.request import Request

from jobs.attempt_errors import AttemptError, error_class
from jobs.budget import Reservation
from jobs.decisions import Action, Decision, decide
from jobs.engine.values import AttemptEnd, AttemptReport
from jobs.models import AttemptOutcome, DeadReason, JobStatus
from jobs.policy import Policy
from jobs.task_states import AttemptRevoked, DeliveryIgnored, raise_for, summary

POLICY = Policy(max_attempts=5, backoff_base=1, backoff_cap=4, backoff_floor=0.5)
NEXT = datetime(2026, 11, 30, 10, 0, 1, 234000, tzinfo=UTC)


def _decide(**overrides: object) -> Decision:
    args: dict[str, object] = {
        "policy": POLICY,
        "outcome": AttemptOutcome.ERROR,
        "retryable": True,
        "attempts_made": 1,
        "max_attempts": 5,
    }
    return decide(**{**args, **overrides})  # type: ignore[arg-type]


# --- decide -------------------------------------------------------------------------


def test_decide_retries_a_retryable_error_within_the_backoff_bounds() -> None:
    decision = _decide(attempts_made=2)
    assert decision.action == Action.RETRY
    assert 0.5 <= decision.delay_seconds <= 2
    assert decision.retries


def test_decide_honours_retry_after_and_the_budget() -> None:
    assert _decide(retry_after=30).delay_seconds == 30
    asked: list[float] = []

    def deferring(delay: float) -> Reservation:
        asked.append(delay)
        return Reservation(granted=True, due=100 + delay + 60, asked=100 + delay, deferred=True)

    deferred = _decide(retry_after=30, budget=deferring)
    assert asked == [30]
    assert (deferred.action, deferred.delay_seconds, deferred.budget_deferred) == (
        Action.RETRY,
        90,
        True,
    )
    assert deferred.budget_exhausted


def test_decide_dead_budget_without_a_slot_and_backoff_on_fallback() -> None:
    refused = _decide(budget=lambda d: Reservation(granted=False, due=d, asked=d))
    assert refused.action == Action.DEAD
    assert refused.dead_reason == DeadReason.BUDGET
    assert refused.budget_exhausted
    fallback = _decide(
        retry_after=5, budget=lambda d: Reservation(granted=True, due=d, asked=d, fallback=True)
    )
    assert (fallback.action, fallback.delay_seconds, fallback.budget_fallback) == (
        Action.RETRY,
        5,
        True,
    )
    assert not fallback.budget_exhausted


def test_decide_dead_for_permanent_exhausted_and_cancelled() -> None:
    assert _decide(retryable=False) == Decision(Action.DEAD, dead_reason=DeadReason.ERROR)
    assert _decide(attempts_made=5) == Decision(Action.DEAD, dead_reason=DeadReason.EXHAUSTED)
    cancelled = _decide(outcome=AttemptOutcome.CANCELLED)
    assert cancelled == Decision(Action.DEAD, dead_reason=DeadReason.ERROR)


def test_decide_worker_lost_requeues_until_poison_or_exhausted() -> None:
    lost = {"outcome": AttemptOutcome.WORKER_LOST, "poison_after": 3}
    assert _decide(**lost, worker_losses=1).action == Action.REQUEUE
    assert _decide(**lost, worker_losses=3).dead_reason == DeadReason.POISON
    assert _decide(**lost, worker_losses=1, attempts_made=5).dead_reason == DeadReason.EXHAUSTED


def test_decide_never_asks_the_budget_for_a_dead_job() -> None:
    def budget(delay: float) -> Reservation:
        raise AssertionError("budget asked")

    assert _decide(attempts_made=5, budget=budget).action == Action.DEAD


# --- exceptions named after the attempt's error -----------------------------------------


def test_error_class_is_named_cached_and_picklable() -> None:
    cls = error_class("ConnectionRefusedError")
    assert cls is error_class("ConnectionRefusedError")
    assert issubclass(cls, AttemptError)
    exc = cls("refused")
    exc.add_note("attempt 1 of 5")
    copy = pickle.loads(pickle.dumps(exc))
    assert repr(copy) == "ConnectionRefusedError('refused')"
    assert copy.__notes__ == ["attempt 1 of 5"]


@pytest.mark.parametrize("name", ["", "not valid", "class", "_private", "1st"])
def test_error_class_falls_back_for_unusable_names(name: str) -> None:
    assert error_class(name) is AttemptError


# --- raise_for: the Celery state of an attempt ----------------------------------------


def _end(status: str | None, decision: Decision | None = None, **kw: object) -> AttemptEnd:
    return AttemptEnd(
        status=status,
        job_status=kw.pop("job_status", status or ""),  # type: ignore[arg-type]
        decision=decision,
        outcome=kw.pop("outcome", AttemptOutcome.ERROR),  # type: ignore[arg-type]
        next_attempt_at=NEXT,
        attempt=2,
        max_attempts=5,
    )


def _failed() -> AttemptReport:
    try:
        raise ConnectionRefusedError("refused")
    except ConnectionRefusedError as exc:
        return AttemptReport(
            outcome=AttemptOutcome.ERROR,
            error_type="ConnectionRefusedError",
            error_message="refused",
            exception=exc,
        )


RESULT = summary(
    job_id="j",
    attempt=2,
    outcome="succeeded",
    duration_seconds=0.0123456789,
    rss_before_bytes=100,
    rss_after_bytes=150,
)


def test_success_returns_the_summary() -> None:
    end = _end(JobStatus.SUCCEEDED, outcome=AttemptOutcome.SUCCEEDED)
    report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
    result = raise_for(end=end, report=report, attempt=2, max_attempts=5, result=RESULT)
    assert result == {
        "job_id": "j",
        "attempt": 2,
        "outcome": "succeeded",
        "duration_seconds": 0.012346,
        "rss_before_bytes": 100,
        "rss_after_bytes": 150,
        "rss_growth_bytes": 50,
    }


def test_failure_with_a_retry_raises_retry_with_the_error_and_next_attempt() -> None:
    end = _end(JobStatus.RETRYING, Decision(Action.RETRY, delay_seconds=1.5))
    with pytest.raises(Retry) as info:
        raise_for(end=end, report=_failed(), attempt=2, max_attempts=5, result=RESULT)
    retry = info.value
    assert repr(retry.exc) == (
        "ConnectionRefusedError('refused [retry: attempt 3 of 5 at "
        "2026-11-30T10:00:01.234Z, in 1.500s]')"
    )
    assert retry.when == NEXT
    assert isinstance(retry.__cause__, ConnectionRefusedError)  # Flower's traceback shows it


def test_dead_raises_the_attempts_exception_with_the_reason() -> None:
    end = _end(JobStatus.DEAD, Decision(Action.DEAD, dead_reason=DeadReason.EXHAUSTED))
    with pytest.raises(AttemptError) as info:
        raise_for(end=end, report=_failed(), attempt=2, max_attempts=5, result=RESULT)
    assert type(info.value).__name__ == "ConnectionRefusedError"
    assert str(info.value) == "refused [dead: exhausted after attempt 2 of 5]"
    assert "child RSS before 0.0 MiB" in info.value.__notes__[0]


def test_cancelled_is_revoked_and_dropped_or_overtaken_is_ignored() -> None:
    cancelled = _end(None, job_status=JobStatus.CANCELLED, outcome=AttemptOutcome.SUCCEEDED)
    with pytest.raises(AttemptRevoked):
        raise_for(end=cancelled, report=_failed(), attempt=2, max_attempts=5, result=RESULT)
    with pytest.raises(DeliveryIgnored):
        raise_for(end=None, report=None, attempt=2, max_attempts=5, result=RESULT)
    overtaken = _end(None, job_status=JobStatus.QUEUED)
    with pytest.raises(DeliveryIgnored):
        raise_for(end=overtaken, report=_failed(), attempt=2, max_attempts=5, result=RESULT)


def test_celery_request_still_has_the_hooks_attempt_request_relies_on() -> None:
    # jobs.tasks.AttemptRequest requeues a lost child's message through the
    # consumer's reject hook and overrides these handlers: fail loudly on upgrade.

    for name in ("on_failure", "on_timeout", "send_event", "acknowledge", "reject"):
        assert callable(getattr(Request, name)), name
    assert "_on_reject" in Request.__slots__  # type: ignore[attr-defined]
    assert "self._on_reject(logger, self._connection_errors, requeue)" in inspect.getsource(
        Request.reject
    )
