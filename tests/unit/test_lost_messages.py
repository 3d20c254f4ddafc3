"""services.lost_message_suspects / lost_messages_republish and the scheduler's LostMessageWatch.

Messages are written to the private broker by hand, in kombu's layout (LPUSH
at publish, the consuming end at index -1, restored messages marked
`redelivered`), so each case sets exactly the order and stamps it needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from jobs import broker, events, services
from jobs.models import Job, JobStatus
from jobs.scheduler import LostMessageWatch
from jobs.services import SuspectReason

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["default"]


def message(
    job: Job, *, stamp: datetime | None, attempt: int = 1, redelivered: bool = False
) -> str:
    headers: dict[str, Any] = {"id": f"{job.id}:{attempt}", "task": "jobs.run_attempt"}
    if stamp is not None:
        headers[broker.PUBLISHED_AT_HEADER] = stamp.isoformat()
    if redelivered:
        headers["redelivered"] = True
    return json.dumps(
        {
            "body": "",
            "headers": headers,
            "properties": {"delivery_info": {"exchange": "", "routing_key": job.queue}},
        }
    )


def published(
    job_factory: Callable[..., Job], broker_redis: redis.Redis, ago: float, **fields: Any
) -> Job:
    """A queued job published `ago` seconds ago, its message pushed (header 0.01 s earlier)."""
    at = timezone.now() - timedelta(seconds=ago)
    job = job_factory(published_at=at, **fields)
    key = broker.queue_keys(job.queue)[broker.priority_steps().index(broker.step_of(job.priority))]
    broker_redis.lpush(key, message(job, stamp=at - timedelta(seconds=0.01)))
    return job


def suspects(**overrides: Any) -> dict:
    options = {"queues": QUEUES, "margin": 0.0, "held_after": 600.0, "limit": 1000, **overrides}
    return services.lost_message_suspects(**options)


def test_job_publish_stamps_the_header_before_and_published_at_after(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    job = job_factory()

    assert services.job_publish(job_id=job.id) is True

    (raw,) = broker_redis.lrange("default", 0, -1)
    facts = broker.message_facts(json.loads(raw))
    job.refresh_from_db()
    assert facts.job_id == str(job.id)
    assert facts.redelivered is False
    assert facts.published_at is not None
    assert job.published_at is not None
    assert facts.published_at <= job.published_at


def test_suspects_a_removed_message_and_not_the_waiting_ones(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    # given three jobs published in order, the oldest one's message removed behind our back
    first, second, third = (published(job_factory, broker_redis, ago) for ago in (30, 20, 10))
    broker_redis.lrem("default", 0, broker_redis.lindex("default", -1))  # type: ignore[arg-type]

    # then only the first is a suspect: published before the oldest message still waiting
    found = suspects()
    assert list(found) == [first.id]
    assert found[first.id].reason == SuspectReason.VANISHED
    assert found[first.id].published_at == first.published_at
    # and a margin larger than the gap to the next message hides it
    assert suspects(margin=15.0) == {}
    assert {second.id, third.id}.isdisjoint(found)


def test_suspects_every_published_job_when_the_lists_are_empty_except_held_ones(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    # given a flushed broker, and one job whose message a consumer holds unacknowledged
    lost = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    held = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    broker_redis.hset(
        "unacked", "tag-1", json.dumps([json.loads(message(held, stamp=None)), "", "default"])
    )
    job_factory(published_at=None)  # in the outbox: its publish is not ours to judge
    job_factory(status=JobStatus.RUNNING, published_at=timezone.now() - timedelta(seconds=5))

    # then the lost one is a suspect and the held one only once held past held_after
    assert {j: s.reason for j, s in suspects().items()} == {lost.id: SuspectReason.VANISHED}
    assert {j: s.reason for j, s in suspects(held_after=1.0).items()} == {
        lost.id: SuspectReason.VANISHED,
        held.id: SuspectReason.HELD,
    }


def test_restored_messages_at_the_consuming_end_are_skipped_and_count_as_waiting(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    # given an older job restored (RPUSH, redelivered) ahead of a newer one, and a lost job
    lost = published(job_factory, broker_redis, 40)
    broker_redis.delete("default")
    restored = job_factory(published_at=timezone.now() - timedelta(seconds=30))
    newer = published(job_factory, broker_redis, 20)
    broker_redis.rpush("default", message(restored, stamp=restored.published_at, redelivered=True))

    # then the boundary is the newer, original message: the lost job is a
    # suspect, the restored one (older than the boundary) is not
    assert list(suspects()) == [lost.id]
    assert newer.id not in suspects()


def test_no_verdict_when_only_restored_messages_are_in_reach(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    # given a lost job and a whole window of restored messages at the consuming end
    job_factory(published_at=timezone.now() - timedelta(seconds=60))
    published(job_factory, broker_redis, 10)
    for _ in range(services.lost_messages.TAIL_WINDOW):
        other = job_factory(published_at=timezone.now() - timedelta(seconds=50))
        broker_redis.rpush("default", message(other, stamp=other.published_at, redelivered=True))

    # then nothing is judged for that sub-queue yet
    assert suspects() == {}


def test_each_priority_step_is_judged_by_its_own_list(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    # given a backlog of priority 9 waiting since long ago, and priority 0 flowing
    waiting = published(job_factory, broker_redis, 60, priority=9)
    published(job_factory, broker_redis, 50, priority=9)
    lost = job_factory(published_at=timezone.now() - timedelta(seconds=30), priority=1)
    published(job_factory, broker_redis, 5, priority=None)

    # then the lost priority-1 job (filed under step 0) is a suspect, the
    # waiting priority-9 one (older than step 0's boundary) is not
    assert list(suspects()) == [lost.id]
    assert waiting.id not in suspects()


def test_watch_republishes_only_after_two_consecutive_checks(
    job_factory: Callable[..., Job], broker_redis: redis.Redis, settings: Any
) -> None:
    settings.JOBS_LOST_MESSAGE_MARGIN = 0.0
    lost = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    counted: list[Job] = []

    def on_lost(job: Job, **_: Any) -> None:
        counted.append(job)

    events.message_lost.connect(on_lost)
    try:
        watch = LostMessageWatch(interval=0)

        # when the first check finds it: nothing happens yet
        assert watch.check(publish_limit=10) == 0
        assert broker_redis.llen("default") == 0

        # when the second check finds it again: it is published once more
        assert watch.check(publish_limit=10) == 1
    finally:
        events.message_lost.disconnect(on_lost)
    lost.refresh_from_db()
    assert lost.status == JobStatus.QUEUED
    assert lost.published_at is not None
    assert broker_redis.llen("default") == 1
    assert [job.id for job in counted] == [lost.id]
    # and the next check finds nothing: its new message waits
    assert watch.check(publish_limit=10) == 0


def test_watch_forgets_a_suspect_that_was_published_again_in_between(
    job_factory: Callable[..., Job], broker_redis: redis.Redis, settings: Any
) -> None:
    settings.JOBS_LOST_MESSAGE_MARGIN = 0.0
    job = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    watch = LostMessageWatch(interval=0)
    assert watch.check(publish_limit=10) == 0

    # when, between two checks, the job was requeued (a new published_at) and
    # its new message taken by a consumer
    Job.objects.filter(id=job.id).update(published_at=timezone.now() - timedelta(seconds=2))

    # then the second sighting differs (another published_at): no republish yet
    assert watch.check(publish_limit=10) == 0
    assert broker_redis.llen("default") == 0


def test_republish_skips_a_row_that_changed_since_it_was_suspected(
    job_factory: Callable[..., Job], broker_redis: redis.Redis
) -> None:
    job = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    (suspect,) = suspects().values()
    Job.objects.filter(id=job.id).update(status=JobStatus.RUNNING)

    assert services.lost_messages_republish(suspects=[suspect], publish_limit=10) == 0
    assert broker_redis.llen("default") == 0


def test_watch_republishes_a_held_job_once_held_for_republish_after_and_not_before(
    job_factory: Callable[..., Job],
    broker_redis: redis.Redis,
    settings: Any,
) -> None:
    # given a job a (dead) consumer took and holds unacknowledged, published long ago
    settings.JOBS_LOST_MESSAGE_MARGIN = 0.0
    held = job_factory(published_at=timezone.now() - timedelta(hours=2))
    broker_redis.hset(
        "unacked", "tag-1", json.dumps([json.loads(message(held, stamp=None)), "", "default"])
    )
    clock = {"now": 1000.0}
    watch = LostMessageWatch(interval=0, held_after=20.0, clock=lambda: clock["now"])

    # when checks see it held for less than held_after: nothing is published,
    # however old its publish is (the time held is what counts)
    for clock["now"] in (1000.0, 1010.0, 1019.9):
        assert watch.check(publish_limit=10) == 0
    assert broker_redis.llen("default") == 0

    # when a check sees it held for held_after: it is published once more
    clock["now"] = 1020.0
    assert watch.check(publish_limit=10) == 1
    held.refresh_from_db()
    assert held.status == JobStatus.QUEUED
    assert broker_redis.llen("default") == 1


def test_watch_times_a_held_job_afresh_after_a_failed_check(
    job_factory: Callable[..., Job],
    broker_redis: redis.Redis,
    settings: Any,
) -> None:
    # given a held job seen held for 15 s, then one check that could not read the broker
    settings.JOBS_LOST_MESSAGE_MARGIN = 0.0
    held = job_factory(published_at=timezone.now() - timedelta(seconds=5))
    broker_redis.hset(
        "unacked", "tag-1", json.dumps([json.loads(message(held, stamp=None)), "", "default"])
    )
    clock = {"now": 0.0}
    watch = LostMessageWatch(interval=0, held_after=20.0, clock=lambda: clock["now"])
    assert watch.check(publish_limit=10) == 0
    clock["now"] = 15.0
    assert watch.check(publish_limit=10) == 0
    watch.reset()  # what a failed check does

    # then 20 s after the first sighting it is not yet republished: sightings must be consecutive
    clock["now"] = 21.0
    assert watch.check(publish_limit=10) == 0
    clock["now"] = 40.9
    assert watch.check(publish_limit=10) == 0
    clock["now"] = 41.0
    assert watch.check(publish_limit=10) == 1
