"""services.job_submit and job_publish: validation, idempotency, backpressure, the outbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from devstack.services import free_port
from jobs import services
from jobs.broker import queue_keys
from jobs.errors import IdempotencyConflict, InvalidSubmission, QueueFull
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db

FLAKY = {"fail_times": 1}


def _submit(**kwargs: Any) -> services.SubmitResult:
    return services.job_submit(**{"kind": "demo.flaky", "payload": FLAKY, **kwargs})


# --- validation --------------------------------------------------------------


def test_job_submit_unknown_kind_names_kind_and_writes_nothing() -> None:
    with pytest.raises(InvalidSubmission) as info:
        _submit(kind="no.such.kind")

    assert list(info.value.errors) == ["kind"]
    assert "no.such.kind" in info.value.errors["kind"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("kind", "payload", "field"),
    [
        ("demo.flaky", {"fail_times": "many"}, "payload.fail_times"),
        ("demo.flaky", {"fail_times": -1}, "payload.fail_times"),
        ("demo.flaky", {"sleep_seconds": 10_000}, "payload.sleep_seconds"),
        ("demo.flaky", "not an object", "payload"),
        ("demo.flaky", [1, 2], "payload"),
        ("webhook.deliver", {}, "payload.url"),
        ("webhook.deliver", {"url": "ftp://x"}, "payload.url"),
        ("webhook.deliver", {"url": "http://127.0.0.1/x", "headers": {"a": None}}, None),
    ],
)
def test_job_submit_bad_payload_names_the_field(kind: str, payload: Any, field: str | None) -> None:
    with pytest.raises(InvalidSubmission) as info:
        services.job_submit(kind=kind, payload=payload)

    fields = list(info.value.errors)
    if field is None:  # nested: whatever the path, it starts at payload.headers
        assert all(f.startswith("payload.headers") for f in fields), fields
    else:
        assert fields == [field]
    assert all(info.value.errors[f] for f in fields)
    assert not Job.objects.exists()


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("payload", "key", "field", "words"),
    [
        (
            {"url": "http://127.0.0.1/x", "body": {"t": "\ud83d"}},
            None,
            "payload.body.t",
            "surrogate",
        ),
        (
            {"url": "http://127.0.0.1/x", "body": {"\udc00": 1}},
            None,
            "payload.body.\\udc00",
            "surrogate",
        ),
        ({"url": "http://127.0.0.1/x", "body": [float("nan")]}, None, "payload.body.0", "finite"),
        (
            {"url": "http://127.0.0.1/x", "body": _nested(5_000)},
            None,
            "payload.body.0",
            "levels deep",
        ),
        ({"url": "http://127.0.0.1/x"}, "k\ud800", "idempotency_key", "surrogate"),
        ({"url": "http://127.0.0.1/x"}, "k\x00", "idempotency_key", "NUL"),
    ],
    ids=["surrogate-value", "surrogate-key", "nan", "5000-deep", "surrogate-in-key", "nul-in-key"],
)
def test_job_submit_unstorable_input_is_invalid_not_a_crash(
    payload: Any, key: str | None, field: str, words: str
) -> None:
    # Callers other than the API (commands, the admin, code) get the same guard.
    with pytest.raises(InvalidSubmission) as info:
        services.job_submit(kind="webhook.deliver", payload=payload, idempotency_key=key)

    assert list(info.value.errors) == [field]
    assert words in info.value.errors[field][0]
    assert not Job.objects.exists()


def test_job_submit_unknown_queue_names_queue() -> None:
    with pytest.raises(InvalidSubmission) as info:
        _submit(queue="nope")

    assert list(info.value.errors) == ["queue"]
    assert not Job.objects.exists()


def test_job_submit_configured_queue_accepted(settings: Any) -> None:
    settings.JOBS_QUEUES = ["default", "reports"]

    result = _submit(queue="reports")

    assert result.job.queue == "reports"


# --- the row -----------------------------------------------------------------


def test_job_submit_records_queued_row_with_normalised_payload(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"max_attempts": 2}}

    result = _submit()

    job = Job.objects.get()
    assert result.created is True
    assert result.job.pk == job.pk
    assert job.status == JobStatus.QUEUED
    assert job.payload == {"fail_times": 1, "sleep_seconds": 0.0}
    assert job.max_attempts == 2
    assert job.attempts_made == 0
    assert job.enqueued_at is not None
    assert job.published_at is None  # published on commit, not before
    assert job.idempotency_key is None
    assert len(job.request_fingerprint) == 64


def test_job_submit_records_authenticated_user(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user(username="u", password="p")

    assert _submit(user=user).job.created_by == user


def test_request_fingerprint_ignores_key_order() -> None:
    a = services.request_fingerprint(kind="k", queue="q", payload={"a": 1, "b": [1, 2]})
    b = services.request_fingerprint(kind="k", queue="q", payload={"b": [1, 2], "a": 1})

    assert a == b
    assert a != services.request_fingerprint(kind="k", queue="q", payload={"a": 2, "b": [1, 2]})


# --- idempotency -------------------------------------------------------------


def test_job_submit_same_key_same_body_returns_existing_job() -> None:
    first = _submit(idempotency_key="order-1")

    again = _submit(idempotency_key="order-1")

    assert again.created is False
    assert again.job.pk == first.job.pk
    assert Job.objects.count() == 1


def test_job_submit_same_key_reordered_equal_body_is_same_job() -> None:
    first = _submit(idempotency_key="order-1", payload={"fail_times": 1, "sleep_seconds": 0.0})

    again = _submit(idempotency_key="order-1", payload={"sleep_seconds": 0, "fail_times": 1})

    assert (again.created, again.job.pk) == (False, first.job.pk)


@pytest.mark.parametrize(
    "change", [{"payload": {"fail_times": 2}}, {"queue": "reports"}], ids=["payload", "queue"]
)
def test_job_submit_same_key_different_body_conflicts(settings: Any, change: dict) -> None:
    settings.JOBS_QUEUES = ["default", "reports"]
    _submit(idempotency_key="order-1")

    with pytest.raises(IdempotencyConflict) as info:
        _submit(idempotency_key="order-1", **change)

    assert info.value.field == "idempotency_key"
    assert Job.objects.count() == 1


def test_job_submit_key_is_scoped_per_kind() -> None:
    _submit(idempotency_key="shared")

    other = services.job_submit(
        kind="webhook.deliver", payload={"url": "http://127.0.0.1/x"}, idempotency_key="shared"
    )

    assert other.created is True
    assert Job.objects.count() == 2


def test_job_submit_without_key_always_creates() -> None:
    _submit()
    _submit()

    assert Job.objects.count() == 2


# --- backpressure --------------------------------------------------------------


def test_job_submit_full_queue_raises_queue_full_and_writes_nothing(
    settings: Any, broker_redis: redis.Redis
) -> None:
    # given a queue limit of 3 and 3 ready messages, one in a priority sub-queue

    settings.JOBS_QUEUE_MAX_READY = 3
    settings.JOBS_BACKPRESSURE_RETRY_AFTER = 7
    broker_redis.rpush(queue_keys("default")[0], "a", "b")
    broker_redis.rpush(queue_keys("default")[2], "c")

    # when one more job is submitted
    with pytest.raises(QueueFull) as info:
        _submit()

    # then it is refused with the configured Retry-After and nothing is written
    assert info.value.retry_after == 7
    assert info.value.field == "queue"
    assert not Job.objects.exists()


def test_job_submit_below_limit_accepted(settings: Any, broker_redis: redis.Redis) -> None:
    settings.JOBS_QUEUE_MAX_READY = 3
    broker_redis.rpush("default", "a", "b")

    assert _submit().created is True


def test_job_submit_unpublished_rows_count_toward_limit(
    settings: Any, broker_redis: redis.Redis
) -> None:
    # given a limit of 2 and two submitted jobs whose publish has not happened
    settings.JOBS_QUEUE_MAX_READY = 2
    _submit()
    _submit()

    # then the third is refused
    with pytest.raises(QueueFull):
        _submit()
    assert Job.objects.count() == 2


def test_job_submit_idempotent_repeat_allowed_when_queue_full(
    settings: Any, broker_redis: redis.Redis
) -> None:
    # given a job with a key, then a full queue
    first = _submit(idempotency_key="k")
    settings.JOBS_QUEUE_MAX_READY = 1

    # then repeating the same request still returns the existing job
    assert _submit(idempotency_key="k").job.pk == first.job.pk


def test_job_submit_broker_down_still_accepts(settings: Any) -> None:

    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"

    assert _submit().created is True


# --- publish on commit ---------------------------------------------------------


def _messages(client: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]


def test_job_submit_publishes_on_commit(
    broker_redis: redis.Redis, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    # given a submission whose transaction commits
    with django_capture_on_commit_callbacks(execute=True):
        result = _submit()

    # then one message for attempt 1 is on the queue and published_at is set
    job = Job.objects.get(pk=result.job.pk)
    assert job.published_at is not None
    [message] = _messages(broker_redis)
    headers = message["headers"]
    assert headers["task"] == "jobs.run_attempt"
    assert headers["id"] == f"{job.id}:1"
    assert headers["argsrepr"] == repr([str(job.id), 1])
    # The kind's limits travel with the message; no ETA or countdown is ever set.
    assert headers["timelimit"] == [45, 30]
    assert headers["eta"] is None


def test_job_submit_without_commit_publishes_nothing(broker_redis: redis.Redis) -> None:
    _submit()

    assert broker_redis.llen("default") == 0


def test_job_publish_next_attempt_number(
    broker_redis: redis.Redis, job_factory: Callable[..., Any]
) -> None:
    job = job_factory(attempts_made=2)

    assert services.job_publish(job_id=job.id) is True

    [message] = _messages(broker_redis)
    assert message["headers"]["id"] == f"{job.id}:3"
    job.refresh_from_db()
    assert job.published_at is not None


@pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.RETRYING, JobStatus.SUCCEEDED])
def test_job_publish_only_queued_jobs(
    broker_redis: redis.Redis, job_factory: Callable[..., Any], status: str
) -> None:
    job = job_factory(status=status)

    assert services.job_publish(job_id=job.id) is False
    assert broker_redis.llen("default") == 0
