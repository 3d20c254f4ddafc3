"""Why a job waits (jobs.waiting): the vocabulary, its details, and the transitions that clear it."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs import services, waiting
from jobs.budget import Reservation
from jobs.decisions import Action, decide
from jobs.models import AttemptOutcome, Job, JobStatus
from jobs.policy import Policy
from jobs.services.sweeps import retries_promote_due
from jobs.waiting import Waiting, WaitingReason

POLICY = Policy(max_attempts=6, backoff_base=1, backoff_cap=8, backoff_floor=0.5)
HELD = Waiting(WaitingReason.RETRY_BUDGET, "retry delayed 74 s by the retry budget of demo.flaky")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0 s"),
        (0.74, "0.7 s"),
        (8.25, "8.2 s"),
        (74.2, "74 s"),
        (599, "599 s"),
        (725, "12 min 05 s"),
        (-1, "0.0 s"),
    ],
)
def test_seconds_text_reads_as_people_say_it(value: float, text: str) -> None:
    assert waiting.seconds_text(value) == text


def test_for_retry_names_the_backoff_the_server_or_the_budget() -> None:
    assert waiting.for_retry(kind="webhook.deliver", delay=1.4) == Waiting(
        WaitingReason.BACKOFF, "retry after a backoff of 1.4 s"
    )
    assert waiting.for_retry(kind="webhook.deliver", delay=30, retry_after=30) == Waiting(
        WaitingReason.RETRY_AFTER, "retry after 30 s, as the server asked (Retry-After)"
    )
    # a Retry-After shorter than the backoff asked for nothing: the backoff is the reason
    assert waiting.for_retry(kind="k", delay=3.0, retry_after=1.0).reason == WaitingReason.BACKOFF
    assert waiting.for_retry(kind="webhook.deliver", delay=82.2, budget_added=74) == Waiting(
        WaitingReason.RETRY_BUDGET,
        "retry delayed 74 s by the retry budget of webhook.deliver (after a backoff of 8.2 s)",
    )
    assert waiting.for_retry(
        kind="webhook.deliver", delay=90, retry_after=30, budget_added=60
    ).detail == (
        "retry delayed 60 s by the retry budget of webhook.deliver "
        "(as the server asked (Retry-After 30 s))"
    )


def test_held_by_budget_says_the_wait_and_where_it_was_decided() -> None:
    held = waiting.held_by_budget(kind="webhook.deliver", held=74.4)
    assert held.reason == WaitingReason.RETRY_BUDGET
    assert held.detail.startswith("retry delayed 74 s by the retry budget of webhook.deliver")
    assert "held at its start" in held.detail


def test_details_fit_the_column_whatever_the_kind_name() -> None:
    long_kind = "k" * 500
    for why in (
        waiting.for_retry(kind=long_kind, delay=90, budget_added=60),
        waiting.held_by_budget(kind=long_kind, held=60),
    ):
        assert len(why.detail) == waiting.DETAIL_MAX_CHARS
    assert Job._meta.get_field("waiting_detail").max_length == waiting.DETAIL_MAX_CHARS


def test_fields_and_apply_set_or_clear_the_columns() -> None:
    assert waiting.fields(HELD) == {"waiting_reason": "retry_budget", "waiting_detail": HELD.detail}
    assert waiting.fields(None) == {"waiting_reason": "", "waiting_detail": ""}
    job = Job(waiting_reason="backoff", waiting_detail="x")
    assert waiting.apply(job, None) == ["waiting_reason", "waiting_detail"]
    assert (job.waiting_reason, job.waiting_detail) == ("", "")


def test_every_reason_has_a_short_label_and_fits_its_column() -> None:
    longest = max(len(reason.value) for reason in WaitingReason)
    assert longest <= (Job._meta.get_field("waiting_reason").max_length or 0)
    assert all(reason.label for reason in WaitingReason)


# --- the decision says why ------------------------------------------------------------


def _decide(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "policy": POLICY,
        "outcome": AttemptOutcome.ERROR,
        "retryable": True,
        "attempts_made": 4,
        "max_attempts": 6,
        "kind": "webhook.deliver",
    }
    return decide(**{**args, **overrides})


def test_decide_gives_a_retry_its_waiting_reason() -> None:
    plain = _decide()
    assert plain.waiting.reason == WaitingReason.BACKOFF
    assert (
        plain.waiting.detail
        == f"retry after a backoff of {waiting.seconds_text(plain.delay_seconds)}"
    )

    def deferring(delay: float) -> Reservation:
        return Reservation(granted=True, due=1000 + delay + 74, asked=1000 + delay, deferred=True)

    deferred = _decide(budget=deferring)
    assert deferred.waiting.reason == WaitingReason.RETRY_BUDGET
    assert deferred.waiting.detail.startswith(
        "retry delayed 74 s by the retry budget of webhook.deliver (after a backoff of "
    )
    fallback = _decide(budget=lambda d: Reservation(granted=True, due=d, asked=d, fallback=True))
    assert fallback.waiting.reason == WaitingReason.BACKOFF


def test_decide_gives_no_waiting_reason_to_a_requeue_or_a_dead_job() -> None:
    assert _decide(attempts_made=6).waiting is None
    assert _decide(budget=lambda d: Reservation(granted=False, due=d, asked=d)).waiting is None
    lost = _decide(outcome=AttemptOutcome.WORKER_LOST, worker_losses=1)
    assert (lost.action, lost.waiting) == (Action.REQUEUE, None)


# --- every transition that moves a job on clears it --------------------------------------


@pytest.fixture
def held_job(job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]) -> Job:
    """A demo.flaky job retrying after attempt 1, held by the retry budget, due now."""
    now = timezone.now()
    job = job_factory(
        status=JobStatus.RETRYING,
        attempts_made=1,
        next_attempt_at=now - timedelta(milliseconds=1),
        **HELD.fields(),
    )
    attempt_factory(
        job, number=1, outcome=AttemptOutcome.ERROR, finished_at=now - timedelta(seconds=1)
    )
    return job


def _cleared(job: Job) -> bool:
    job.refresh_from_db()
    return (job.waiting_reason, job.waiting_detail) == ("", "")


def test_waiting_cleared_when_the_scheduler_queues_the_job_again(
    held_job: Job, django_capture_on_commit_callbacks: Any
) -> None:

    with django_capture_on_commit_callbacks(execute=True):
        assert retries_promote_due() == 1
    assert _cleared(held_job)
    assert held_job.status == JobStatus.QUEUED


@pytest.mark.parametrize("action", ["job_retry_now", "job_cancel"])
def test_waiting_cleared_by_retry_now_and_cancel(
    held_job: Job, action: str, django_capture_on_commit_callbacks: Any
) -> None:

    with django_capture_on_commit_callbacks(execute=True):
        getattr(services, action)(job_id=held_job.id)
    assert _cleared(held_job)


@pytest.mark.parametrize("resume", [False, True], ids=["fast-path", "general-path"])
def test_waiting_cleared_when_an_attempt_starts(
    job_factory: Callable[..., Any], resume: bool, django_capture_on_commit_callbacks: Any
) -> None:

    # given a queued job still carrying a reason (one a later issue may give a queued job)
    job = job_factory(**HELD.fields())
    # when its first attempt starts (resume=True takes the general path: no one-statement start)
    with django_capture_on_commit_callbacks(execute=True):
        started = services.attempt_start(
            job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(), rss_bytes=None, resume=resume
        )
    # then it runs, no longer waiting
    assert started is not None
    assert _cleared(job)
    assert job.status == JobStatus.RUNNING
