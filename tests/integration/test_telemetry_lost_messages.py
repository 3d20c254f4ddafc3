"""A queued job whose message vanished is republished within a minute, and counted.

Issue 8, item 3: a message can vanish while its row says `queued` (taken by
a consumer that never recorded it, removed behind the platform's back, a
broker that lost data). The scheduler finds such jobs by the lists' FIFO
order (jobs.services.lost_messages) and republishes them; jobs whose
message is still waiting are never republished.

Each test runs its own platform with a lost-message check every 0.5 s (the
scheduler sweeps once a second, so a check runs every second) and a margin
of 0.5 s; the default (10 s, 2 s) is measured the same way in the report.
Detection time: from the fault to the job's row being republished (its
`published_at` changed).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from devstack.services import wait_for
from jobs.broker import queue_keys
from tests.integration.harness import HTTP_TIMEOUT, Platform
from tests.integration.telemetry import covers, scrape

CHECK_INTERVAL = 0.5
LOST_MESSAGE_ENV = {
    "JOBS_LOST_MESSAGE_CHECK_INTERVAL": str(CHECK_INTERVAL),
    "JOBS_LOST_MESSAGE_MARGIN": "0.5",
}
# What the issue asks of the default settings; the tests' settings are faster.
WITHIN_SECONDS = 60
LOST = {"kind": "demo.flaky", "queue": "default"}


def job_rows(platform: Platform, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """{job id: row} with status, attempts_made, deliveries and published_at (Unix seconds)."""
    rows = platform.rows(
        "SELECT id::text, status, attempts_made, deliveries,"
        " extract(epoch FROM published_at)::float8"
        " FROM jobs_job WHERE id::text = ANY(%s)",
        (job_ids,),
    )
    return {
        r[0]: {"status": r[1], "attempts_made": r[2], "deliveries": r[3], "published_at": r[4]}
        for r in rows
    }


def messages_of(client: redis.Redis, job_id: str) -> list[bytes]:
    """Every ready message of `job_id` in the default queue's lists."""
    return [
        raw
        for key in queue_keys("default")
        for raw in client.lrange(key, 0, -1)
        if isinstance(raw, bytes) and job_id.encode() in raw
    ]


def stamped_rows(platform: Platform, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """job_rows once every job's publish is stamped (the web writes stamps in batches,
    jobs.services.publish_stamps, within JOBS_PUBLISH_STAMP_DELAY_SECONDS)."""

    def stamped() -> dict[str, dict[str, Any]] | None:
        rows = job_rows(platform, job_ids)
        return rows if all(r["published_at"] is not None for r in rows.values()) else None

    return wait_for(stamped, timeout=10, interval=0.05, what="published_at stamped")


def lost_counted(platform: Platform) -> float:
    """jobs_messages_lost_total{kind="demo.flaky", queue="default"} on the scheduler's /metrics."""
    samples = scrape(platform.scheduler_metrics_url)
    return samples.get("jobs_messages_lost_total", LOST) or 0.0


def lrange_calls(client: redis.Redis) -> int:
    """LRANGE commands the broker has served: the scheduler's check reads each sub-queue once."""
    return int(client.info("commandstats").get("cmdstat_lrange", {}).get("calls", 0))


def occupy_worker(platform: Platform) -> str:
    """Submit a long cooperative job and wait until the 1-child worker runs it; returns its id.

    With prefetch 1 and acks_late the worker then takes no other message:
    later jobs wait in the broker list for as long as it runs.
    """
    blocker = platform.submit("demo.sleep", {"seconds": 300, "step_seconds": 0.1})
    platform.wait_job(blocker, statuses=frozenset({"running"}), timeout=60)
    return blocker


def cancel(platform: Platform, job_id: str) -> None:
    response = platform.session.post(
        platform.url(f"/api/jobs/{job_id}/cancel/"), timeout=HTTP_TIMEOUT
    )
    assert response.status_code == 200, response.text


def wait_republished(
    platform: Platform, job_ids: list[str], before: dict[str, dict[str, Any]], *, timeout: float
) -> float:
    """Poll until every job's published_at moved past `before`; returns when (time.time())."""

    def republished() -> bool:
        now = job_rows(platform, job_ids)
        return all(
            now[j]["published_at"] is not None
            and now[j]["published_at"] > before[j]["published_at"]
            for j in job_ids
        )

    try:
        wait_for(republished, timeout=timeout, interval=0.05, what="lost jobs republished")
    except TimeoutError as exc:
        raise AssertionError(
            f"{exc}\n{job_rows(platform, job_ids)}\n{platform.log_tails()}"
        ) from None
    return time.time()


@pytest.mark.integration
@pytest.mark.timeout(240)
@covers("jobs_messages_lost_total")
def test_message_removed_or_taken_by_a_dead_consumer_is_republished_and_counted(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 1-child worker busy with a long job, so later messages wait in the list
    platform = platform_factory("lost_lrem", env=LOST_MESSAGE_ENV, worker_concurrency=1)
    client = redis.Redis.from_url(platform.redis.url)
    blocker = occupy_worker(platform)
    counted_before = lost_counted(platform)
    # and two queued jobs whose messages wait in the broker
    removed, taken = (platform.submit("demo.flaky", {"fail_times": 0}) for _ in range(2))
    wait_for(
        lambda: all(len(messages_of(client, j)) == 1 for j in (removed, taken)),
        timeout=30,
        interval=0.05,
        what="both messages in the list",
    )
    before = stamped_rows(platform, [removed, taken])

    # when one message is removed behind the platform's back (LREM) and the
    # other taken by a consumer that dies before recording it (BRPOP, no ack)
    (raw,) = messages_of(client, removed)
    assert client.lrem("default", 0, raw) == 1  # type: ignore[arg-type]
    key, _ = client.brpop(queue_keys("default"), timeout=5)  # type: ignore[misc]
    assert key == b"default"
    faulted = time.time()
    assert messages_of(client, removed) == messages_of(client, taken) == []

    # then both jobs are republished, well within a minute, and counted
    republished = wait_republished(platform, [removed, taken], before, timeout=WITHIN_SECONDS)
    assert all(len(messages_of(client, j)) == 1 for j in (removed, taken))
    wait_for(
        lambda: lost_counted(platform) - counted_before == 2,
        timeout=10,
        interval=0.1,
        what="jobs_messages_lost_total +2",
    )
    print(f"lost messages (LREM, BRPOP without ack): republished {republished - faulted:.2f}s")

    # when the worker is free again, both run exactly once, from one delivery each
    cancel(platform, blocker)
    for job_id in (removed, taken):
        job = platform.wait_job(job_id, timeout=60)
        assert job["status"] == "succeeded", job
        assert [a["outcome"] for a in job["attempts"]] == ["succeeded"]
    rows = job_rows(platform, [removed, taken])
    assert [rows[j]["deliveries"] for j in (removed, taken)] == [1, 1], rows
    # and nothing else was counted lost
    assert lost_counted(platform) - counted_before == 2


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_flushed_broker_with_the_same_run_id_loses_no_queued_job(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 1-child worker busy with a long job and 20 jobs waiting in the broker
    platform = platform_factory("lost_flush", env=LOST_MESSAGE_ENV, worker_concurrency=1)
    client = redis.Redis.from_url(platform.redis.url)
    blocker = occupy_worker(platform)
    job_ids = [platform.submit("demo.flaky", {"fail_times": 0}) for _ in range(20)]
    wait_for(lambda: client.llen("default") == 20, timeout=30, interval=0.05, what="20 messages")
    before = stamped_rows(platform, job_ids)
    run_id = client.info("server")["run_id"]

    # when the whole broker database is flushed (the Redis process lives on)
    client.flushdb()
    faulted = time.time()
    assert client.info("server")["run_id"] == run_id

    # then every job is republished within a minute, once
    republished = wait_republished(platform, job_ids, before, timeout=WITHIN_SECONDS)
    assert client.llen("default") == 20
    print(f"lost messages (FLUSHDB, 20 jobs): all republished {republished - faulted:.2f}s")

    # and, the worker freed, each runs exactly once from one delivery
    cancel(platform, blocker)
    for job_id in job_ids:
        job = platform.wait_job(job_id, timeout=90)
        assert job["status"] == "succeeded", job
        assert len(job["attempts"]) == 1, job
    rows = job_rows(platform, job_ids)
    assert {r["deliveries"] for r in rows.values()} == {1}, rows


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_jobs_waiting_in_a_long_queue_are_never_republished(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform with no worker yet, checking for lost messages every second
    platform = platform_factory(
        "lost_none", env=LOST_MESSAGE_ENV, worker=False, worker_concurrency=2
    )
    client = redis.Redis.from_url(platform.redis.url)
    scheduler = platform.scheduler
    assert scheduler is not None

    # when 400 short jobs are submitted over all four priority sub-queues
    # (the queue waits while the scheduler checks it a dozen times or more)
    job_ids = [
        platform.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": 0.02}, priority=i % 10)
        for i in range(400)
    ]
    wait_for(
        lambda: sum(client.llen(k) for k in queue_keys("default")) == 400,
        timeout=30,
        interval=0.1,
        what="400 messages",
    )
    checks_before = lrange_calls(client)
    wait_for(
        lambda: lrange_calls(client) - checks_before >= 6 * len(queue_keys("default")),
        timeout=60,
        interval=0.2,
        what="six checks over the waiting queue",
    )
    # and then a 2-child worker drains it, the consumers taking messages
    # all the while the checks run
    platform.worker = platform.stack.start_worker(concurrency=2, timeout=120)
    wait_for(
        lambda: platform.scalar("SELECT count(*) FROM jobs_job WHERE status = 'succeeded'") == 400,
        timeout=200,
        interval=0.5,
        what="400 jobs succeeded",
    )

    # then no job was republished: one publish, one delivery and one attempt each
    rows = job_rows(platform, job_ids)
    assert {(r["attempts_made"], r["deliveries"]) for r in rows.values()} == {(1, 1)}, [
        (j, r) for j, r in rows.items() if (r["attempts_made"], r["deliveries"]) != (1, 1)
    ][:5]
    assert "lost messages:" not in scheduler.log()
    assert lost_counted(platform) == 0
    assert sum(client.llen(k) for k in queue_keys("default")) == 0


# A consumer that takes one message the way a Celery worker does (kombu's Redis QoS records
# it in the `unacked` hash), never acknowledges it, and waits to be killed.
THIEF = """
import sys, time
from kombu import Connection, Consumer, Queue
with Connection(sys.argv[1]) as conn:
    got = []
    with Consumer(conn, [Queue("default")], callbacks=[lambda body, m: got.append(m)],
                  accept=["json"], prefetch_count=1):
        while not got:
            conn.drain_events(timeout=10)
        print("taken", flush=True)
        time.sleep(300)
"""


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_message_held_by_a_sigkilled_consumer_is_republished_after_republish_after(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a 1-child worker busy with a long job, so a later message waits in the list,
    # and a held message republished after 3 s (JOBS_REPUBLISH_AFTER)
    held_after = 3.0
    env = {**LOST_MESSAGE_ENV, "JOBS_REPUBLISH_AFTER": str(held_after)}
    platform = platform_factory("lost_held", env=env, worker_concurrency=1)
    client = redis.Redis.from_url(platform.redis.url)
    blocker = occupy_worker(platform)
    job_id = platform.submit("demo.flaky", {"fail_times": 0})
    wait_for(lambda: len(messages_of(client, job_id)) == 1, timeout=30, what="message in list")
    before = stamped_rows(platform, [job_id])
    unacked = client.hlen("unacked")  # the blocker's message (acks_late)
    # and it has waited in the list longer than that: the time held counts, not since publish
    wait_for(
        lambda: (
            platform.scalar(
                "SELECT extract(epoch FROM now() - published_at) FROM jobs_job WHERE id = %s",
                (job_id,),
            )
            > held_after + 1
        ),
        timeout=30,
        what="message older than JOBS_REPUBLISH_AFTER",
    )

    # when a consumer takes it (recorded unacknowledged, as a worker's prefetch is) and is
    # SIGKILLed with it, as on a killed host: kombu would restore it only after the
    # visibility timeout (an hour)
    thief = subprocess.Popen(
        [sys.executable, "-c", THIEF, platform.redis.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert thief.stdout is not None
        assert thief.stdout.readline().strip() == "taken"
    finally:
        thief.kill()
        thief.wait(timeout=10)
    taken = time.time()
    assert messages_of(client, job_id) == []
    assert client.hlen("unacked") == unacked + 1

    # then it is published again, not before it was seen held for JOBS_REPUBLISH_AFTER,
    # and within that plus two checks and a sweep
    republished = wait_republished(platform, [job_id], before, timeout=WITHIN_SECONDS)
    print(f"held by a killed consumer: republished {republished - taken:.2f}s after the kill")
    assert held_after <= republished - taken <= held_after + 4 * CHECK_INTERVAL + 2.0
    assert len(messages_of(client, job_id)) == 1

    # and once the worker is free it runs once, from the new message
    cancel(platform, blocker)
    job = platform.wait_job(job_id, timeout=60)
    assert job["status"] == "succeeded", job
    assert [a["outcome"] for a in job["attempts"]] == ["succeeded"]
