"""Issue 24's two-host acceptance for concurrency limits (soak: run on demand, `pytest -m soak
tests/integration/test_concurrency_soak.py`; about 4 minutes).

Two worker hosts in network namespaces (tests/integration/multi_host.py), each with two
workers of 4 children (4 workers x 4 = 16 children competing for the slots), and one host
with the web and the scheduler (tick 0.1 s, harness.BASE_ENV); Redis, PostgreSQL. Live
attempts are unfinished attempt rows, sampled from the database every 50 ms.

(a) `demo.sleep` limited to 3, 300 jobs of 1 s: never more than 3 live, all 300 succeed,
    throughput within 15 % of 3 jobs/s (at least 2.55/s, from the first submit to the last
    success).
(b) `demo.flaky` limited to 1 per "account" (its payload's sleep_seconds stands in for an
    account id, one distinct value per account), 50 accounts x 10 jobs: never two live for
    one account, and each account's jobs start in submission (enqueue) order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.services import wait_for
from tests.integration.concurrency_sampling import Sampler, live_sql, slot_gaps
from tests.integration.harness import PlatformFactory, require_postgres
from tests.integration.multi_host import Cluster, build_cluster, start_second_workers

pytestmark = [pytest.mark.integration, pytest.mark.soak]

LIMIT = 3
JOBS = 300
SECONDS = 1.0
ACCOUNTS = 50
PER_ACCOUNT = 10
ENV = {
    "JOBS_KIND_OVERRIDES": json.dumps(
        {
            "demo.sleep": {"concurrency": LIMIT},
            "demo.flaky": {"concurrency": 1, "concurrency_key": "sleep_seconds"},
        }
    ),
    "JOBS_QUEUE_MAX_READY": str(10**6),
}


@pytest.fixture(scope="module")
def cluster(_logroot: Path) -> Iterator[Cluster]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        started = time.monotonic()
        built = build_cluster(
            factory, "redis", env=ENV, worker_skews=(0, 0), web_hosts=1, worker_concurrency=4
        )
        # A second worker of 4 children on each worker host: 4 workers x 4 on two hosts.
        start_second_workers(built)
        print(f"\ncluster of 3 hosts, 4 workers x 4 up in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        factory.close()


def _succeeded(cluster: Cluster, kind: str, total: int, timeout: float) -> None:
    def done() -> bool:
        count = cluster.platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE kind = %s AND status = 'succeeded'", (kind,)
        )
        return bool(count == total)

    try:
        wait_for(done, timeout=timeout, interval=0.1, what=f"{total} {kind} succeeded")
    except TimeoutError as exc:
        rows = cluster.platform.rows(
            "SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2"
        )
        raise AssertionError(f"{exc}: {rows}") from None


@pytest.mark.timeout(900)
def test_concurrency_3_across_two_hosts_holds_and_keeps_throughput(cluster: Cluster) -> None:
    platform = cluster.platform
    specs = [("demo.sleep", {"seconds": SECONDS, "step_seconds": 0.1})] * JOBS

    # when 300 jobs of 1 s are submitted at once to a kind limited to 3
    with Sampler(platform, live_sql("demo.sleep", "j.kind")) as sampler:
        began = time.monotonic()
        cluster.submit_many(specs, threads=4)
        submitted = time.monotonic() - began
        _succeeded(cluster, "demo.sleep", JOBS, timeout=JOBS / LIMIT * SECONDS * 3)
        took = time.monotonic() - began

    # then never more than 3 were live, all 300 succeeded, at 3 jobs/s within 15 %
    attempts = platform.scalar(
        "SELECT count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
        " WHERE j.kind = 'demo.sleep'"
    )
    held = platform.scalar(
        "SELECT count(*) FROM jobs_job WHERE kind = 'demo.sleep' AND deliveries > 1"
    )
    hosts = platform.rows(
        "SELECT split_part(worker_hostname, '@', 1), count(*) FROM jobs_attempt a"
        " JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = 'demo.sleep' GROUP BY 1 ORDER BY 1"
    )
    rate = JOBS / took
    print(
        f"\n(a) concurrency={LIMIT}: {JOBS} jobs of {SECONDS:.0f} s on 2 hosts x 2 workers x 4"
        f" children: submitted in {submitted:.1f} s, all succeeded in {took:.1f} s ="
        f" {rate:.2f} jobs/s (ideal {LIMIT / SECONDS:.0f}, floor 2.55); peak live"
        f" {sampler.peak} in {sampler.samples} samples; {attempts} attempts; {held} jobs held"
        f" at least once; freed slot idle {slot_gaps(platform, 'demo.sleep', LIMIT)};"
        f" attempts per worker {dict(hosts)}"
    )
    assert sampler.samples > 100
    assert 1 <= sampler.peak <= LIMIT
    assert attempts == JOBS
    assert rate >= 0.85 * LIMIT / SECONDS


@pytest.mark.timeout(900)
def test_concurrency_key_one_per_account_in_submission_order(cluster: Cluster) -> None:
    platform = cluster.platform
    accounts = [round(0.1 + 0.002 * n, 3) for n in range(ACCOUNTS)]
    # One account's jobs 50 submissions apart: their enqueue order is their submission order.
    specs = [
        ("demo.flaky", {"fail_times": 0, "sleep_seconds": account})
        for _ in range(PER_ACCOUNT)
        for account in accounts
    ]

    # when 50 accounts x 10 jobs are submitted to a kind limited to 1 per account
    with Sampler(platform, live_sql("demo.flaky", "j.payload->>'sleep_seconds'")) as sampler:
        began = time.monotonic()
        cluster.submit_many(specs, threads=4)
        _succeeded(cluster, "demo.flaky", len(specs), timeout=600)
        took = time.monotonic() - began

    # then never two live attempts for one account, and each account's jobs started in order
    keys = platform.scalar("SELECT count(DISTINCT payload->>'sleep_seconds') FROM jobs_job")
    inversions = platform.scalar(
        "SELECT count(*) FROM jobs_job x JOIN jobs_job y"
        " ON x.kind = 'demo.flaky' AND y.kind = 'demo.flaky'"
        " AND x.payload->>'sleep_seconds' = y.payload->>'sleep_seconds'"
        " AND (x.enqueued_at, x.id) < (y.enqueued_at, y.id) AND x.started_at > y.started_at"
    )
    attempts = platform.scalar(
        "SELECT count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
        " WHERE j.kind = 'demo.flaky'"
    )
    print(
        f"\n(b) concurrency_key: {ACCOUNTS} accounts x {PER_ACCOUNT} jobs on 2 hosts: all"
        f" succeeded in {took:.1f} s ({len(specs) / took:.1f} jobs/s); peak live per account"
        f" {sampler.peak} in {sampler.samples} samples; {inversions} pairs of one account"
        f" started out of submission order; {attempts} attempts"
    )
    assert keys == ACCOUNTS
    assert sampler.samples > 20
    assert sampler.peak == 1
    assert inversions == 0
    assert attempts == len(specs)
