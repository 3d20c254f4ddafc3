"""jobs_backlog: the autoscaling signal, read from the database, with every worker slot busy.

Issue 21, Acceptance: "The backlog metric is > 0 while every slot is busy and
matches the database count ± the in-flight attempts." One worker of 2
children, 10 demo.sleep jobs: 2 run, 8 wait (2 of them prefetched into the
worker, still `queued` rows). Both processes that serve it (web, scheduler)
are scraped; a scaler takes max over them. Then everything is cancelled and
the backlog reads 0 (the silent case: a scaler goes to its minimum).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform
from tests.integration.telemetry import covers, scrape

JOBS = 10
SLOTS = 2
# The database's view of the same thing: what could start now, and what runs.
DB_BACKLOG = (
    "SELECT count(*) FILTER (WHERE status = 'queued' OR (status IN ('retrying', 'delayed') "
    "AND next_attempt_at <= now())), count(*) FILTER (WHERE status = 'running') "
    "FROM jobs_job WHERE queue = 'default'"
)


def _db_backlog(platform: Platform) -> tuple[int, int]:
    waiting, running = platform.rows(DB_BACKLOG)[0]
    return waiting, running


def _backlog(url: str) -> tuple[float | None, float | None]:
    samples = scrape(url)
    return (
        samples.get("jobs_backlog", {"queue": "default", "state": "waiting"}),
        samples.get("jobs_backlog", {"queue": "default", "state": "running"}),
    )


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
@covers("jobs_backlog")
def test_backlog_counts_waiting_and_running_while_every_slot_is_busy(
    platform_factory: Callable[..., Platform],
) -> None:
    # given one worker with 2 children, and 10 jobs of 300 s
    platform = platform_factory("backlog", worker_concurrency=SLOTS)
    assert platform.scheduler is not None
    urls = (platform.url("/metrics"), platform.scheduler_metrics_url)
    job_ids = [platform.submit("demo.sleep", {"seconds": 300}) for _ in range(JOBS)]
    try:
        # when every slot is busy
        wait_for(
            lambda: _db_backlog(platform)[1] == SLOTS,
            timeout=120,
            interval=0.2,
            what="2 attempts running",
        )
        # then each process serving it reads a backlog > 0 that matches the database's
        # count within the attempts in flight (here exactly: nothing moves for 300 s)
        for url in urls:
            waiting, running = _backlog(url)
            db_waiting, db_running = _db_backlog(platform)
            assert waiting is not None, url
            assert running is not None, url
            assert waiting + running > 0
            assert abs((waiting + running) - (db_waiting + db_running)) <= db_running
            assert (waiting, running) == (JOBS - SLOTS, SLOTS), url
    finally:
        for job_id in job_ids:
            platform.session.post(platform.url(f"/api/jobs/{job_id}/cancel/"), timeout=HTTP_TIMEOUT)
    # and when everything is cancelled and idle, it reads 0 (present, not missing)
    wait_for(
        lambda: _db_backlog(platform) == (0, 0),
        timeout=120,
        interval=0.2,
        what="the queue idle",
    )
    for url in urls:
        assert _backlog(url) == (0.0, 0.0), url
