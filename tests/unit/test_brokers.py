"""jobs.brokers: the adapter picked from the URL, the port's helpers, the counted
vanished-message rule (RabbitMQ), dead letters, and the broker system checks."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs import brokers, checks, services
from jobs.brokers import DeadLetter, RabbitMQBroker, RedisBroker, broker_for, job_of
from jobs.brokers import kind_of as broker_kind
from jobs.models import Job, JobStatus
from jobs.scheduler import BrokerRestartWatch, dead_letters_drain


class FakeBroker:
    """A broker that cannot be peeked (as RabbitMQ), with fixed ready counts."""

    name = "fake"
    can_peek = False
    knows_reserved = False

    def __init__(self, ready: dict[str, int], letters: list[DeadLetter] | None = None) -> None:
        self.ready = ready
        self.letters = letters or []

    def ready_counts(self, queues: list[str]) -> dict[str, int]:
        return {q: self.ready.get(q, 0) for q in queues}

    def depth_counts(self, queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        return self.ready_counts(queues), dict.fromkeys(queues, 0)

    def server_run_id(self) -> str:
        return ""

    def read_tails(self, queues: list[str], *, window: int) -> Any:
        raise NotImplementedError

    def declare(self, queues: list[str]) -> None:
        pass

    def dead_letters(self, *, limit: int) -> list[DeadLetter]:
        taken, self.letters = self.letters[:limit], self.letters[limit:]
        return taken


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("redis://127.0.0.1:6379/0", "redis"),
        ("rediss://h:6380/1", "redis"),
        ("amqp://guest:guest@127.0.0.1:5672//", "rabbitmq"),
        ("pyamqp://h/vhost", "rabbitmq"),
        ("sqs://", "unsupported"),
    ],
)
def test_broker_kind_of_url_scheme(url: str, kind: str) -> None:
    assert broker_kind(url) == kind


def test_broker_for_picks_the_adapter_and_refuses_other_schemes() -> None:
    assert isinstance(broker_for("redis://127.0.0.1:6379/0"), RedisBroker)
    rabbit = broker_for("amqp://guest:guest@127.0.0.1:5672/v")
    assert isinstance(rabbit, RabbitMQBroker)
    assert (rabbit.can_peek, rabbit.knows_reserved, rabbit.server_run_id()) == (False, False, "")
    with pytest.raises(brokers.UnsupportedBrokerError, match="sqs"):
        broker_for("sqs://")


def test_job_of_reads_celery_task_ids() -> None:
    job_id = str(uuid.uuid4())
    assert job_of(f"{job_id}:3") == (job_id, 3)
    assert job_of("not-ours") == ("", 0)
    assert job_of(None) == ("", 0)


def test_restart_watch_never_reports_a_broker_without_run_id() -> None:
    watch = BrokerRestartWatch(adapter=FakeBroker({}))
    assert [watch.restarted() for _ in range(3)] == [False, False, False]


@pytest.mark.django_db(transaction=True)
def test_counted_rule_suspects_queued_jobs_older_than_the_ready_newest(
    job_factory: Callable[..., Job],
) -> None:
    # given 5 queued jobs published 50..10 s ago, one published just now, and a queue of 2
    now = timezone.now()
    old = [job_factory(published_at=now - timedelta(seconds=s)) for s in (50, 40, 30, 20, 10)]
    job_factory(published_at=now)
    job_factory(published_at=None)  # in the outbox: not the broker's
    job_factory(status=JobStatus.RUNNING, published_at=now - timedelta(seconds=60))

    # when the counted rule judges them (margin 5 s)
    found = services.lost_message_suspects(
        queues=["default"],
        margin=5.0,
        held_after=600,
        limit=100,
        adapter=FakeBroker({"default": 2}),
    )

    # then the 2 newest are taken to be in the queue, the 4 older are suspects
    assert set(found) == {job.id for job in old[:4]}
    assert {s.reason for s in found.values()} == {"vanished"}


@pytest.mark.django_db(transaction=True)
def test_counted_rule_suspects_nothing_when_every_queued_job_fits_in_the_queue(
    job_factory: Callable[..., Job],
) -> None:
    now = timezone.now()
    for s in (50, 40):
        job_factory(published_at=now - timedelta(seconds=s))
    found = services.lost_message_suspects(
        queues=["default"],
        margin=1.0,
        held_after=600,
        limit=100,
        adapter=FakeBroker({"default": 2}),
    )
    assert found == {}


@pytest.mark.django_db(transaction=True)
def test_dead_letter_ends_a_queued_job_dead_with_reason_delivery_limit(
    job_factory: Callable[..., Job],
) -> None:
    # given a queued job waiting for attempt 1, a running one, and a foreign message
    waiting = job_factory(published_at=timezone.now())
    running = job_factory(status=JobStatus.RUNNING)
    letters = [
        DeadLetter(job_id=str(waiting.id), attempt=1),
        DeadLetter(job_id=str(running.id), attempt=1),
        DeadLetter(job_id="", attempt=0),
        DeadLetter(job_id=str(waiting.id), attempt=7),  # a stale attempt: ignored
    ]

    # when the scheduler drains the dead-letter queue
    ended = dead_letters_drain(adapter=FakeBroker({}, letters), limit=10)

    # then only the waiting job ends dead, with its own reason
    assert ended == 1
    waiting.refresh_from_db()
    running.refresh_from_db()
    assert (waiting.status, waiting.dead_reason) == (JobStatus.DEAD, "delivery_limit")
    assert waiting.finished_at is not None
    assert running.status == JobStatus.RUNNING


def test_check_broker_refuses_an_unsupported_scheme(settings: Any) -> None:
    settings.JOBS_BROKER_KIND = "unsupported"
    settings.CELERY_BROKER_URL = "sqs://"
    (error,) = checks.check_broker(None)
    assert error.id == "jobs.E020"
    assert "\n" not in error.msg


def test_check_broker_refuses_a_delivery_limit_at_or_below_the_poison_bound(settings: Any) -> None:
    settings.JOBS_BROKER_KIND = "rabbitmq"
    settings.JOBS_POISON_AFTER = 3
    settings.JOBS_RABBITMQ_DELIVERY_LIMIT = 3
    (error,) = checks.check_broker(None)
    assert error.id == "jobs.E022"
    settings.JOBS_RABBITMQ_DELIVERY_LIMIT = 4
    assert checks.check_broker(None) == []


def test_check_visibility_timeout_on_rabbitmq_is_the_consumer_timeout(settings: Any) -> None:
    settings.JOBS_BROKER_KIND = "rabbitmq"
    settings.JOBS_RABBITMQ_CONSUMER_TIMEOUT = 30
    errors = checks.check_visibility_timeout(None)
    assert errors
    assert all("JOBS_RABBITMQ_CONSUMER_TIMEOUT" in e.msg for e in errors)
