"""jobs.outbox_claim and the sweeps that use it: a row is claimed before it is published."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db.models.functions import Now
from django.utils import timezone

from jobs import outbox_claim, services
from jobs.models import Job, JobStatus


def _published_ids(client: redis.Redis) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange("default", 0, -1)]


@pytest.fixture
def unpublished(job_factory: Callable[..., Any]) -> Callable[[int], list[Job]]:
    """`n` queued rows never published, queued a minute ago (past the sweep's wait)."""

    def make(n: int) -> list[Job]:
        jobs = [job_factory() for _ in range(n)]
        Job.objects.filter(id__in=[j.id for j in jobs]).update(
            published_at=None, enqueued_at=timezone.now() - timedelta(minutes=1)
        )
        return jobs

    return make


def test_claim_unpublished_gives_each_row_to_one_claimer(
    unpublished: Callable[[int], list[Job]],
) -> None:
    # given three unpublished rows
    jobs = unpublished(3)
    before = timezone.now()

    # when a claims two and b then claims what is left
    a = outbox_claim.claim_unpublished(claimer="a", enqueued_before=before, limit=2)
    b = outbox_claim.claim_unpublished(claimer="b", enqueued_before=before, limit=10)

    # then no row went to both, and b got only the third
    assert len(a) == 2
    assert len(b) == 1
    assert set(a) | set(b) == {j.id for j in jobs}
    assert outbox_claim.claim_unpublished(claimer="c", enqueued_before=before, limit=10) == []
    row = Job.objects.get(id=b[0])
    assert row.publish_claimed_by == "b"
    assert row.publish_claimed_until is not None
    assert row.publish_claimed_until > timezone.now()


def test_claims_are_released_or_run_out(unpublished: Callable[[int], list[Job]]) -> None:
    jobs = unpublished(2)
    before = timezone.now()
    claimed = outbox_claim.claim_unpublished(claimer="a", enqueued_before=before, limit=10)
    assert len(claimed) == 2

    # a releases one (another claimer's release does nothing); the other's claim runs out
    assert outbox_claim.release_unpublished(job_ids=[jobs[0].id], claimer="b") == 0
    assert outbox_claim.release_unpublished(job_ids=[jobs[0].id], claimer="a") == 1
    Job.objects.filter(id=jobs[1].id).update(publish_claimed_until=Now() - timedelta(seconds=1))

    # then both can be claimed again
    again = outbox_claim.claim_unpublished(claimer="b", enqueued_before=before, limit=10)
    assert set(again) == {j.id for j in jobs}


def test_outbox_sweep_skips_rows_another_scheduler_claimed(
    broker_redis: redis.Redis, unpublished: Callable[[int], list[Job]]
) -> None:
    # given three unpublished rows, one claimed by another scheduler that is publishing it
    jobs = unpublished(3)
    (theirs,) = outbox_claim.claim_unpublished(
        claimer="other", enqueued_before=timezone.now(), limit=1
    )

    # when this scheduler sweeps twice
    first = services.outbox_sweep(limit=10, claimer="me")
    second = services.outbox_sweep(limit=10, claimer="me")

    # then it published the two others once each, and not the claimed one
    assert (first, second) == (2, 0)
    assert sorted(_published_ids(broker_redis)) == sorted(
        f"{j.id}:1" for j in jobs if j.id != theirs
    )
    assert Job.objects.get(id=theirs).published_at is None


def test_outbox_sweep_releases_what_the_broker_refused(
    broker_redis: redis.Redis,
    unpublished: Callable[[int], list[Job]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a broker that refuses every publish
    jobs = unpublished(2)
    monkeypatch.setattr("jobs.services.publishing._send", lambda job, stamped_at: False)

    # when the sweep claims and fails to publish them
    assert services.outbox_sweep(limit=10, claimer="me") == 0

    # then their claims are released: the next sweep (any scheduler's) takes them at once
    assert not Job.objects.filter(
        id__in=[j.id for j in jobs], publish_claimed_until__isnull=False
    ).exists()


def test_retries_promote_due_claims_the_rows_it_publishes(
    broker_redis: redis.Redis,
    job_factory: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a retry that is due
    job = job_factory(status=JobStatus.RETRYING, attempts_made=1)
    Job.objects.filter(id=job.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))

    # when the leader promotes it
    with django_capture_on_commit_callbacks(execute=True):
        assert services.retries_promote_due(limit=10, claimer="me") == 1

    # then it was claimed in the same update and published once
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.published_at is not None
    assert job.publish_claimed_by == "me"
    assert _published_ids(broker_redis) == [f"{job.id}:2"]
