"""Issue 21's multi-host drills: worker, web and scheduler hosts in network namespaces, each
with an address of its own, on both brokers (Redis; RabbitMQ quorum queues), state in PostgreSQL.

One cluster per broker (module fixture, tests/integration/multi_host.py): 3 worker hosts (w1's
clock 90 s ahead, w2's 90 s behind, w3's true) and 2 hosts each running a web and a scheduler.
The drills run in this file's order on it; each first restarts any worker host a previous
drill left down. Time limits are short (hard 6 s, lease grace 4 s: a 10 s lease) so a lost
worker's attempts are judged in seconds. Each drill prints its figures.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.services import wait_for
from tests.integration.harness import PlatformFactory, require_postgres
from tests.integration.multi_host import (
    Cluster,
    admin_overview,
    build_cluster,
    kill_host,
    overlap_and_after_success,
)
from tests.integration.multi_host_jobs import (
    in_ids,
    last_rows_of,
    mixed_jobs,
    running_on,
    status_and_outcome_counts,
)

pytestmark = [pytest.mark.integration, pytest.mark.drill]

HARD, SOFT, GRACE = 6.0, 4.0, 4.0
LEASE = HARD + GRACE
SKEW = 90
FLAKY = {"max_attempts": 5, "backoff_base": 0.5, "backoff_floor": 0.2, "backoff_cap": 2.0}
LIMITS = {"soft_time_limit": SOFT, "hard_time_limit": HARD}
ENV = {
    "JOBS_STATE_STORE": "postgres",
    "JOBS_LEASE_GRACE": str(GRACE),
    "JOBS_KIND_OVERRIDES": json.dumps(
        {
            "demo.flaky": {**FLAKY, **LIMITS},
            "demo.sleep": LIMITS,
            "demo.crash": {"max_attempts": 2, **LIMITS},
        }
    ),
    "JOBS_QUEUE_MAX_READY": str(10**6),
    "JOBS_LOST_MESSAGE_CHECK_INTERVAL": "2",
    "JOBS_LOST_MESSAGE_MARGIN": "1",
    # scaled down like the lease: a killed host's prefetched messages come back in 20 s
    "JOBS_REPUBLISH_AFTER": "20",
}
BROKERS = ["redis", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)]


@pytest.fixture(scope="module", params=BROKERS)
def cluster(request: pytest.FixtureRequest, _logroot: Path) -> Iterator[Cluster]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        started = time.monotonic()
        built = build_cluster(factory, str(request.param), env=ENV, worker_skews=(SKEW, -SKEW, 0))
        print(f"\n{request.param}: cluster of 5 hosts up in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        factory.close()


@pytest.mark.timeout(300)
def test_cancel_from_one_web_host_ends_an_attempt_on_another_worker_host(
    cluster: Cluster,
) -> None:
    cluster.heal()
    web_a, web_b = cluster.clients
    latencies: dict[str, float] = {}
    # when a long attempt runs on each worker host and another web host cancels it
    for _ in range(12):
        if len(latencies) == len(cluster.workers):
            break
        job_id = web_a.submit("demo.sleep", {"seconds": 60, "step_seconds": 0.05})
        node = running_on(cluster, job_id)
        sent = time.monotonic()
        response = web_b.session.post(web_b.url(f"/api/jobs/{job_id}/cancel/"), timeout=30)
        assert response.status_code == 200, response.text

        def ended(job_id: str = job_id) -> bool:
            return bool(
                cluster.platform.scalar(
                    "SELECT count(*) = 0 FROM jobs_attempt WHERE job_id = %s"
                    " AND finished_at IS NULL",
                    (job_id,),
                )
            )

        wait_for(ended, timeout=30, interval=0.02, what="cancelled attempt ended")
        latencies.setdefault(node, time.monotonic() - sent)
        job = web_a.wait_job(job_id, timeout=30)
        assert job["status"] == "cancelled", job
    print(
        f"{cluster.broker}: cancel -> attempt ended (s) per worker host: "
        + ", ".join(f"{n} {s:.2f}" for n, s in sorted(latencies.items()))
        + f"; max {max(latencies.values()):.2f}"
    )
    # then it ended within 2 s on every worker host
    assert len(latencies) == len(cluster.workers), latencies
    assert max(latencies.values()) < 2.0, latencies


@pytest.mark.timeout(300)
def test_skewed_worker_clocks_no_double_run_listed_and_retry_delays_in_bounds(
    cluster: Cluster,
) -> None:
    cluster.heal()
    platform = cluster.platform
    # when flaky jobs (two planned failures) and short sleeps run on hosts whose clocks are
    # 90 s ahead (w1), 90 s behind (w2) and true (w3)
    specs = [("demo.flaky", {"fail_times": 2, "sleep_seconds": 0.05})] * 45
    specs += [("demo.sleep", {"seconds": 0.1, "step_seconds": 0.05})] * 30
    before = cluster.terminal()
    ids = cluster.submit_many(specs)
    waited = cluster.wait_terminal(before + len(ids), timeout=120)
    # then every job succeeded, each flaky one in exactly three attempts, none run twice
    statuses = dict(
        platform.rows(
            "SELECT status, count(*) FROM jobs_job WHERE id::text = ANY(%s) GROUP BY status",
            in_ids(ids),
        )
    )
    attempts = dict(
        platform.rows(
            "SELECT kind, count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
            " WHERE j.id::text = ANY(%s) GROUP BY kind",
            in_ids(ids),
        )
    )
    by_host = dict(
        platform.rows(
            "SELECT split_part(worker_hostname, '@', 1), count(*) FROM jobs_attempt"
            " WHERE job_id::text = ANY(%s) GROUP BY 1",
            in_ids(ids),
        )
    )
    overlapping, after_success, doubles = overlap_and_after_success(platform)
    # and every retry came within the backoff's bounds, by the database's clock
    gaps = [
        (float(g), float(d or 0))
        for g, d in platform.rows(
            "SELECT extract(epoch FROM b.started_at - a.finished_at), a.retry_delay_seconds"
            " FROM jobs_attempt a JOIN jobs_attempt b"
            " ON b.job_id = a.job_id AND b.number = a.number + 1 WHERE a.job_id::text = ANY(%s)",
            in_ids(ids),
        )
    ]
    # and the admin overview lists every worker (their reports judged by the database's clock)
    page = admin_overview(cluster.clients[0])
    listed = {h.name: f"{h.node} · pid" in page for h in cluster.workers}
    reported = [r[0] for r in platform.rows("SELECT hostname FROM jobs_workerreport")]
    print(
        f"{cluster.broker}: skewed clocks (w1 +{SKEW} s, w2 -{SKEW} s): {len(ids)} jobs terminal"
        f" in {waited:.1f} s; statuses {statuses}; attempts {attempts}; by host {by_host};"
        f" overlapping {overlapping}, after a success {after_success}, double successes"
        f" {doubles}; retry gaps {min(g for g, _ in gaps):.2f}..{max(g for g, _ in gaps):.2f} s"
        f" (planned {min(d for _, d in gaps):.2f}..{max(d for _, d in gaps):.2f} s);"
        f" listed in the admin overview {listed}; worker reports {sorted(reported)}"
    )
    assert statuses == {"succeeded": len(ids)}, statuses
    assert attempts == {"demo.flaky": 45 * 3, "demo.sleep": 30}, attempts
    assert min(by_host.get("w1", 0), by_host.get("w2", 0)) > 0, by_host
    assert (overlapping, after_success, doubles) == (0, 0, 0)
    assert len(gaps) == 45 * 2, len(gaps)
    assert all(
        FLAKY["backoff_floor"] - 0.05 <= d <= FLAKY["backoff_cap"] + 0.05 for _, d in gaps
    ), gaps
    assert all(0 <= g <= FLAKY["backoff_cap"] + 5 for g, _ in gaps), gaps
    assert all(listed.values()), (listed, page[-3000:])


JOBS_KILL = 500


@pytest.mark.timeout(480)
def test_worker_host_sigkilled_mid_run_every_job_terminal_once(cluster: Cluster) -> None:
    cluster.heal()
    platform = cluster.platform
    victim = cluster.workers[2]
    before = cluster.terminal()
    ids: list[str] = []
    specs = mixed_jobs(JOBS_KILL)
    submitter = threading.Thread(target=lambda: ids.extend(cluster.submit_many(specs)))
    started = time.monotonic()
    submitter.start()
    try:
        # when a worker host is SIGKILLed mid-run, with attempts running on it
        wait_for(
            lambda: cluster.terminal() - before >= JOBS_KILL // 4,
            timeout=240,
            interval=0.1,
            what="a quarter of the jobs terminal",
        )
        wait_for(
            lambda: (
                platform.scalar(
                    "SELECT count(*) FROM jobs_attempt WHERE finished_at IS NULL"
                    " AND worker_hostname = %s",
                    (victim.node,),
                )
                > 0
            ),
            timeout=30,
            interval=0.02,
            what=f"an attempt running on {victim.node}",
        )
        kill_host(victim)
        killed_at = platform.scalar("SELECT now()")
        killed_mono = time.monotonic()
    finally:
        submitter.join(timeout=240)
    assert len(ids) == JOBS_KILL
    in_flight = [
        str(r[0])
        for r in platform.rows(
            "SELECT job_id FROM jobs_attempt WHERE finished_at IS NULL AND worker_hostname = %s",
            (victim.node,),
        )
    ]
    # then every job is terminal within its lease + 60 s of the kill
    cluster.wait_terminal(before + JOBS_KILL, timeout=LEASE + 60 + 120)
    all_after = time.monotonic() - killed_mono
    late = platform.rows(
        "SELECT id, extract(epoch FROM finished_at - %s) FROM jobs_job WHERE id::text = ANY(%s)"
        " ORDER BY 2 DESC LIMIT 3",
        (killed_at, ids),
    )
    lost_jobs_after = platform.scalar(
        "SELECT coalesce(max(extract(epoch FROM finished_at - %s)), 0) FROM jobs_job"
        " WHERE id::text = ANY(%s)",
        (killed_at, in_flight),
    )
    statuses, outcomes = status_and_outcome_counts(platform, ids)
    overlapping, after_success, doubles = overlap_and_after_success(platform)
    # and the per-host attempt counters (each worker's and scheduler's /metrics; the killed
    # host's from the metrics files it left) add up to the attempt rows
    counters = cluster.attempt_counters(dead=victim)
    rows = int(platform.scalar("SELECT count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"))
    host_rows = {
        str(node).split("@")[0]: int(n)
        for node, n in platform.rows(
            "SELECT worker_hostname, count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"
            " GROUP BY 1"
        )
    }
    racing, victim_rows = last_rows_of(platform, victim.node, killed_at)
    print(
        f"{cluster.broker}: {JOBS_KILL} mixed jobs, {victim.node} SIGKILLed"
        f" {killed_mono - started:.1f} s in with {len(in_flight)} attempts running on it;"
        f" its jobs terminal {float(lost_jobs_after):.1f} s after the kill (lease {LEASE:.0f} s),"
        f" all {JOBS_KILL} {all_after:.1f} s after (latest {[round(float(s), 1) for _, s in late]});"
        f" statuses {statuses}; attempt outcomes {outcomes}; overlapping {overlapping},"
        f" after a success {after_success}, double successes {doubles};"
        f" attempt counters {counters} = {sum(counters.values()):.0f} vs {rows} attempt rows"
        f" (by worker host {host_rows})"
    )
    assert in_flight, "no attempt was running on the killed host"
    assert float(lost_jobs_after) <= LEASE + 60
    assert all(float(s) <= LEASE + 60 for _, s in late), late
    assert (overlapping, after_success, doubles) == (0, 0, 0)
    live = [h.name for h in cluster.workers if h is not victim]
    assert [counters[n] for n in live] == [host_rows.get(n, 0) for n in live], host_rows
    # A SIGKILL can land between an attempt's row commit and its counter's increment (the
    # attempt_finished receivers run after the commit): such rows, written by the killed host
    # in its last half second (`racing`), may be missing from its counters; nothing is ever
    # counted twice.
    print(f"rows the killed host wrote in its last 0.5 s: {racing}; its last rows {victim_rows}")
    assert 0 <= rows - sum(counters.values()) <= racing, (counters, rows, victim_rows)


@pytest.mark.timeout(480)
def test_rolling_restart_of_every_worker_host_under_load(cluster: Cluster) -> None:
    cluster.heal()
    platform = cluster.platform
    rng = random.Random(4)
    specs: list[tuple[str, dict[str, Any]]] = [
        ("demo.sleep", {"seconds": rng.choice((0.2, 0.5, 1.0, 2.0)), "step_seconds": 0.05})
        if i % 3
        else ("demo.flaky", {"fail_times": 1, "sleep_seconds": 0.2})
        for i in range(240)
    ]
    ids: list[str] = []
    before = cluster.terminal()

    def submit() -> None:
        for start in range(0, len(specs), 20):  # a steady stream, through the whole restart
            ids.extend(cluster.submit_many(specs[start : start + 20], threads=2))
            time.sleep(0.5)

    submitter = threading.Thread(target=submit)
    submitter.start()
    stops: list[tuple[str, int | None, float]] = []
    try:
        wait_for(lambda: len(ids) >= 40, timeout=60, what="40 submissions")
        # when each worker host in turn gets SIGTERM (killed only past hard limit + 10 s)
        # and comes back
        for host in cluster.workers:
            assert host.worker is not None
            began = time.monotonic()
            code = host.worker.stop(sig=signal.SIGTERM, timeout=HARD + 10)
            stops.append((host.name, code, time.monotonic() - began))
            cluster.start_worker(host)
    finally:
        submitter.join(timeout=300)
    waited = cluster.wait_terminal(before + len(specs), timeout=240)
    statuses, outcomes = status_and_outcome_counts(platform, ids)
    overlapping, after_success, doubles = overlap_and_after_success(platform)
    print(
        f"{cluster.broker}: rolling restart of {len(stops)} worker hosts under {len(ids)} jobs:"
        f" stops (host, exit code, s) {[(n, c, round(s, 1)) for n, c, s in stops]};"
        f" all terminal {waited:.1f} s after the last restart; statuses {statuses};"
        f" attempt outcomes {outcomes}; overlapping {overlapping}, after a success"
        f" {after_success}, double successes {doubles}"
    )
    # then no attempt was lost, nothing ran twice, every job succeeded
    assert len(ids) == len(specs)
    assert outcomes.get("worker_lost", 0) == 0, outcomes
    assert (overlapping, after_success, doubles) == (0, 0, 0)
    assert statuses == {"succeeded": len(ids)}, statuses
    assert all(code == 0 for _, code, _ in stops), stops


@pytest.mark.timeout(420)
def test_broker_restart_during_submissions_loses_nothing(cluster: Cluster) -> None:
    cluster.heal()
    platform = cluster.platform
    ids: list[str] = []
    refused: list[int] = []
    stop = threading.Event()

    def submit() -> None:
        while not stop.is_set() and len(ids) < 150:
            response = cluster.client().post_job(
                {"kind": "demo.sleep", "payload": {"seconds": 0.05, "step_seconds": 0.05}}
            )
            if response.status_code == 202:
                ids.append(response.json()["id"])
            else:
                refused.append(response.status_code)
            time.sleep(0.03)

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        # when the broker restarts mid-stream (Redis without persistence: its queues are
        # gone; RabbitMQ: the vhost, its quorum queues and every connection to it)
        wait_for(lambda: len(ids) >= 40, timeout=60, what="40 submissions")
        restarted_at = len(ids)
        began = time.monotonic()
        if platform.vhost is not None:
            platform.vhost.restart()
        else:
            platform.redis.stop()
            platform.redis.start()
        down = time.monotonic() - began
        wait_for(lambda: len(ids) >= 150, timeout=180, what="150 submissions")
    finally:
        stop.set()
        thread.join(timeout=60)
    # then every accepted job succeeds: nothing accepted was lost
    finished = time.monotonic()
    wait_for(
        lambda: (
            platform.scalar(
                "SELECT count(*) FROM jobs_job WHERE status = 'succeeded' AND id::text = ANY(%s)",
                in_ids(ids),
            )
            == len(ids)
        ),
        timeout=180,
        interval=0.5,
        what=f"{len(ids)} jobs succeeded",
    )
    overlapping, after_success, doubles = overlap_and_after_success(platform)
    print(
        f"{cluster.broker}: broker restarted ({down:.1f} s) after {restarted_at} of {len(ids)}"
        f" accepted submissions; refused {refused}; all succeeded"
        f" {time.monotonic() - finished:.1f} s after the last; overlapping {overlapping},"
        f" after a success {after_success}, double successes {doubles}"
    )
    assert (overlapping, after_success, doubles) == (0, 0, 0)
