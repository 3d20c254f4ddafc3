"""The overview page and the job page's formatting: charts, worker reports, times, trace links."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.admin import display
from jobs.models import Attempt, DeadReason, JobStatus
from observability import worker_report

OVERVIEW = "/admin/jobs/job/overview/"
TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def admin_client(client: Client, db: None) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@localhost", "pw"))
    return client


def _report(host: str, *, at: float, rss: int, recycled: dict[str, int]) -> dict[str, Any]:
    return {
        "hostname": host,
        "at": at,
        "children": [{"pid": 11, "rss_bytes": rss, "threads": 2}],
        "main_rss_bytes": 1,
        "max_memory_per_child_bytes": 100 * 2**20,
        "recycled": recycled,
    }


def test_overview_draws_attempts_memory_and_dead_charts(
    admin_client: Client,
    job_factory: Callable[..., Any],
    attempt_factory: Callable[..., Any],
    broker_redis: redis.Redis,
) -> None:
    # given a job retried twice in the last hour, a dead job and a worker over its memory limit
    job = job_factory(status=JobStatus.SUCCEEDED, attempts_made=3)
    for n in (1, 2, 3):
        attempt_factory(job, number=n, started_at=timezone.now() - timedelta(minutes=n))
    job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.POISON)
    report = _report("w1@box", at=time.time(), rss=120 * 2**20, recycled={"max_memory": 2})
    worker_report.write_report(broker_redis, report, ttl=60)

    # when the overview is shown
    with CaptureQueriesContext(connection) as queries:
        html = admin_client.get(OVERVIEW).content.decode()

    # then each chart has its bars, the over-limit child is red, and the page stays cheap
    assert 'data-chart="attempts-demo.flaky"' in html
    assert html.count('class="bar first"') >= 1
    assert html.count('class="bar retry"') >= 1
    assert "<title>2 retries</title>" in html
    assert 'data-chart="worker-rss"' in html
    assert "120.0 MiB" in html
    assert "#c62828" in html
    assert 'data-chart="recycles"' in html
    assert "max_memory" in html
    assert 'data-chart="dead-reasons"' in html
    assert "poison" in html
    assert len(queries) <= 15


def test_worker_reports_expire(broker_redis: redis.Redis) -> None:
    now = time.time()
    worker_report.write_report(
        broker_redis, _report("old@a", at=now - 100, rss=1, recycled={}), ttl=60
    )
    worker_report.write_report(broker_redis, _report("new@b", at=now, rss=2, recycled={}), ttl=60)

    reports = worker_report.read_reports(broker_redis, max_age=30)

    assert [r["hostname"] for r in reports] == ["new@b"]


def test_attempt_rows_show_gaps_delays_and_mib(
    job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]
) -> None:
    job = job_factory(status=JobStatus.SUCCEEDED, attempts_made=2)
    start = timezone.now() - timedelta(seconds=10)
    attempt_factory(
        job,
        number=1,
        started_at=start,
        finished_at=start + timedelta(milliseconds=250),
        outcome="error",
        retry_delay_seconds=0.75,
        rss_before_bytes=60 * 2**20,
        rss_after_bytes=62 * 2**20,
    )
    attempt_factory(
        job,
        number=2,
        started_at=start + timedelta(milliseconds=1250),
        finished_at=start + timedelta(milliseconds=1300),
        outcome="succeeded",
    )

    first, second = display.attempt_rows(
        list(Attempt.objects.filter(job=job).order_by("number")),
        created_at=start - timedelta(milliseconds=500),
    )

    # run time: start to end; wait: creation (or the previous end) to start; the delay chosen
    assert (first.run_time, first.next_delay, first.wait) == ("0.250 s", "0.750 s", "0.500 s")
    assert (first.rss_before, first.rss_after, first.rss_growth) == (
        "60.0 MiB",
        "62.0 MiB",
        "+2.0 MiB",
    )
    assert second.wait == "1.000 s"
    assert display.at_ms(start).endswith(f".{start.microsecond // 1000:03d}")


def test_job_page_links_the_trace(
    admin_client: Client, job_factory: Callable[..., Any], settings: Any
) -> None:
    settings.JOBS_TRACE_URL_TEMPLATE = "http://traces.local:16686/trace/{trace_id}"
    job = job_factory(trace_parent=f"00-{TRACE}-b7ad6b7169203331-01")

    html = admin_client.get(f"/admin/jobs/job/{job.id}/change/").content.decode()

    assert f'href="http://traces.local:16686/trace/{TRACE}"' in html
