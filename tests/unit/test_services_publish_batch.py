"""services.jobs_publish: the scheduler's batched publish (one read, a publish each, one stamp)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from jobs import services
from jobs.models import Job, JobStatus
from jobs.services import publishing
from jobs.tasks import run_attempt_task


def _messages(client: redis.Redis, queue: str = "default") -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]


def test_jobs_publish_reads_once_publishes_in_order_and_stamps_in_one_update(
    broker_redis: redis.Redis,
    job_factory: Callable[..., Any],
    django_assert_num_queries: Callable[..., Any],
) -> None:
    # given three queued jobs (one waiting for its third attempt) and a running one
    queued = [job_factory(), job_factory(attempts_made=2), job_factory()]
    running = job_factory(status=JobStatus.RUNNING, attempts_made=1)
    order = [queued[2].id, running.id, queued[0].id, queued[1].id]

    # when the scheduler publishes them as one batch
    with django_assert_num_queries(2):  # the read, then the stamp
        published = services.jobs_publish(job_ids=order)

    # then each queued job got its next attempt's message, in the order asked,
    # the running one none, and every published row is stamped
    assert published == 3
    assert [m["headers"]["id"] for m in reversed(_messages(broker_redis))] == [
        f"{queued[2].id}:1",
        f"{queued[0].id}:1",
        f"{queued[1].id}:3",
    ]
    for job in queued:
        job.refresh_from_db()
        assert job.published_at is not None
    running.refresh_from_db()
    assert running.published_at is None


def test_jobs_publish_stops_at_a_refused_publish_and_leaves_the_rest_to_the_sweep(
    broker_redis: redis.Redis, job_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a broker that takes one message, then refuses

    jobs = [job_factory() for _ in range(3)]
    sent: list[str] = []

    def apply_async(**options: Any) -> None:
        if sent:
            raise ConnectionError("broker gone")
        sent.append(options["task_id"])

    monkeypatch.setattr(run_attempt_task, "apply_async", apply_async)

    # when the batch is published
    published = services.jobs_publish(job_ids=[job.id for job in jobs])

    # then only the first went out and is stamped; the others are still unpublished
    # (the outbox sweep's) and were not even tried after the refusal
    assert published == 1
    assert sent == [f"{jobs[0].id}:1"]
    stamped = [Job.objects.get(id=job.id).published_at is not None for job in jobs]
    assert stamped == [True, False, False]


def test_jobs_publish_skips_a_job_it_cannot_build_and_stamps_what_it_published(
    broker_redis: redis.Redis, job_factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:

    # given a batch whose second job's kind is no longer registered
    jobs = [job_factory(), job_factory(kind="removed.kind"), job_factory()]

    # when it is published
    published = services.jobs_publish(job_ids=[str(job.id) for job in jobs])

    # then the other two went out and are stamped; the orphan waits, unstamped
    assert published == 2
    stamped = [Job.objects.get(id=job.id).published_at is not None for job in jobs]
    assert stamped == [True, False, True]
    assert len(_messages(broker_redis)) == 2

    # and when something unexpected raises midway through another batch
    more = [job_factory(), job_factory()]
    send = publishing._send

    def failing(job: Job, **kwargs: Any) -> bool:
        if job.id == more[1].id:
            raise RuntimeError("unexpected")
        return send(job, **kwargs)

    monkeypatch.setattr(publishing, "_send", failing)
    with pytest.raises(RuntimeError):
        services.jobs_publish(job_ids=[job.id for job in more])
    # then the job published before it is stamped all the same (else every sweep
    # would publish it again)
    assert Job.objects.get(id=more[0].id).published_at is not None
    assert Job.objects.get(id=more[1].id).published_at is None
