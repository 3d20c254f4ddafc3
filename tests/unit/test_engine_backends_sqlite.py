"""jobs.engine.backends.sqlite: the fast path writes what the general path writes.

The unit tests run on SQLite, so here the fast path's start and finish are
the two-statement SQLite form (UPDATE ... RETURNING in an IMMEDIATE
transaction). Each test checks the rows and the attempt_finished event as
the general path would leave them, and that the fast path really ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from jobs import budget, engine, events, services
from jobs.engine.backends import SqliteBackend
from jobs.kinds import policy_for
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.services import AttemptReport

pytestmark = pytest.mark.django_db

HOST = "worker-1@unit-box"


@pytest.fixture
def fast_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the SQLite fast path's writes that found their row."""
    calls = {"start": 0, "finish": 0}
    backend = engine.current().backend
    start, finish = backend.start_statement, backend.finish_statement  # type: ignore[attr-defined]

    def counted_start(params: dict[str, Any]) -> Any:
        found = start(params)
        calls["start"] += found is not None
        return found

    def counted_finish(params: dict[str, Any]) -> Any:
        found = finish(params)
        calls["finish"] += found is not None
        return found

    monkeypatch.setattr(backend, "start_statement", counted_start)
    monkeypatch.setattr(backend, "finish_statement", counted_finish)
    return calls


@pytest.fixture
def finished_events() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def receiver(job: Job, attempt: Any, decision: Any, **_: Any) -> None:
        seen.append({"job": job, "attempt": attempt, "decision": decision})

    events.attempt_finished.connect(receiver, dispatch_uid="test_attempt_sql_sqlite")
    try:
        yield seen
    finally:
        events.attempt_finished.disconnect(dispatch_uid="test_attempt_sql_sqlite")


def _start(job: Job) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=1, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )


def test_sqlite_has_the_fast_path() -> None:
    assert connection.vendor == "sqlite"
    assert isinstance(engine.current().backend, SqliteBackend)


def test_start_sets_running_with_the_kinds_lease_and_inserts_the_attempt(
    job_factory: Callable[..., Job], fast_calls: dict[str, int]
) -> None:
    job = job_factory()
    before = timezone.now()

    started = _start(job)

    assert started is not None
    assert started.attempt == 1
    assert fast_calls["start"] == 1
    job.refresh_from_db()
    assert (job.status, job.attempts_made, job.deliveries) == (JobStatus.RUNNING, 1, 1)
    lease = timedelta(seconds=policy_for(job.kind).hard_time_limit + settings.JOBS_LEASE_GRACE)
    assert job.started_at is not None
    assert job.lease_expires_at is not None
    assert before + lease <= job.lease_expires_at <= timezone.now() + lease
    attempt = job.attempts.get()
    assert (attempt.number, attempt.worker_hostname, attempt.rss_before_bytes) == (1, HOST, 1000)
    assert attempt.finished_at is None
    assert attempt.outcome == ""


def test_start_of_a_job_not_queued_writes_nothing_on_the_fast_path(
    job_factory: Callable[..., Job], fast_calls: dict[str, int]
) -> None:
    job = job_factory(status=JobStatus.CANCELLED)

    assert _start(job) is None

    assert fast_calls["start"] == 0
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.attempts_made == 0
    assert not job.attempts.exists()


def test_a_retry_counted_in_its_window_starts_on_the_fast_path(
    job_factory: Callable[..., Job],
    attempt_factory: Callable[..., Any],
    fast_calls: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a job whose first attempt failed 0.2 s ago with a 0.1 s retry delay
    # (due in this budget window: the decision counted it here)
    firsts: list[str] = []
    monkeypatch.setattr(budget, "record_first", lambda kind, **_: firsts.append(kind))
    ended = timezone.now() - timedelta(seconds=0.2)
    job = job_factory(attempts_made=1)
    attempt_factory(
        job, number=1, outcome=AttemptOutcome.ERROR, finished_at=ended, retry_delay_seconds=0.1
    )

    # when its retry starts
    with django_capture_on_commit_callbacks(execute=True):
        started = services.attempt_start(
            job_id=job.id, attempt=2, hostname=HOST, pid=os.getpid(), rss_bytes=1000
        )

    # then it ran on the one-statement start, as the general path would leave it,
    # and is not counted as a first attempt in the budget's denominator
    assert started is not None
    assert started.attempt == 2
    assert fast_calls["start"] == 1
    job.refresh_from_db()
    assert (job.status, job.attempts_made, job.deliveries) == (JobStatus.RUNNING, 2, 1)
    assert job.attempts.get(number=2).finished_at is None
    assert firsts == []


def test_a_retry_due_in_an_earlier_window_takes_the_general_path(
    job_factory: Callable[..., Job],
    attempt_factory: Callable[..., Any],
    fast_calls: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a retry due 30 s ago with 10 s budget windows (it waited in the queue),
    # and a budget that grants what it is asked
    monkeypatch.setattr(settings, "JOBS_RETRY_BUDGET_WINDOW", 10.0)
    asked: list[float] = []

    def admit(kind: str, *, due: float, now: float, **_: Any) -> None:
        asked.append(due)

    monkeypatch.setattr(budget, "admit", admit)
    job = job_factory(attempts_made=1)
    first = attempt_factory(
        job,
        number=1,
        outcome=AttemptOutcome.ERROR,
        finished_at=timezone.now() - timedelta(seconds=31),
        retry_delay_seconds=1.0,
    )

    # when it starts
    started = services.attempt_start(
        job_id=job.id, attempt=2, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )

    # then the one-statement start matched nothing and the general path asked the
    # budget about its due time before starting it
    assert started is not None
    assert fast_calls["start"] == 0
    assert first.finished_at is not None
    assert asked == [pytest.approx(first.finished_at.timestamp() + 1.0)]
    job.refresh_from_db()
    assert (job.status, job.attempts_made) == (JobStatus.RUNNING, 2)


def test_finish_success_writes_result_and_attempt_and_sends_aware_times(
    job_factory: Callable[..., Job],
    fast_calls: dict[str, int],
    finished_events: list[dict[str, Any]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    job = job_factory()
    started = _start(job)

    with django_capture_on_commit_callbacks(execute=True):
        end = services.attempt_finish(
            job_id=job.id,
            attempt=1,
            report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1}),
            rss_bytes=2000,
            started=started,
        )

    assert end.status == JobStatus.SUCCEEDED
    assert fast_calls["finish"] == 1
    job.refresh_from_db()
    assert (job.status, job.result, job.lease_expires_at) == (JobStatus.SUCCEEDED, {"n": 1}, None)
    assert job.finished_at is not None
    attempt = job.attempts.get()
    assert (attempt.outcome, attempt.rss_after_bytes) == (AttemptOutcome.SUCCEEDED, 2000)
    (event,) = finished_events
    sent = event["attempt"]
    assert timezone.is_aware(sent.started_at)
    assert timezone.is_aware(sent.finished_at)
    assert sent.started_at == attempt.started_at
    assert (sent.finished_at - sent.started_at).total_seconds() >= 0
    assert (sent.id, sent.worker_hostname, sent.rss_before_bytes) == (attempt.id, HOST, 1000)


def test_finish_retryable_failure_goes_retrying_with_its_delay(
    job_factory: Callable[..., Job], fast_calls: dict[str, int]
) -> None:
    job = job_factory()
    started = _start(job)

    end = services.attempt_finish(
        job_id=job.id,
        attempt=1,
        report=AttemptReport(
            outcome=AttemptOutcome.ERROR,
            error_type="RetryableError",
            error_message="boom",
            retryable=True,
        ),
        rss_bytes=2000,
        started=started,
    )

    assert end.status == JobStatus.RETRYING
    assert fast_calls["finish"] == 1
    job.refresh_from_db()
    attempt = job.attempts.get()
    assert job.status == JobStatus.RETRYING
    assert job.last_error == "RetryableError: boom"
    assert attempt.retry_delay_seconds is not None
    assert attempt.retry_delay_seconds > 0
    assert job.next_attempt_at is not None
    assert attempt.finished_at is not None
    expected = attempt.finished_at + timedelta(seconds=attempt.retry_delay_seconds)
    assert abs((job.next_attempt_at - expected).total_seconds()) < 0.001
    assert (attempt.outcome, attempt.error_type) == (AttemptOutcome.ERROR, "RetryableError")


def test_finish_permanent_error_goes_dead(
    job_factory: Callable[..., Job], fast_calls: dict[str, int]
) -> None:
    job = job_factory()
    started = _start(job)

    services.attempt_finish(
        job_id=job.id,
        attempt=1,
        report=AttemptReport(
            outcome=AttemptOutcome.ERROR,
            error_type="PermanentError",
            error_message="no",
            retryable=False,
        ),
        rss_bytes=None,
        started=started,
    )

    assert fast_calls["finish"] == 1
    job.refresh_from_db()
    assert (job.status, job.dead_reason) == (JobStatus.DEAD, DeadReason.ERROR)
    assert job.finished_at is not None
    assert job.result is None


def test_finish_after_a_cancel_leaves_the_job_cancelled(
    job_factory: Callable[..., Job], fast_calls: dict[str, int]
) -> None:
    job = job_factory()
    started = _start(job)
    Job.objects.filter(id=job.id).update(status=JobStatus.CANCELLED)

    services.attempt_finish(
        job_id=job.id,
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1}),
        rss_bytes=2000,
        started=started,
    )

    # the fast path matched nothing; the general path recorded the attempt only
    assert fast_calls["finish"] == 0
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert job.result is None
