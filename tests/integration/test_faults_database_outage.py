"""The database server stops and comes back while clients submit: no 500, nothing lost or run twice.

Issue 8, the kind "every database use in every process survives a dropped
connection", with the whole server gone rather than one connection: a
private PostgreSQL (devstack.postgres.PostgresServer, on a spare port) is
stopped the way a crash or a failover stops it (`immediate`: no shutdown
checkpoint) while four clients POST jobs, each with an Idempotency-Key of
its own, and started again a few seconds later.

Every POST is answered 202 or 503 + Retry-After. A 503 means "not taken,
try again": a submission whose row committed and whose message was
published is answered 202 even when the connection dies before
`published_at` is written. A client that retries each 503 with its key
ends with exactly one job per key, each run exactly once. (A COMMIT whose
answer is lost can still leave a row behind a 503: that ambiguity is why
the key exists; the retry finds the job.)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
import requests

from devstack.postgres import PostgresServer, postgres_reachable
from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform, require_postgres
from tests.integration.test_faults_database import terminate_backends

CLIENTS = 4
BEFORE = 40  # accepted submissions before the stop
DURING = 30  # answers while the server is down
AFTER = 40  # accepted submissions after it is back
JOB: dict[str, Any] = {"kind": "demo.sleep", "payload": {"seconds": 0.05, "step_seconds": 0.05}}


@dataclass
class Clients:
    """Threads that POST a job with a fresh Idempotency-Key each, until stopped."""

    platform: Platform
    answers: list[tuple[str, int, str | None]] = field(default_factory=list)
    accepted_ids: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        with requests.Session() as session:
            session.headers["Authorization"] = f"Token {self.platform.token}"
            while not self.stop.is_set():
                key = f"outage-{uuid.uuid4()}"
                try:
                    response = session.post(
                        self.platform.url("/api/jobs/"),
                        json=JOB,
                        headers={"Idempotency-Key": key},
                        timeout=HTTP_TIMEOUT,
                    )
                    answer = (key, response.status_code, response.headers.get("Retry-After"))
                    if response.status_code == 202:
                        with self.lock:
                            self.accepted_ids.add(response.json()["id"])
                except requests.RequestException as exc:  # counted below: must not happen
                    answer = (key, -1, type(exc).__name__)
                with self.lock:
                    self.answers.append(answer)

    def count(self, code: int, since: int = 0) -> int:
        with self.lock:
            return sum(1 for _, status, _ in self.answers[since:] if status == code)

    def __len__(self) -> int:
        with self.lock:
            return len(self.answers)


@pytest.fixture
def private_postgres(monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, used by the platforms it builds."""
    try:
        server = PostgresServer().start()
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"cannot start a private PostgreSQL server: {exc}", pytrace=False)
    monkeypatch.setenv("TEST_POSTGRES_URL", server.url)
    try:
        yield server
    finally:
        server.destroy()


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.slow
def test_server_stopped_during_submissions_every_job_taken_once_and_run_once(
    private_postgres: PostgresServer, platform_factory: Callable[..., Platform]
) -> None:
    # given a platform on a PostgreSQL server of its own, and four clients submitting
    platform = platform_factory("pg_outage")
    clients = Clients(platform)
    with ThreadPoolExecutor(CLIENTS) as pool:
        for _ in range(CLIENTS):
            pool.submit(clients.run)
        try:
            wait_for(lambda: clients.count(202) >= BEFORE, timeout=60, what="submissions")

            # when the server stops as a crash would, and starts again once
            # the clients have been answered during the outage
            private_postgres.stop(mode="immediate")
            down_at = len(clients)
            try:
                wait_for(
                    lambda: len(clients) - down_at >= DURING,
                    timeout=60,
                    what="answers while the database is down",
                )
            finally:
                private_postgres.start()
            up_at = len(clients)
            wait_for(
                lambda: clients.count(202, since=up_at) >= AFTER,
                timeout=90,
                what="submissions after the restart",
            )
        finally:
            clients.stop.set()

    # then every POST was answered 202 or 503 with Retry-After; never a 500
    codes = {status for _, status, _ in clients.answers}
    assert codes <= {202, 503}, sorted(codes)
    refused = [key for key, status, _ in clients.answers if status == 503]
    assert all(after for _, status, after in clients.answers if status == 503)
    assert refused, "the outage refused no submission: the server was not down"
    # and a job published but not stamped when the connection died was answered 202
    assert platform.web is not None
    unstamped = re.findall(r"published but not stamped job_id=([0-9a-f-]+)", platform.web.log())
    assert set(unstamped) <= clients.accepted_ids, unstamped
    committed_behind_503 = platform.scalar(
        "SELECT count(*) FROM jobs_job WHERE idempotency_key = ANY(%s)", (refused,)
    )

    # (a COMMIT whose answer was lost would leave one too; that window is
    # microseconds wide, against the publish's millisecond before the stamp)
    assert committed_behind_503 == 0, f"{committed_behind_503} jobs taken but answered 503"

    # and a client that retries each 503 with its key ends with one job per key
    def retry(key: str) -> int:
        deadline = time.monotonic() + 60
        while True:
            response = platform.post_job(JOB, headers={"Idempotency-Key": key})
            if response.status_code != 503 or time.monotonic() > deadline:
                return response.status_code
            time.sleep(float(response.headers.get("Retry-After", "1")))

    with ThreadPoolExecutor(CLIENTS) as pool:
        retried = list(pool.map(retry, refused))
    assert set(retried) <= {200, 202}, sorted(retried)
    keys = [key for key, _, _ in clients.answers]
    assert platform.scalar("SELECT count(*) FROM jobs_job") == len(keys)
    assert platform.scalar(
        "SELECT count(DISTINCT idempotency_key) FROM jobs_job WHERE idempotency_key = ANY(%s)",
        (keys,),
    ) == len(keys)

    # and every job succeeds after exactly one attempt, nothing lost or run twice
    wait_for(
        lambda: (
            platform.scalar(
                "SELECT count(*) FROM jobs_job WHERE status NOT IN ('succeeded', 'dead', 'cancelled')"
            )
            == 0
        ),
        timeout=120,
        interval=0.2,
        what=f"{len(keys)} jobs finished",
    )
    statuses = dict(platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY status"))
    assert statuses == {"succeeded": len(keys)}, statuses
    attempts = platform.scalar("SELECT count(*) FROM jobs_attempt")
    assert attempts == len(keys), platform.log_tails()
    # and every process rode it out
    for process in platform.stack.processes:
        assert process.alive(), f"{process.name} exited:\n{platform.log_tails()}"
    assert postgres_reachable(private_postgres.url)
    print(
        f"database server stopped during submissions: {len(keys)} POSTs, "
        f"{len(keys) - len(refused)} answered 202, {len(refused)} answered 503 "
        f"({committed_behind_503} of them committed, found by the retry with their key); "
        f"{len(unstamped)} published but not stamped, answered 202; "
        f"{len(keys)} jobs, {attempts} attempts"
    )


def _set_read_only(platform: Platform, on: bool) -> None:
    """Make the platform's database read-only (or writable again) for new sessions, then
    drop its sessions: what a failover onto a standby or a demoted primary looks like."""
    db_name = platform.database_url.rsplit("/", 1)[1].split("?", 1)[0]
    admin = require_postgres().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        setting = "SET default_transaction_read_only = on" if on else "RESET ALL"
        conn.execute(f'ALTER DATABASE "{db_name}" {setting}')
    terminate_backends(platform)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_read_only_database_after_a_failover_answers_503_and_runs_nothing_twice(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform with a 3 s attempt running
    platform = platform_factory("pg_read_only")
    running = platform.submit("demo.sleep", {"seconds": 3, "step_seconds": 0.05})
    platform.wait_job(running, statuses=frozenset({"running"}))

    # when its database turns read-only (a failover landed it on a standby)
    _set_read_only(platform, on=True)
    try:
        answers = [
            platform.post_job(JOB, headers={"Idempotency-Key": f"ro-{uuid.uuid4()}"})
            for _ in range(5)
        ]
        reads = platform.session.get(platform.url(f"/api/jobs/{running}/"), timeout=HTTP_TIMEOUT)
        # the attempt ends and fails to write its outcome meanwhile
        wait_for(
            lambda: "read-only transaction" in (platform.worker.log() if platform.worker else ""),
            timeout=30,
            what="the attempt's outcome refused by the read-only database",
        )
    finally:
        _set_read_only(platform, on=False)

    # then submissions were refused with 503 + Retry-After, never 500, and reads went on
    assert [a.status_code for a in answers] == [503] * 5, [a.text[:200] for a in answers]
    assert all(a.headers.get("Retry-After") for a in answers)
    assert reads.status_code == 200, reads.text
    assert platform.scalar("SELECT count(*) FROM jobs_job") == 1
    # and the attempt's outcome was written once the database took writes again: one attempt
    finished = platform.wait_job(running, timeout=60)
    assert finished["status"] == "succeeded", finished
    outcomes = platform.rows("SELECT outcome FROM jobs_attempt ORDER BY number")
    assert outcomes == [("succeeded",)], outcomes
    # and submissions are taken again
    platform.wait_job(platform.submit(JOB["kind"], JOB["payload"]), timeout=60)
    print(
        f"read-only database: 5 POSTs answered {answers[0].status_code}, the running job's "
        f"outcome written after {finished['attempts_made']} attempt(s)"
    )


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_outcome_kept_on_disk_survives_losing_redis_during_a_database_outage(
    private_postgres: PostgresServer, platform_factory: Callable[..., Platform]
) -> None:
    # given a 1 s job with an 8 s lease (hard limit 6 s + grace 2 s), running
    platform = platform_factory(
        "pg_spool",
        env={
            # The Redis state store keeps the second copy this test empties.
            "JOBS_STATE_STORE": "redis",
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.sleep": {"max_attempts": 3, "soft_time_limit": 5, "hard_time_limit": 6}}
            ),
            "JOBS_LEASE_GRACE": "2",
            "JOBS_DB_RETRY_SECONDS": "2",
        },
    )
    job_id = platform.submit("demo.sleep", {"seconds": 1, "step_seconds": 0.05})
    platform.wait_job(job_id, statuses=frozenset({"running"}))
    started = time.monotonic()

    # when the database stops before the attempt can record its end
    private_postgres.stop(mode="immediate")
    assert platform.worker is not None
    try:
        wait_for(
            lambda: "kept in disk and redis" in platform.worker.log(),
            timeout=30,
            what="the outcome spooled",
        )
        # and Redis restarts empty (its copy is gone) while the lease runs out
        platform.redis.stop()
        platform.redis.start()
        wait_for(lambda: time.monotonic() - started > 10, timeout=30, what="the lease expired")
    finally:
        private_postgres.start()
    back = time.monotonic()

    # then the worker writes the outcome it kept on disk: one attempt, no rerun
    finished = platform.wait_job(job_id, timeout=60)
    recorded_after = time.monotonic() - back
    assert finished["status"] == "succeeded", finished
    outcomes = platform.rows("SELECT outcome FROM jobs_attempt ORDER BY number")
    assert outcomes == [("succeeded",)], f"{outcomes}\n{platform.log_tails()}"
    assert "wrote 1 outcomes spooled on this host" in platform.worker.log()
    # and a later job runs normally
    assert platform.wait_job(platform.submit(JOB["kind"], JOB["payload"]))["status"] == "succeeded"
    print(
        f"outcome kept on disk through a database outage and an emptied Redis: "
        f"recorded {recorded_after:.1f} s after the database came back, 1 attempt"
    )


def _backends(server: PostgresServer, platform: Platform) -> list[int]:
    db_name = platform.database_url.rsplit("/", 1)[1].split("?", 1)[0]
    with psycopg.connect(server.url.replace("postgres://", "postgresql://", 1)) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (db_name,),
        ).fetchall()
    return [pid for (pid,) in rows]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_silent_database_connections_are_cut_at_the_deadline(
    private_postgres: PostgresServer, platform_factory: Callable[..., Platform]
) -> None:
    # given a platform whose round trips may wait 3 s, and a job waiting 8 s for its retry
    platform = platform_factory(
        "pg_silent",
        env={
            "DATABASE_QUERY_DEADLINE": "3",
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_base": 8, "backoff_floor": 8, "backoff_cap": 8}}
            ),
        },
    )
    job_id = platform.submit("demo.flaky", {"fail_times": 1})
    platform.wait_job(job_id, statuses=frozenset({"retrying"}))

    # when every server process holding one of its connections freezes (the host
    # still acknowledges the bytes: nothing fails, nothing answers)
    frozen = _backends(private_postgres, platform)
    assert frozen
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        # then a request is answered within the deadline plus a reconnection
        asked = time.monotonic()
        response = platform.session.get(platform.url("/api/jobs/"), timeout=HTTP_TIMEOUT)
        answered = time.monotonic() - asked
        assert response.status_code in (200, 503), response.text[:300]
        assert answered < 10, answered
        # and the scheduler, cut loose from its silent connection, promotes the retry
        wait_for(
            lambda: (
                platform.scalar("SELECT status FROM jobs_job WHERE id = %s", (job_id,))
                != "retrying"
            ),
            timeout=40,
            interval=0.5,
            what="the retry promoted while the old connections are frozen",
        )
        assert platform.scheduler is not None
        assert "database connection cut" in platform.scheduler.log() + platform.web.log()  # type: ignore[union-attr]
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    # and the job then runs its retry
    assert platform.wait_job(job_id, timeout=90)["status"] == "succeeded"
    print(
        f"silent database connections ({len(frozen)} frozen server processes): a request "
        f"answered {response.status_code} after {answered:.1f} s; the retry promoted"
    )
