"""The broker matrix: what the platform asks of a broker, on Redis and on RabbitMQ (quorum queues).

Each test runs once per broker (the `broker` fixture); the RabbitMQ run has
its own vhost on the machine's RabbitMQ and the `rabbitmq` marker
(`make test-rabbitmq`). Until the retry budget, cancellation and worker
reports move to PostgreSQL (issue 21 item 2), a RabbitMQ platform still
keeps that state in its own Redis (REDIS_URL); its broker is RabbitMQ alone.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import kombu
import pytest

from devstack.services import wait_for
from tests.integration.harness import FLAKY_POLICY, Platform

pytestmark = pytest.mark.integration

# A purged queue's jobs are republished within MARGIN + 2 x CHECK_INTERVAL
# (+ a scheduler pass); the platforms here check every 2 s.
CHECK_ENV = {"JOBS_LOST_MESSAGE_CHECK_INTERVAL": "2", "JOBS_LOST_MESSAGE_MARGIN": "1"}
REPUBLISH_BOUND = 1 + 2 * 2 + 2  # seconds: margin + two checks + a pass and a publish


def _logs_clean(platform: Platform) -> None:
    """No process logged a Redis URL error (a Redis client built from an amqp:// URL)."""
    logs = platform.log_tails(chars=200_000)
    assert "Redis URL must specify" not in logs, logs[-3000:]


@pytest.mark.timeout(240)
def test_broker_submit_runs_first_attempt_within_a_second(
    broker_platform_factory: Callable[..., Platform], broker: str
) -> None:
    # given a platform on the broker
    platform = broker_platform_factory("matrix_submit")

    # when 20 jobs are submitted one after another
    ids = [
        platform.submit("demo.sleep", {"seconds": 0.05, "step_seconds": 0.05}) for _ in range(20)
    ]

    # then each succeeds, its first attempt started within 1 s of its submission
    for job_id in ids:
        assert platform.wait_job(job_id, timeout=60)["status"] == "succeeded"
    delays = [
        float(d)
        for (d,) in platform.rows(
            "SELECT extract(epoch FROM a.started_at - j.created_at) FROM jobs_attempt a"
            " JOIN jobs_job j ON j.id = a.job_id WHERE a.number = 1"
        )
    ]
    print(f"{broker}: submission -> first attempt started (s): max {max(delays):.3f}")
    assert len(delays) == 20
    assert max(delays) < 1.0, delays
    # and nothing is left in the broker, nothing was deferred to the outbox
    wait_for(lambda: platform.broker_messages() == (0, 0), timeout=30, what="an empty queue")
    assert "publish deferred to the outbox" not in platform.log_tails(chars=200_000)
    _logs_clean(platform)


@pytest.mark.timeout(240)
def test_broker_retries_end_succeeded_or_exhausted(
    broker_platform_factory: Callable[..., Platform],
) -> None:
    # given demo.flaky with a fast backoff
    platform = broker_platform_factory(
        "matrix_retries", env={"JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": FLAKY_POLICY})}
    )

    # when one job fails twice then succeeds, and one fails more often than it may
    ok = platform.submit("demo.flaky", {"fail_times": 2})
    dead = platform.submit("demo.flaky", {"fail_times": 50})

    # then the first succeeds on its 3rd attempt, the second is dead (exhausted)
    job = platform.wait_job(ok, timeout=90)
    assert job["status"] == "succeeded", job
    assert [a["outcome"] for a in job["attempts"]] == ["error", "error", "succeeded"]
    job = platform.wait_job(dead, timeout=90)
    assert (job["status"], job["dead_reason"]) == ("dead", "exhausted"), job
    assert len(job["attempts"]) == FLAKY_POLICY["max_attempts"]
    _logs_clean(platform)


@pytest.mark.timeout(240)
def test_broker_queue_depth_and_backpressure_read_without_consuming(
    broker_platform_factory: Callable[..., Platform],
) -> None:
    # given a queue that takes 5 ready jobs and no worker
    platform = broker_platform_factory(
        "matrix_depth", env={"JOBS_QUEUE_MAX_READY": "5"}, worker=False, scheduler=False
    )

    # when 5 are submitted
    for _ in range(5):
        platform.submit("demo.sleep", {"seconds": 0.1})

    # then the broker holds 5 ready messages, read again without consuming them
    assert platform.broker_messages() == (5, 0)
    # and the 6th submission is refused with 503
    response = platform.post_job({"kind": "demo.sleep", "payload": {"seconds": 0.1}})
    assert response.status_code == 503, response.text
    assert platform.broker_messages() == (5, 0)
    # and the queue-depth metric reads 5 ready
    metrics = platform.session.get(platform.url("/metrics"), timeout=30).text
    assert 'celery_queue_length{queue_name="default"} 5.0' in metrics, [
        line for line in metrics.splitlines() if "queue" in line and "default" in line
    ]
    _logs_clean(platform)


@pytest.mark.timeout(240)
def test_broker_purged_queue_jobs_are_republished_within_the_bound(
    broker_platform_factory: Callable[..., Platform], broker: str
) -> None:
    # given 8 queued jobs published to a queue no worker consumes
    platform = broker_platform_factory("matrix_purge", env=CHECK_ENV, worker=False)
    ids = [platform.submit("demo.sleep", {"seconds": 0.1}) for _ in range(8)]
    wait_for(lambda: platform.broker_messages()[0] == 8, timeout=10, what="8 ready messages")
    wait_for(
        lambda: (
            platform.scalar("SELECT count(*) FROM jobs_job WHERE published_at IS NOT NULL") == 8
        ),
        timeout=10,
        what="8 publish stamps",
    )

    # when the queue is purged
    platform.purge()
    purged_at = time.monotonic()
    assert platform.broker_messages()[0] == 0

    # then every job's message is back within the documented bound
    wait_for(
        lambda: platform.broker_messages()[0] == 8,
        timeout=REPUBLISH_BOUND + 20,
        interval=0.2,
        what="8 messages republished",
    )
    took = time.monotonic() - purged_at
    print(f"{broker}: purge -> 8 messages republished in {took:.1f} s (bound {REPUBLISH_BOUND} s)")
    assert took <= REPUBLISH_BOUND, took
    assert {platform.job(i)["status"] for i in ids} == {"queued"}
    _logs_clean(platform)


@pytest.mark.timeout(240)
def test_broker_poison_message_is_dead_as_poison_within_the_delivery_limit(
    broker_platform_factory: Callable[..., Platform],
) -> None:
    # given a demo.crash job (kills its child on every attempt) beside normal ones
    platform = broker_platform_factory("matrix_poison", worker_concurrency=2)
    normal = [platform.submit("demo.sleep", {"seconds": 0.1}) for _ in range(5)]
    poison = platform.submit("demo.crash", {"signal": "SIGKILL", "after_seconds": 0.3})

    # then it ends dead with reason poison (our bound, 3 losses), before any
    # broker delivery limit, and the normal jobs succeed
    job = platform.wait_job(poison, timeout=180)
    assert (job["status"], job["dead_reason"]) == ("dead", "poison"), job
    assert [a["outcome"] for a in job["attempts"]] == ["worker_lost"] * 3
    assert {platform.wait_job(i)["status"] for i in normal} == {"succeeded"}
    # and the broker holds nothing more for it
    wait_for(lambda: platform.broker_messages() == (0, 0), timeout=30, what="an empty queue")
    _logs_clean(platform)


@pytest.mark.rabbitmq
@pytest.mark.timeout(240)
def test_rabbitmq_delivery_limit_drop_ends_job_dead_with_its_own_reason(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a queued job on RabbitMQ (delivery limit 4) and no worker
    platform = platform_factory(
        "matrix_dlx",
        broker="rabbitmq",
        env={"JOBS_RABBITMQ_DELIVERY_LIMIT": "4", **CHECK_ENV},
        worker=False,
    )
    job_id = platform.submit("demo.sleep", {"seconds": 0.1})
    wait_for(lambda: platform.broker_messages()[0] == 1, timeout=10, what="a ready message")
    assert platform.vhost is not None

    # when a consumer takes and requeues its message until RabbitMQ drops it
    with kombu.Connection(platform.vhost.url) as connection:
        channel: Any = connection.default_channel
        deliveries = 0
        while (message := channel.basic_get(queue="default", no_ack=False)) is not None:
            deliveries += 1
            channel.basic_reject(message.delivery_tag, requeue=True)
            assert deliveries <= 10
    print(f"deliveries before the drop: {deliveries}")
    assert deliveries == 5  # x-delivery-limit 4: dropped after the 5th

    # then the scheduler ends the job dead with reason delivery_limit
    job = platform.wait_job(job_id, timeout=30)
    assert (job["status"], job["dead_reason"]) == ("dead", "delivery_limit"), job
    assert platform.broker_messages() == (0, 0)
    assert "reason=delivery_limit" in platform.log_tails(chars=200_000)


@pytest.mark.rabbitmq
@pytest.mark.slow
@pytest.mark.drill
@pytest.mark.timeout(400)
def test_rabbitmq_vhost_restart_during_submissions_loses_nothing(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform on RabbitMQ taking a steady stream of submissions
    platform = platform_factory("matrix_restart", broker="rabbitmq", env=CHECK_ENV)
    assert platform.vhost is not None
    ids: list[str] = []
    statuses: list[int] = []
    stop = threading.Event()

    def submit() -> None:
        while not stop.is_set() and len(ids) < 150:
            response = platform.post_job({"kind": "demo.sleep", "payload": {"seconds": 0.05}})
            statuses.append(response.status_code)
            if response.status_code == 202:
                ids.append(response.json()["id"])
            time.sleep(0.05)

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        # when the vhost (its quorum queues and every connection to it) restarts mid-stream
        wait_for(lambda: len(ids) >= 30, timeout=60, what="30 submissions")
        platform.vhost.restart()
        wait_for(lambda: len(ids) >= 100, timeout=120, what="100 submissions")
    finally:
        stop.set()
        thread.join(timeout=60)

    # then every accepted job succeeds (nothing lost), and every submission was accepted
    assert set(statuses) == {202}, statuses
    wait_for(
        lambda: platform.job_count(status="succeeded") == len(ids),
        timeout=240,
        interval=0.5,
        what=f"{len(ids)} jobs succeeded",
    )
    print(f"{len(ids)} submissions across a vhost restart, all succeeded")
    _logs_clean(platform)


@pytest.mark.rabbitmq
@pytest.mark.timeout(300)
def test_rabbitmq_vhost_gone_then_back_defers_to_the_outbox_and_loses_nothing(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform on RabbitMQ
    platform = platform_factory("matrix_outage", broker="rabbitmq", env=CHECK_ENV)
    assert platform.vhost is not None
    before = platform.submit("demo.sleep", {"seconds": 0.05})
    assert platform.wait_job(before)["status"] == "succeeded"

    # when the vhost (its queues, every connection to it) is deleted, 10 jobs are
    # submitted while it is gone, and it comes back
    platform.vhost.delete()
    during = [platform.submit("demo.sleep", {"seconds": 0.05}) for _ in range(10)]
    platform.vhost.create()

    # then every submission was accepted (202, asserted by submit) and every job
    # succeeds once the broker is back: the outbox held what could not be published
    for job_id in during:
        assert platform.wait_job(job_id, timeout=120)["status"] == "succeeded"
    logs = platform.log_tails(chars=400_000)
    deferred = logs.count("publish failed") + logs.count("publish deferred to the outbox")
    print(f"publishes failed or deferred while the vhost was gone: {deferred}")
    assert deferred >= 1
    _logs_clean(platform)
