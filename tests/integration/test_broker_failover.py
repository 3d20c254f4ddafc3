"""A broker that stops serving for a while (failover, write refusal) kills no process.

Issue 8, item 2: a worker whose Redis was demoted to a replica for 10 s
(`REPLICAOF`, then `REPLICAOF NO ONE`), or refused writes after a failed
background save (`-MISCONF`), died with "Unrecoverable error" (exit 1) and
jobs submitted meanwhile stayed queued. Expected: every process keeps its
pid, the worker reconnects in process, and every job submitted during the
window succeeds within 60 s of the broker recovering.

Each test runs its own platform on its own redis-server (a fault changes
the server's role or configuration, never the shared one's). The 10 s
window is the issue's; every other wait polls with a deadline.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import pytest
import redis
import requests

from devstack.services import RedisServer, free_port, wait_for
from tests.integration.harness import Platform
from tests.integration.test_failure_semantics import attempts, jobs

FAULT_WINDOW_SECONDS = 10.0
RECOVERY_BUDGET_SECONDS = 60.0
JOBS_IN_WINDOW = 4


def _persistence(client: redis.Redis) -> dict:
    return client.info("persistence")


def _replicaof_start(client: redis.Redis, server: RedisServer) -> None:
    # A master that does not exist: the dataset stays as it was (nothing to
    # sync from), as during a failover whose new primary is not reachable yet.
    client.replicaof("127.0.0.1", free_port())
    assert client.info("replication")["role"] == "slave"


def _replicaof_end(client: redis.Redis, server: RedisServer) -> None:
    client.replicaof("NO", "ONE")
    assert client.info("replication")["role"] == "master"


def _misconf_start(client: redis.Redis, server: RedisServer) -> None:
    # A disk that takes no byte (soft RLIMIT_FSIZE 0 on the server, so even
    # root's background save fails) under a save point: the failed BGSAVE
    # makes Redis refuse writes (and PING) with -MISCONF, its
    # stop-writes-on-bgsave-error default. CONFIG SET dir is a protected
    # config on Redis 7, hence the limit instead of an unwritable directory.
    assert server.pid is not None
    psutil.Process(server.pid).rlimit(psutil.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
    client.config_set("save", "3600 1")
    client.bgsave()
    wait_for(
        lambda: (
            (p := _persistence(client))["rdb_bgsave_in_progress"] == 0
            and p["rdb_last_bgsave_status"] == "err"
        ),
        timeout=10,
        what="the background save to fail",
    )
    with pytest.raises(redis.ResponseError, match="^MISCONF"):
        client.set("jobs:test:probe", "1")


def _misconf_end(client: redis.Redis, server: RedisServer) -> None:
    # The disk is fixed and the next save succeeds: Redis accepts writes again.
    assert server.pid is not None
    psutil.Process(server.pid).rlimit(
        psutil.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    client.bgsave()
    wait_for(
        lambda: _persistence(client)["rdb_last_bgsave_status"] == "ok",
        timeout=10,
        what="a successful background save",
    )
    client.set("jobs:test:probe", "1")


@dataclass(frozen=True)
class BrokerFault:
    """A way for a live Redis to stop serving writes, and its recovery."""

    name: str
    start: Callable[[redis.Redis, RedisServer], None]
    end: Callable[[redis.Redis, RedisServer], None]


FAULTS = [
    BrokerFault("replicaof", _replicaof_start, _replicaof_end),
    BrokerFault("misconf", _misconf_start, _misconf_end),
]


def scheduler_sees_worker_up(platform: Platform) -> bool:
    """Whether the scheduler's /metrics reports a worker up (its event-monitor thread is live)."""
    try:
        text = requests.get(platform.scheduler_metrics_url, timeout=5).text
    except requests.RequestException:
        return False
    return any(
        line.startswith("celery_worker_up{") and line.endswith(" 1.0") for line in text.splitlines()
    )


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.skipif(not hasattr(psutil, "RLIMIT_FSIZE"), reason="needs prlimit (Linux)")
@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_broker_fault_and_back_keeps_every_process_and_runs_the_window_jobs(
    platform_factory: Callable[..., Platform], fault: BrokerFault
) -> None:
    # given a platform on its own redis-server whose worker has run a job and
    # is running a 3 s job when the fault starts (its acknowledgement falls
    # into the window)
    platform = platform_factory(f"broker_{fault.name}")
    assert platform.worker is not None
    assert platform.web is not None
    assert platform.scheduler is not None
    warm = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}), timeout=60)
    assert warm["status"] == "succeeded", warm
    wait_for(lambda: scheduler_sees_worker_up(platform), timeout=30, what="worker up (scheduler)")
    processes = {p.name: p.pid for p in (platform.web, platform.worker, platform.scheduler)}
    in_flight = platform.submit("demo.sleep", {"seconds": 3, "step_seconds": 0.1})
    platform.wait_job(in_flight, statuses=frozenset({"running"}), timeout=30)
    worker_offset = len(platform.worker.log())
    client = redis.Redis.from_url(platform.redis.url, socket_timeout=5, protocol=2)

    # when the broker stops serving writes for 10 s, jobs are submitted meanwhile
    fault.start(client, platform.redis)
    started = time.monotonic()
    statuses = [
        platform.post_job({"kind": "demo.flaky", "payload": {"fail_times": 0}})
        for _ in range(JOBS_IN_WINDOW)
    ]
    time.sleep(max(0.0, started + FAULT_WINDOW_SECONDS - time.monotonic()))  # the window

    # and it recovers
    fault.end(client, platform.redis)
    recovered = time.monotonic()
    client.close()

    # then the API accepted every submission (the outbox holds what it could not publish)
    assert [r.status_code for r in statuses] == [202] * JOBS_IN_WINDOW, [r.text for r in statuses]
    window_ids = [r.json()["id"] for r in statuses]

    # and every job of the window succeeds within 60 s of the recovery
    def window_settled() -> bool:
        rows = jobs(platform, "WHERE id = ANY(%s::uuid[])", (window_ids,))
        return all(row["status"] == "succeeded" for row in rows)

    try:
        wait_for(
            window_settled,
            timeout=RECOVERY_BUDGET_SECONDS,
            interval=0.2,
            what="the window's jobs to succeed",
        )
    except TimeoutError:
        rows = jobs(platform, "WHERE id = ANY(%s::uuid[])", (window_ids,))
        pytest.fail(
            f"{fault.name}: {sum(r['status'] != 'succeeded' for r in rows)} of {JOBS_IN_WINDOW}"
            f" window jobs not succeeded {RECOVERY_BUDGET_SECONDS:.0f} s after recovery"
            f" ({sorted(r['status'] for r in rows)}); worker exit code"
            f" {platform.worker.popen.poll()}\n{platform.log_tails()}"
        )
    took = time.monotonic() - recovered
    print(f"{fault.name}: {JOBS_IN_WINDOW} window jobs succeeded {took:.1f} s after recovery")

    # and no process died or was replaced: the worker reconnected in process
    worker_log = platform.worker.log()[worker_offset:]
    assert "Unrecoverable error" not in worker_log, worker_log[-3000:]
    for process in (platform.web, platform.worker, platform.scheduler):
        assert process.alive(), (
            f"{process.name} exited {process.popen.poll()}\n{process.log()[-3000:]}"
        )
        assert processes[process.name] == process.pid
    assert "Connection to broker lost" in worker_log, worker_log[-3000:]

    # and the job that was running when the fault started ran once and succeeded
    job = platform.job(in_flight)
    assert job["status"] == "succeeded", job
    assert [a["outcome"] for a in attempts(platform, "WHERE job_id = %s", (in_flight,))] == [
        "succeeded"
    ]

    # and the scheduler's worker monitor follows the worker again
    wait_for(lambda: scheduler_sees_worker_up(platform), timeout=30, what="worker up again")

    # and a job submitted after the recovery runs at once
    after = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}), timeout=30)
    assert after["status"] == "succeeded", after
