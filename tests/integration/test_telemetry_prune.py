"""Retention as a job: `jobs.prune` run by a real worker deletes old terminal jobs, and counts them.

Issue 23, item 4. Old rows are written straight into the platform's
PostgreSQL database (their ages are the point); the prune is submitted
through the API like any job, as a periodic schedule would, and
jobs_pruned_total is read from the platform's scrapes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape_platform

OLD_SUCCEEDED = 30
OLD_DEAD = 2

INSERT_JOB = """
INSERT INTO jobs_job (
    id, kind, queue, payload, status, attempts_made, max_attempts, request_fingerprint,
    created_at, enqueued_at, finished_at, deliveries, worker_losses, trace_parent, last_error,
    dead_reason, waiting_reason, waiting_detail, progress_message, publish_claimed_by)
VALUES (%s, 'demo.flaky', 'default', '{}', %s, 2, 5, 'fp', now() - %s * interval '1 day',
        now() - %s * interval '1 day', CASE WHEN %s <> 'queued' THEN now() - %s * interval '1 day' END,
        2, 0, '', '', '', '', '', '', '')
"""
INSERT_ATTEMPTS = """
INSERT INTO jobs_attempt (
    job_id, number, worker_hostname, started_at, outcome, error_type, error_message, traceback,
    trace_id)
SELECT %s, n, 'w@test', now() - %s * interval '1 day', 'error', '', '', '', ''
FROM generate_series(1, 2) AS n
"""


def _insert(platform: Platform, status: str, days: float) -> str:
    job_id = str(uuid.uuid4())
    platform.rows(f"{INSERT_JOB} RETURNING 1", (job_id, status, days, days, status, days))
    platform.rows(f"{INSERT_ATTEMPTS} RETURNING 1", (job_id, days))
    return job_id


def _pruned(platform: Platform, status: str, table: str) -> float:
    samples = scrape_platform(platform)
    return samples.get("jobs_pruned_total", {"status": status, "table": table}) or 0.0


@pytest.mark.integration
@pytest.mark.timeout(180)
@covers("jobs_pruned_total")
def test_prune_kind_deletes_old_terminal_jobs_and_counts_them(
    platform_factory: Callable[..., Platform],
) -> None:
    # given old succeeded and dead jobs with attempts, and jobs that must stay
    platform = platform_factory("prune", scheduler=False)
    for _ in range(OLD_SUCCEEDED):
        _insert(platform, "succeeded", 8)
    for _ in range(OLD_DEAD):
        _insert(platform, "dead", 31)
    kept = [_insert(platform, "succeeded", 6), _insert(platform, "queued", 100)]
    before = {
        (s, t): _pruned(platform, s, t)
        for s in ("succeeded", "dead")
        for t in ("jobs_job", "jobs_attempt")
    }

    # when a jobs.prune job runs on the worker
    prune_id = platform.submit("jobs.prune", {})
    job = platform.wait_job(prune_id, timeout=90)

    # then the old ones are gone with their attempts, the rest stays, and it is counted
    assert job["status"] == "succeeded", job
    assert job["result"]["jobs"] == {"succeeded": OLD_SUCCEEDED, "cancelled": 0, "dead": OLD_DEAD}
    assert job["result"]["attempts"]["succeeded"] == 2 * OLD_SUCCEEDED
    left = {r[0] for r in platform.rows("SELECT id::text FROM jobs_job")}
    assert left == {*kept, prune_id}
    assert (
        platform.scalar("SELECT count(*) FROM jobs_attempt WHERE job_id::text <> %s", (prune_id,))
        == 4
    )
    expected = {
        ("succeeded", "jobs_job"): OLD_SUCCEEDED,
        ("succeeded", "jobs_attempt"): 2 * OLD_SUCCEEDED,
        ("dead", "jobs_job"): OLD_DEAD,
        ("dead", "jobs_attempt"): 2 * OLD_DEAD,
    }
    wait_for(
        lambda: all(_pruned(platform, *key) - before[key] == n for key, n in expected.items()),
        timeout=15,
        interval=0.2,
        what="jobs_pruned_total counted",
    )
