"""Dropped database connections: every process reconnects; an outcome is written, never the work redone.

Issue 8, items 1 and 4 (failing inputs tried as a new user would, on
PostgreSQL): connections are dropped with
`pg_terminate_backend(pid) ... WHERE datname = '<db>'`, as a managed
PostgreSQL does during maintenance.

1a. After the worker's main process used its connection (a first hard time
    limit), the backends are terminated; the next job that hits its hard
    limit is recorded `hard_timeout` about 3 s after it started (not 33 s
    later by the lease sweep), the hard-limit metric moves, and a child lost
    in the same state is recorded by the main process too.
1b. 300 short jobs and 8 jobs with 2 s attempts; the backends are
    terminated twice mid-run: every job succeeds, each ran exactly once (no
    attempt declared lost and run again), nothing stays running > 30 s.
4.  An attempt ended by its hard limit or by a lost child has its span, in
    the job's trace, status ERROR with the outcome; the API shows its trace
    id (and, for the hard limit, the RSS the child had when it was stopped).

The web answers during all this (the scheduler's retries and the API's
reads go on) — no 500.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform, PlatformFactory, require_postgres
from tests.integration.telemetry import scrape

SLEEP_POLICY = {"max_attempts": 1, "soft_time_limit": 2, "hard_time_limit": 3}
UNKILLABLE = {"seconds": 10, "mode": "unkillable"}


def terminate_backends(platform: Platform) -> int:
    """Drop every connection to the platform's database, as a managed PostgreSQL's maintenance does."""
    db_name = platform.database_url.rsplit("/", 1)[1].split("?", 1)[0]
    admin = require_postgres().replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (db_name,),
        ).fetchall()
    return len(rows)


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def plat(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    span_file = tmp_path_factory.mktemp("spans") / "spans.jsonl"
    try:
        platform = factory(
            "faults_database",
            env={
                "JOBS_KIND_OVERRIDES": json.dumps(
                    {
                        "demo.sleep": SLEEP_POLICY,
                        "demo.flaky": {
                            "backoff_base": 0.2,
                            "backoff_floor": 0.1,
                            "backoff_cap": 0.5,
                        },
                    }
                ),
                "JOBS_POISON_AFTER": "1",
                "OTEL_SDK_DISABLED": "false",
                "JOBS_OTEL_SPAN_FILE": str(span_file),
            },
        )
        platform.span_file = span_file  # type: ignore[attr-defined]
        yield platform
    finally:
        factory.close()


def spans(platform: Platform) -> list[dict[str, Any]]:
    path: Path = platform.span_file  # type: ignore[attr-defined]
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_hard_limit_and_lost_child_recorded_by_the_main_process_after_connections_drop(
    plat: Platform,
) -> None:
    # given a first hard time limit, which opened the worker main process's connection
    first = plat.wait_job(plat.submit("demo.sleep", UNKILLABLE), timeout=60)
    assert [a["outcome"] for a in first["attempts"]] == ["hard_timeout"], first
    hard_before = scrape(plat.worker_metrics_url).total("jobs_time_limits_hit_total", limit="hard")

    # when every connection to the database is dropped
    assert terminate_backends(plat) >= 1
    # and another job runs into its hard limit (3 s)
    job_id = plat.submit("demo.sleep", UNKILLABLE)
    job = plat.wait_job(job_id, timeout=60)

    # then its hard_timeout is recorded ~3 s after it started, by the main process
    [attempt] = job["attempts"]
    assert (job["status"], attempt["outcome"]) == ("dead", "hard_timeout"), job
    took = (_at(attempt["finished_at"]) - _at(attempt["started_at"])).total_seconds()
    assert 2.5 <= took < 10, took
    print(f"database drop, hard limit: hard_timeout recorded {took:.2f} s after the start")
    # and the hard-limit metric moved
    hard_after = scrape(plat.worker_metrics_url).total("jobs_time_limits_hit_total", limit="hard")
    assert hard_after == hard_before + 1
    # and the attempt has its trace id and the RSS its child had when stopped (item 4)
    assert attempt["trace_id"], attempt
    assert attempt["rss_after_bytes"], attempt

    # when the connections are dropped again and a child is killed mid-attempt
    assert terminate_backends(plat) >= 1
    crash = plat.wait_job(plat.submit("demo.crash", {"signal": "SIGKILL"}), timeout=60)
    # then the main process records the loss at once (poison after one loss here)
    [lost] = crash["attempts"]
    assert (crash["status"], crash["dead_reason"], lost["outcome"]) == (
        "dead",
        "poison",
        "worker_lost",
    ), crash
    assert (_at(lost["finished_at"]) - _at(lost["started_at"])).total_seconds() < 10
    assert lost["trace_id"], lost
    log = plat.worker.log() if plat.worker else ""
    assert "could not record" not in log
    assert "Pool callback raised exception" not in log

    # and each attempt ended from outside has one span, in its job's trace, status ERROR
    def outside_spans() -> list[dict[str, Any]] | None:
        found = [
            s
            for s in spans(plat)
            if s["name"].startswith("job.attempt")
            and s["attributes"].get("job.id") in (job_id, crash["id"])
        ]
        return found if len(found) == 2 else None

    found = wait_for(
        outside_spans, timeout=30, interval=0.5, what="spans of outside-ended attempts"
    )
    by_job = {s["attributes"]["job.id"]: s for s in found}
    assert by_job[job_id]["attributes"]["job.outcome"] == "hard_timeout"
    assert by_job[crash["id"]]["attributes"]["job.outcome"] == "worker_lost"
    for job_row, span in ((job, by_job[job_id]), (crash, by_job[crash["id"]])):
        assert span["status"] == "ERROR", span
        assert span["trace_id"] == job_row["attempts"][0]["trace_id"], span
        duration = (span["end_time_unix_nano"] - span["start_time_unix_nano"]) / 1e9
        assert 0 <= duration < 10, span


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_outcomes_written_on_a_fresh_connection_no_job_runs_twice(plat: Platform) -> None:
    # given 300 short jobs
    with ThreadPoolExecutor(8) as pool:
        short = list(pool.map(lambda _: plat.submit("demo.flaky", {"fail_times": 0}), range(300)))

    # when the connections are dropped twice while 2 s attempts are running (4 of
    # them submitted before each drop: the first batch could be done before the
    # submissions above are, on a loaded machine)
    slow: list[str] = []
    for _ in range(2):
        batch = [plat.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": 2}) for _ in range(4)]
        slow += batch
        wait_for(
            lambda batch=batch: (
                plat.scalar(
                    "SELECT count(*) FROM jobs_job WHERE status = 'running' AND id = ANY(%s)",
                    (batch,),
                )
                > 0
            ),
            timeout=120,
            interval=0.05,
            what="a 2 s attempt running",
        )
        assert terminate_backends(plat) >= 1
        # the API keeps answering meanwhile: never a 500
        codes = {plat.session.get(plat.url(f"/api/jobs/{slow[0]}/"), timeout=30).status_code}
        assert codes <= {200, 503}, codes

    # then every job succeeded, each after exactly one attempt, none stuck
    finished = [plat.wait_job(j, timeout=120) for j in slow + short]
    assert {j["status"] for j in finished} == {"succeeded"}
    attempts = plat.scalar(
        "SELECT count(*) FROM jobs_attempt a WHERE a.job_id = ANY(%s::uuid[])",
        ([*slow, *short],),
    )
    assert attempts == len(slow) + len(short)
    lost = plat.scalar(
        "SELECT count(*) FROM jobs_attempt WHERE outcome = 'worker_lost' AND job_id = ANY(%s::uuid[])",
        ([*slow, *short],),
    )
    assert lost == 0
    longest = plat.scalar(
        "SELECT max(extract(epoch FROM finished_at - started_at)) FROM jobs_attempt "
        "WHERE job_id = ANY(%s::uuid[])",
        ([*slow, *short],),
    )
    assert longest < 30, longest
    print(
        f"database drops, {len(slow) + len(short)} jobs: {attempts} attempts, {lost} lost, "
        f"longest attempt {longest:.2f} s"
    )
    # and the scheduler still promotes retries
    retried = plat.wait_job(plat.submit("demo.flaky", {"fail_times": 1}), timeout=60)
    assert retried["status"] == "succeeded", retried


def _child_connections(platform: Platform, admin: psycopg.Connection) -> dict[int, datetime]:
    """{pid of each worker child: when its connection to the platform's database opened}.

    Each child's one established TCP connection to PostgreSQL (psutil), matched
    by its client port to pg_stat_activity's backend_start (the database's clock).
    """
    assert platform.worker is not None
    db_name = platform.database_url.rsplit("/", 1)[1].split("?", 1)[0]
    pg_port = urlsplit(platform.database_url).port or 5432
    started: dict[int, datetime] = dict(
        admin.execute(
            "SELECT client_port, backend_start FROM pg_stat_activity WHERE datname = %s",
            (db_name,),
        ).fetchall()
    )
    found: dict[int, datetime] = {}
    for child in platform.worker.children():
        ports = [
            c.laddr.port
            for c in child.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == pg_port and c.status == psutil.CONN_ESTABLISHED
        ]
        opened = [started[port] for port in ports if port in started]
        assert len(opened) <= 1, (child.pid, opened)
        if opened:
            found[child.pid] = opened[0]
    return found


def _attempts_before(
    admin_db: psycopg.Connection, jobs: list[str], since: datetime, opened: dict[int, datetime]
) -> dict[int, tuple[int, int]]:
    """{child pid: (its attempts of `jobs` started since `since`, how many of them before
    its current connection opened)}."""
    counts = {}
    for pid, backend_start in opened.items():
        row = admin_db.execute(
            "SELECT count(*), count(*) FILTER (WHERE started_at < %s) FROM jobs_attempt "
            "WHERE worker_pid = %s AND job_id = ANY(%s::uuid[]) AND started_at >= %s",
            (backend_start, pid, jobs, since),
        ).fetchone()
        assert row is not None
        counts[pid] = (int(row[0]), int(row[1]))
    return counts


def _scalar(conn: psycopg.Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_each_worker_child_reuses_one_connection_across_attempts_and_a_drop(
    plat: Platform,
) -> None:
    # Measured per child, not as the database's session count: that count also
    # held the web's and the scheduler's connections, renewed every
    # CONN_MAX_AGE (60 s) of a run that takes longer on a loaded machine, and
    # one per poll of this test (22 sessions under load, 18 alone, against a
    # bound of 20). A child's connection is identified by its client port.
    admin_url = require_postgres().replace("postgres://", "postgresql://", 1)
    platform_db = plat.database_url.replace("postgres://", "postgresql://", 1)
    # (this test's reads: one connection, and one more after the drop ends it)
    reads = psycopg.connect(platform_db, autocommit=True)
    with psycopg.connect(admin_url, autocommit=True) as admin:

        def sessions() -> int:
            admin.execute("SELECT pg_stat_clear_snapshot()")
            db_name = plat.database_url.rsplit("/", 1)[1].split("?", 1)[0]
            row = admin.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = %s", (db_name,)
            ).fetchone()
            return int(row[0]) if row else 0

        def succeeded(jobs: list[str]) -> int:
            return int(
                _scalar(
                    reads,
                    "SELECT count(*) FROM jobs_job"
                    " WHERE status = 'succeeded' AND id = ANY(%s::uuid[])",
                    (jobs,),
                )
            )

        # given two worker children that have run attempts (their connections are open)
        warm = [plat.submit("demo.flaky", {"fail_times": 0}) for _ in range(10)]
        assert {plat.wait_job(j)["status"] for j in warm} == {"succeeded"}
        before = sessions()
        drain_started = _scalar(reads, "SELECT now()")

        # when 200 jobs are drained by the 2 children, the connections dropped halfway
        # (between two halves of 100: a drain racing the drop could end before it
        # on a machine where this test's process is the slow one)
        def drain() -> list[str]:
            with ThreadPoolExecutor(8) as pool:
                half = list(
                    pool.map(lambda _: plat.submit("demo.flaky", {"fail_times": 0}), range(100))
                )
            wait_for(lambda: succeeded(half) == 100, timeout=120, interval=0.1, what="a half")
            return half

        first = drain()
        before_drop = _attempts_before(reads, first, drain_started, _child_connections(plat, admin))
        assert terminate_backends(plat) >= 1
        reads.close()
        reads = psycopg.connect(platform_db, autocommit=True)
        dropped_at = _scalar(reads, "SELECT now()")
        second = drain()
        jobs = first + second
        after_drop = _attempts_before(reads, jobs, dropped_at, _child_connections(plat, admin))
        opened = sessions() - before
    reads.close()

    # then before the drop, each child ran every attempt of the drain on the
    # connection it already had; after it, on the one it opened at its first
    # attempt after the drop (that attempt may have started just before)
    print(
        "per child (attempts, of them before its connection opened): before the drop "
        f"{before_drop}, after it {after_drop}; database sessions opened in all: {opened}"
    )
    for phase, counts, allowed in (("before", before_drop, 0), ("after", after_drop, 1)):
        for pid, (total, earlier) in counts.items():
            assert earlier <= allowed, (phase, pid, total, earlier)
        # (and the check is not vacuous: both children held a connection and
        # ran the drain's attempts)
        assert len(counts) == 2, (phase, counts)
        assert sum(total for total, _ in counts.values()) >= 50, (phase, counts)
