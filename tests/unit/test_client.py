"""jobs.client (issue 22, items 2 and 3): the Python API, and run_after waiting in the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from jobs import client, services
from jobs.models import Job, JobStatus
from jobs.waiting import WaitingReason

pytestmark = pytest.mark.django_db

FLAKY = {"fail_times": 0}


def test_submit_returns_a_queued_job_with_its_submitter(user: Any) -> None:
    job = client.submit("demo.flaky", FLAKY, priority=3, submitter=user)
    assert job.status == JobStatus.QUEUED
    assert job.created_by == user
    assert job.priority == 3
    assert job.run_after is None


def test_submit_refuses_bad_input_with_the_api_errors() -> None:
    with pytest.raises(client.InvalidSubmission) as info:
        client.submit("demo.flaky", {"fail_times": "many"})
    assert list(info.value.errors) == ["payload.fail_times"]
    with pytest.raises(client.InvalidSubmission):
        client.submit("demo.flaky", FLAKY, run_after=timezone.now().replace(tzinfo=None))
    assert not Job.objects.exists()


def test_a_repeated_key_returns_the_first_job_or_conflicts() -> None:
    first = client.submit("demo.flaky", FLAKY, idempotency_key="k1")
    assert client.submit("demo.flaky", FLAKY, idempotency_key="k1").id == first.id
    assert not client.submit_result("demo.flaky", FLAKY, idempotency_key="k1").created
    with pytest.raises(client.IdempotencyConflict):
        client.submit("demo.flaky", {"fail_times": 2}, idempotency_key="k1")


def test_backpressure_is_queue_full(settings: Any, broker_redis: Any) -> None:
    settings.JOBS_QUEUE_MAX_READY = 1
    client.submit("demo.flaky", FLAKY)
    with pytest.raises(client.QueueFull):
        client.submit("demo.flaky", FLAKY)


def _submit_then_fail() -> None:
    with transaction.atomic():
        client.submit("demo.flaky", FLAKY)
        raise RuntimeError("rolled back")


def test_a_rolled_back_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError):
        _submit_then_fail()
    assert not Job.objects.exists()


def test_get_cancel_requeue_apply_ownership(user: Any) -> None:
    other = User.objects.create_user("other")
    job = client.submit("demo.flaky", FLAKY, submitter=user)
    assert client.get(job.id, user=user).id == job.id
    assert client.get(job.id).id == job.id  # trusted code sees every job
    with pytest.raises(client.JobNotFound):
        client.get(job.id, user=other)
    with pytest.raises(client.JobNotFound):
        client.cancel(job.id, user=other)
    assert client.cancel(job.id, user=user).status == JobStatus.CANCELLED
    with pytest.raises(client.InvalidTransition):
        client.cancel(job.id)
    with pytest.raises(client.InvalidTransition):
        client.requeue(job.id)
    with pytest.raises(client.JobNotFound):
        client.get("not-a-uuid")


def test_run_after_waits_delayed_in_the_database_until_promoted() -> None:
    # given a job submitted to start in 30 s
    job = client.submit("demo.flaky", FLAKY, run_after=timedelta(seconds=30))

    # then it is delayed, unpublished, with its reason and due time
    job.refresh_from_db()
    assert job.status == JobStatus.DELAYED
    assert job.published_at is None
    assert job.waiting_reason == WaitingReason.RUN_AFTER
    assert job.next_attempt_at == job.run_after

    # and the scheduler leaves it until it is due, then queues and publishes it
    assert services.retries_promote_due(now=timezone.now()) == 0
    assert services.retries_promote_due(now=job.run_after) == 1
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.waiting_reason == ""
    assert job.run_after is not None


def test_a_past_run_after_starts_at_once() -> None:
    job = client.submit("demo.flaky", FLAKY, run_after=timezone.now() - timedelta(seconds=5))
    assert job.status == JobStatus.QUEUED


def test_a_delayed_job_can_be_cancelled() -> None:
    job = client.submit("demo.flaky", FLAKY, run_after=timedelta(hours=1))
    assert client.cancel(job.id).status == JobStatus.CANCELLED
    assert services.retries_promote_due(now=timezone.now() + timedelta(hours=2)) == 0


def test_the_http_api_takes_run_after(api_client: Any) -> None:
    due = (timezone.now() + timedelta(minutes=5)).isoformat()
    response = api_client.post(
        "/api/jobs/", {"kind": "demo.flaky", "payload": FLAKY, "run_after": due}, format="json"
    )
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "delayed"
    detail = api_client.get(response["Location"]).json()
    assert detail["waiting"]["reason"] == "run_after"
    assert detail["run_after"] is not None
