"""Issue 24's pause acceptance on two worker hosts (soak: run on demand, `pytest -m soak -s
tests/integration/test_pause_soak.py`): pause a kind with 500 jobs queued and 3 running: no
new attempt starts while paused, the 3 finish, resume starts the rest within one tick;
nothing dead, nothing lost; cancel works while paused.

Two worker hosts in network namespaces (tests/integration/multi_host.py), each with two
workers of 4 children (16 children), and one host with the web and the scheduler (tick 0.1 s,
harness.BASE_ENV); Redis, PostgreSQL. With 16 free children a queued short job starts as soon
as it is submitted, so "3 running" is made exact in time rather than by the pool's size: the 3
long jobs are submitted and seen running, the kind is paused, and only then are the 500
submitted (they are published, and each delivery on either host goes back to wait in the
database: counted from `deliveries`). Every attempt started after the pause's
`paused_at` (the database's time) is counted every 75 ms while paused.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, PlatformFactory, require_postgres
from tests.integration.multi_host import Cluster, build_cluster, start_second_workers
from tests.integration.pausing import resume_and_time_first_start
from tests.integration.test_pause_resume import QUEUED, RUN_SECONDS, RUNNING, START_SLACK

pytestmark = [pytest.mark.integration, pytest.mark.soak]

KIND = "demo.flaky"
SAMPLE = 0.075  # seconds between database samples while paused
HELD_FOR = 3.0  # seconds sampled after the 3 finished and the 500 are held


@pytest.fixture(scope="module")
def cluster(_logroot: Path) -> Iterator[Cluster]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        started = time.monotonic()
        built = build_cluster(
            factory, "redis", env={}, worker_skews=(0, 0), web_hosts=1, worker_concurrency=4
        )
        start_second_workers(built)  # 2 hosts x 2 workers x 4 children
        print(f"\ncluster of 3 hosts, 4 workers x 4 up in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        factory.close()


def _count(cluster: Cluster, status: str) -> int:
    """Jobs of `status`, counted in the database."""
    return int(
        cluster.platform.scalar("SELECT count(*) FROM jobs_job WHERE status = %s", (status,))
    )


def _after_pause(cluster: Cluster) -> int:
    """Attempts started after the kind's pause row's `paused_at` (0 when none)."""
    return int(
        cluster.platform.scalar(
            "SELECT count(*) FROM jobs_attempt a JOIN jobs_pause p"
            " ON p.scope = 'kind' AND p.name = %s WHERE a.started_at > p.paused_at",
            (KIND,),
        )
    )


@pytest.mark.timeout(900)
def test_pause_500_queued_3_running_on_two_hosts(cluster: Cluster) -> None:
    platform, client = cluster.platform, cluster.clients[0]
    t0 = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - t0, 1)

    ops = requests.Session()
    token = platform.create_users(
        {"ops": {"staff": True, "perms": ["view_pause", "add_pause", "delete_pause"]}}
    )["ops"]
    ops.headers["Authorization"] = f"Token {token}"

    # given 3 long jobs running on the two hosts' children
    running = cluster.submit_many(
        [(KIND, {"fail_times": 0, "sleep_seconds": RUN_SECONDS})] * RUNNING
    )
    wait_for(
        lambda: _count(cluster, "running") == RUNNING,
        timeout=60,
        interval=0.05,
        what="3 running",
    )
    phase("3 running")
    # when the kind is paused, and 500 short jobs are submitted behind the pause
    response = ops.post(
        client.url("/api/pauses/"),
        json={"scope": "kind", "name": KIND, "reason": "two-host acceptance"},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 201, response.text
    started = platform.rows("SELECT job_id::text FROM jobs_attempt")
    assert sorted(row[0] for row in started) == sorted(running), started
    began = time.monotonic()
    queued = cluster.submit_many([(KIND, {"fail_times": 0})] * QUEUED, threads=8)
    submitted_in = time.monotonic() - began
    phase("500 submitted")

    # then the 3 finish (succeeded), the 500 are held, none on the broker, and no attempt
    # starts after the pause: sampled while the 3 run and for HELD_FOR s after
    samples, late = 0, 0
    seen: dict[str, object] = {}

    def sample() -> None:
        nonlocal samples, late
        samples += 1
        late = max(late, _after_pause(cluster))

    def held() -> bool:
        sample()
        seen["done"] = _count(cluster, "succeeded")
        seen["held"] = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE status = 'queued' AND published_at IS NULL"
            " AND waiting_reason = 'paused'"
        )
        seen["broker"] = platform.broker_messages()[0]
        return seen == {"done": RUNNING, "held": QUEUED, "broker": 0}

    try:
        wait_for(held, timeout=180, interval=SAMPLE, what="3 succeeded, 500 held, broker empty")
    except TimeoutError as exc:
        rows = platform.rows(
            "SELECT status, waiting_reason, published_at IS NULL, count(*) FROM jobs_job"
            " GROUP BY 1, 2, 3"
        )
        raise AssertionError(f"{exc}: {seen}, rows {rows}") from None
    phase("3 finished, 500 held")
    until = time.monotonic() + HELD_FOR
    while time.monotonic() < until:
        sample()
        time.sleep(SAMPLE)
    # deliveries of the 500 sent back to wait by the workers (not held at publish)
    bounced = platform.scalar(
        "SELECT count(*) FROM jobs_job WHERE waiting_reason = 'paused' AND deliveries > 0"
    )
    assert late == 0, f"{late} attempts started after the pause"
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == RUNNING
    for job_id in running:
        assert client.job(job_id)["status"] == "succeeded"
    shown = client.job(queued[0])
    assert (shown["status"], shown["waiting"]["reason"]) == ("queued", "paused"), shown

    # and cancel works while paused
    cancelled = client.session.post(client.url(f"/api/jobs/{queued[-1]}/cancel/"), timeout=30)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"

    # when resumed, the held jobs start within one tick (+ publish and delivery); all finish
    resumed_at, after = resume_and_time_first_start(
        ops, client.url("/api/pauses/resume/"), KIND, platform, running=RUNNING
    )
    cluster.wait_terminal(RUNNING + QUEUED, timeout=300)
    drained = time.monotonic() - resumed_at
    phase("drained")

    counts = dict(platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY status"))
    attempts = platform.scalar("SELECT count(*) FROM jobs_attempt")
    ran = platform.scalar("SELECT count(*) FROM jobs_job WHERE started_at IS NOT NULL")
    hosts = dict(
        platform.rows(
            "SELECT left(split_part(worker_hostname, '@', 1), 2), count(*) FROM jobs_attempt"
            " GROUP BY 1 ORDER BY 1"
        )
    )
    broker = platform.broker_messages()[0]
    print(
        f"\npause on 2 hosts x 2 workers x 4: {QUEUED} submitted behind the pause in"
        f" {submitted_in:.1f} s; {RUNNING} ran through it; {samples} samples every"
        f" {SAMPLE * 1000:.0f} ms while paused, {late} attempts started after the pause;"
        f" {bounced} of the 500 delivered and sent back to wait;"
        f" resume: released {after['released']:.3f} s, first start {after['started']:.3f} s"
        f" (bound {START_SLACK:.1f}), all {RUNNING + QUEUED - 1} done {drained:.1f} s after"
        f" the request; final {counts}, {attempts} attempts for {ran} jobs that ran, broker"
        f" {broker}; attempts per host {hosts}; phases (s) {phases}"
    )
    assert counts == {"succeeded": RUNNING + QUEUED - 1, "cancelled": 1}
    assert attempts == ran == RUNNING + QUEUED - 1
    assert broker == 0
    assert set(hosts) == {"w1", "w2"}, hosts
    assert after["started"] <= START_SLACK, f"first start {after['started']:.3f} s"
