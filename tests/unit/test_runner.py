"""jobs.runner: how one attempt's ending is classified, and a whole attempt in-process."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from jobs import child_gc
from jobs.attempt_classify import run_kind
from jobs.kinds import AttemptContext, Kind, PermanentError, RetryableError
from jobs.models import AttemptOutcome
from jobs.policy import Policy
from jobs.runner import execute_attempt
from jobs.supervisor import cancel_key

POLICY = Policy(soft_time_limit=30, hard_time_limit=45)


class FuncKind(Kind):
    """A test kind whose run is the function it was built with."""

    name = "test.func"

    def __init__(self, func: Callable[[dict[str, Any], AttemptContext], Any]) -> None:
        self.func = func

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        return self.func(payload, ctx)


def _raise(exc: BaseException) -> Callable[..., Any]:
    def run(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        raise exc

    return run


def test_run_kind_success_returns_result(attempt_context: Callable[..., Any]) -> None:
    report = run_kind(
        FuncKind(lambda p, c: {"sum": p["a"] + 1}), {"a": 1}, attempt_context(), POLICY
    )

    assert report.outcome == AttemptOutcome.SUCCEEDED
    assert report.result == {"sum": 2}
    assert report.error_type == ""


def test_run_kind_retryable_error_keeps_retry_after(attempt_context: Callable[..., Any]) -> None:
    kind = FuncKind(_raise(RetryableError("busy", retry_after=4.0)))

    report = run_kind(kind, {}, attempt_context(), POLICY)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.retryable is True
    assert report.retry_after == 4.0
    assert (report.error_type, report.error_message) == ("RetryableError", "busy")
    assert "RetryableError: busy" in report.traceback


def test_run_kind_permanent_error_not_retryable(attempt_context: Callable[..., Any]) -> None:
    report = run_kind(FuncKind(_raise(PermanentError("bad input"))), {}, attempt_context(), POLICY)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.retryable is False
    assert report.error_type == "PermanentError"


@pytest.mark.parametrize(("retry_unexpected", "expected"), [(True, True), (False, False)])
def test_run_kind_unexpected_exception_retryable_per_policy(
    attempt_context: Callable[..., Any], retry_unexpected: bool, expected: bool
) -> None:
    policy = POLICY.with_overrides({"retry_unexpected_errors": retry_unexpected})

    report = run_kind(FuncKind(_raise(KeyError("missing"))), {}, attempt_context(), policy)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.retryable is expected
    assert report.error_type == "KeyError"
    assert report.retry_after is None


def test_run_kind_swallowed_soft_deadline_returning_late_is_soft_timeout(
    attempt_context: Callable[..., Any],
) -> None:
    # given a kind that waits for the cancel flag, then returns as if nothing happened
    def ignore_deadline(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        assert ctx.cancel_event.wait(5), "the soft deadline never set the cancel flag"
        return {"done": True}

    ctx = attempt_context(soft_in=0.1)

    # when it runs past its soft deadline
    report = run_kind(FuncKind(ignore_deadline), {}, ctx, POLICY)

    # then the attempt is a soft timeout, its result discarded, and retryable
    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    assert report.result is None
    assert report.retryable is True
    assert report.error_type == "SoftTimeLimitExceeded"


def test_run_kind_soft_deadline_already_past_is_soft_timeout(
    attempt_context: Callable[..., Any],
) -> None:
    report = run_kind(FuncKind(lambda p, c: "ok"), {}, attempt_context(soft_in=-1), POLICY)

    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT


def test_run_kind_soft_time_limit_exception_is_soft_timeout(
    attempt_context: Callable[..., Any],
) -> None:
    report = run_kind(FuncKind(_raise(SoftTimeLimitExceeded())), {}, attempt_context(), POLICY)

    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    assert report.retryable is True


def test_run_kind_cancelled_before_deadline_is_cancelled(
    attempt_context: Callable[..., Any],
) -> None:
    # given a job cancelled while its attempt runs
    ctx = attempt_context()
    ctx.cancel_event.set()

    # when the kind polls the flag
    report = run_kind(FuncKind(lambda p, c: c.raise_if_cancelled()), {}, ctx, POLICY)

    # then the attempt is cancelled and not retried
    assert report.outcome == AttemptOutcome.CANCELLED
    assert report.retryable is False
    assert report.error_type == "Cancelled"


def test_run_kind_cancel_flag_from_soft_deadline_is_soft_timeout(
    attempt_context: Callable[..., Any],
) -> None:
    # given a kind that polls the cancel flag in a loop
    def poll(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            ctx.cancel_event.wait(0.02)
        return "never cancelled"

    # when the soft deadline sets the flag
    report = run_kind(FuncKind(poll), {}, attempt_context(soft_in=0.1), POLICY)

    # then it is a retryable soft timeout, not a cancellation
    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    assert report.retryable is True
    assert report.error_type == "Cancelled"


def test_run_kind_sets_cancel_flag_when_celery_soft_limit_ends_attempt(
    attempt_context: Callable[..., Any],
) -> None:
    # given a kind whose helper thread waits on the flag, ended by Celery's own
    # soft limit (SoftTimeLimitExceeded) before the supervisor flagged it
    helper: list[threading.Thread] = []

    def hang(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        thread = threading.Thread(target=ctx.cancel_event.wait, args=(30,), daemon=True)
        thread.start()
        helper.append(thread)
        raise SoftTimeLimitExceeded()

    # when the attempt ends
    report = run_kind(FuncKind(hang), {}, attempt_context(), POLICY)

    # then the flag is set, so the helper stops instead of outliving the attempt
    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    helper[0].join(timeout=2)
    assert not helper[0].is_alive()


@pytest.mark.parametrize("result", [object(), {1, 2}, {"when": time}, b"bytes"])
def test_run_kind_non_json_result_is_error_not_retryable(
    attempt_context: Callable[..., Any], result: Any
) -> None:
    report = run_kind(FuncKind(lambda p, c: result), {}, attempt_context(), POLICY)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.retryable is False
    assert report.error_type == "TypeError"


# Regression (fixed): json.dumps accepts NaN/Infinity, which are not JSON
# (RFC 8259); the job row's JSON column then rejects the result (SQLite CHECK
# JSON_VALID -> IntegrityError; PostgreSQL jsonb -> DataError) and the attempt
# is never recorded. Fix: json.dumps(result, allow_nan=False).


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_run_kind_non_finite_float_result_is_error_not_retryable(
    attempt_context: Callable[..., Any], value: float
) -> None:
    report = run_kind(FuncKind(lambda p, c: {"mean": value}), {}, attempt_context(), POLICY)

    assert report.outcome == AttemptOutcome.ERROR
    assert report.retryable is False


def test_run_kind_stops_watching_after_return(
    attempt_context: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    # given an attempt that ends well before its soft deadline
    ctx = attempt_context(soft_in=0.3)

    # when it has returned
    with caplog.at_level(logging.INFO, logger="jobs.supervisor"):
        report = run_kind(FuncKind(lambda p, c: "ok"), {}, ctx, POLICY)
        time.sleep(0.8)  # past the deadline: the supervisor has nothing to poll for

    # then its deadline passing later flags nothing (the flag itself is set
    # by the attempt's end, for the helper threads it started)
    assert report.outcome == AttemptOutcome.SUCCEEDED
    assert ctx.cancel_event.is_set()
    assert not [r for r in caplog.records if "attempt flagged" in r.getMessage()]


def test_run_kind_flag_ignoring_kind_is_aborted_as_soft_timeout(
    attempt_context: Callable[..., Any],
) -> None:
    # given a kind that swallows every Exception and never looks at its flag
    def swallow_everything(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                time.sleep(0.02)
            except Exception:  # the behaviour under test
                continue
        return "ran to the end"

    # when its soft deadline passes
    started = time.monotonic()
    report = run_kind(FuncKind(swallow_everything), {}, attempt_context(soft_in=0.1), POLICY)

    # then the supervisor's abort (a BaseException) ended it soon after the grace
    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    assert report.retryable is True
    assert report.error_type == "AttemptAbort"
    assert time.monotonic() - started < 5


def test_run_kind_cancel_request_in_redis_cancels_attempt(
    attempt_context: Callable[..., Any], broker_redis: Any
) -> None:

    # given a running attempt whose job is cancelled through the broker
    ctx = attempt_context()
    broker_redis.set(cancel_key(ctx.job_id), "1", ex=60)

    def wait_for_flag(payload: dict[str, Any], c: AttemptContext) -> Any:
        assert c.cancel_event.wait(5), "the cancel request never reached the attempt"
        c.raise_if_cancelled()

    # when the kind sees its flag and stops
    report = run_kind(FuncKind(wait_for_flag), {}, ctx, POLICY)

    # then the attempt is cancelled, not retried
    assert report.outcome == AttemptOutcome.CANCELLED
    assert report.retryable is False


# --- a whole attempt, in this process, against the database -----------------


@pytest.mark.django_db
def test_execute_attempt_success_records_result(job_factory: Callable[..., Any]) -> None:
    # given a queued demo.flaky job that will not fail
    job = job_factory(payload={"fail_times": 0, "sleep_seconds": 0})

    # when attempt 1 runs here
    status = execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test").status

    # then the job succeeded with the kind's result and one attempt row
    job.refresh_from_db()
    assert status == "succeeded"
    assert job.result == {"attempt": 1}
    [attempt] = job.attempts.all()
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert attempt.worker_hostname == "unit@test"
    assert attempt.rss_before_bytes
    assert attempt.rss_after_bytes


MIB = 1024 * 1024


@pytest.mark.django_db
def test_execute_attempt_failure_frees_old_generation_garbage(
    job_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a child whose next failed attempt is the one that collects fully
    collector = child_gc.ChildCollector(
        failures_since_collection=child_gc.FULL_COLLECTION_EVERY - 1
    )

    # and a garbage cycle that already reached the oldest generation
    class Node:
        pass

    node = Node()
    node.self = node  # type: ignore[attr-defined]
    alive = weakref.ref(node)
    gc.collect()  # survivors of a full collection live in the oldest generation
    del node
    job = job_factory(payload={"fail_times": 2, "sleep_seconds": 0})

    # when a failed attempt runs here
    execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test", collector=collector)

    # then the collection after it freed the cycle (a young one would not)
    assert alive() is None


def test_full_collection_runs_every_few_errors_and_at_once_after_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a fresh child's count of errors and a recorded gc.collect
    collections: list[int] = []
    collector = child_gc.ChildCollector(
        collect=lambda: collections.append(len(collections)), read_rss=lambda: 100 * MIB
    )
    every = child_gc.FULL_COLLECTION_EVERY

    # when errors follow one another at a steady RSS, then a timeout and a memory limit
    for _ in range(2 * every):
        collector.after_failure(AttemptOutcome.ERROR, rss=100 * MIB)
    after_errors = len(collections)
    collector.after_failure(AttemptOutcome.SOFT_TIMEOUT, rss=100 * MIB)
    collector.after_failure(AttemptOutcome.MEMORY_LIMIT, rss=100 * MIB)
    # and then an error after which RSS grew past the threshold
    collector.after_failure(AttemptOutcome.ERROR, rss=100 * MIB + 1)
    before_growth = len(collections)
    collector.after_failure(
        AttemptOutcome.ERROR, rss=100 * MIB + child_gc.FULL_COLLECTION_RSS_GROWTH + 1
    )

    # then one full collection per `every` errors, one after each of the others,
    # and one at once after the growth
    assert after_errors == 2
    assert before_growth == 4
    assert len(collections) == 5


@pytest.mark.django_db
def test_execute_attempt_planned_failure_goes_retrying(job_factory: Callable[..., Any]) -> None:
    job = job_factory(payload={"fail_times": 2, "sleep_seconds": 0})

    status = execute_attempt(job_id=str(job.id), attempt=1, hostname="unit@test").status

    job.refresh_from_db()
    assert status == "retrying"
    assert job.next_attempt_at is not None
    assert job.attempts.get().error_type == "RetryableError"


@pytest.mark.django_db
def test_execute_attempt_stale_delivery_runs_nothing(job_factory: Callable[..., Any]) -> None:
    job = job_factory()

    assert execute_attempt(job_id=str(job.id), attempt=3, hostname="unit@test").end is None
    assert not job.attempts.exists()
