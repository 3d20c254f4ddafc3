"""run_after end to end (issue 22, Acceptance): a job due in 30 s starts within 2 s of that
time, holds no broker message and no worker memory while it waits (worker RSS flat with 10,000
such jobs waiting), and can be cancelled while waiting.

One platform for the whole module; its scheduler ticks every 0.1 s (harness.BASE_ENV).
Runs about 40 s: in the slow tier (`make test-slow`, run by .ci/run).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psutil
import psycopg
import pytest

from tests.integration.harness import Platform

MIB = 1024 * 1024
WAITING_JOBS = 10_000
# Worker RSS (main process and children) may move this much while 10,000 jobs wait.
RSS_SLACK = 8 * MIB
START_SLACK = 2.0


def _worker_rss(platform: Platform) -> int:
    assert platform.worker is not None
    main = psutil.Process(platform.worker.pid)
    return main.memory_info().rss + sum(c.memory_info().rss for c in main.children())


def _insert_delayed(platform: Platform, count: int, due: datetime) -> None:
    """`count` delayed demo.flaky jobs due at `due`, written as the submission writes them."""
    dsn = platform.database_url.replace("postgres://", "postgresql://", 1)

    with psycopg.connect(dsn) as conn:
        conn.execute(
            """
            INSERT INTO jobs_job (id, kind, queue, payload, status, attempts_made, max_attempts,
              request_fingerprint, created_at, enqueued_at, run_after, next_attempt_at,
              deliveries, worker_losses, trace_parent, last_error, dead_reason,
              waiting_reason, waiting_detail, progress_message, publish_claimed_by)
            SELECT gen_random_uuid(), 'demo.flaky', 'default', '{"fail_times": 0}', 'delayed',
              0, 5, 'bulk-' || n, now(), now(), %(due)s, %(due)s, 0, 0, '', '', '',
              'run_after', 'start not before ' || %(due)s::text, '', ''
            FROM generate_series(1, %(count)s) AS n
            """,
            {"due": due, "count": count},
        )


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_run_after_starts_on_time_and_waits_in_the_database(
    platform_factory: Callable[..., Platform],
) -> None:
    platform = platform_factory("run_after")
    # Warm the worker: its first attempt imports what attempts need.
    platform.wait_job(platform.submit("demo.flaky", {"fail_times": 0}))
    rss_before = _worker_rss(platform)

    # given 10,000 jobs waiting for an hour, one due in 30 s and one to cancel
    _insert_delayed(platform, WAITING_JOBS, datetime.now(UTC) + timedelta(hours=1))
    due = datetime.now(UTC) + timedelta(seconds=30)
    job_id = platform.submit("demo.flaky", {"fail_times": 0}, run_after=due.isoformat())
    doomed = platform.submit("demo.flaky", {"fail_times": 0}, run_after=due.isoformat())

    # then they wait in the database: delayed, with no message on the broker
    waiting = platform.job(job_id)
    assert waiting["status"] == "delayed", waiting
    assert waiting["waiting"]["reason"] == "run_after"
    assert platform.broker_messages()[0] == 0
    assert platform.job_count(status="delayed") == WAITING_JOBS + 2

    # and one can be cancelled while it waits
    response = platform.session.post(platform.url(f"/api/jobs/{doomed}/cancel/"), timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"

    # when its time comes, it starts within START_SLACK of it
    job = platform.wait_job(job_id, timeout=60)
    assert job["status"] == "succeeded", job
    started = datetime.fromisoformat(job["attempts"][0]["started_at"])
    late = (started - due).total_seconds()
    assert 0 <= late <= START_SLACK, f"started {late:.3f} s after run_after"

    # and the worker's memory did not grow with the waiting jobs
    rss_after = _worker_rss(platform)
    growth = rss_after - rss_before
    print(
        f"run_after: started {late:.3f} s after its time; worker RSS "
        f"{rss_before / MIB:.1f} -> {rss_after / MIB:.1f} MiB with {WAITING_JOBS} jobs waiting"
    )
    assert growth <= RSS_SLACK, f"worker RSS grew {growth / MIB:.1f} MiB"
    assert platform.broker_messages()[0] == 0
    assert platform.job(doomed)["status"] == "cancelled"
