"""Queue depth is reported by part, exactly.

Issue 4, Acceptance: "Queue depth: 30 ready jobs spread over priority
sub-queues, 20 reserved, 10 scheduled retries are reported exactly as
30 / 20 / 10."

How each part is produced, on one platform with a 20-child worker:

- scheduled: 10 demo.flaky jobs fail their first attempt and wait for a
  retry an hour away (status `retrying`, in the database only);
- reserved: 20 demo.sleep jobs (300 s) run, one per child; with
  acks_late each message stays in kombu's `unacked` hash until it ends, and
  with prefetch 1 x 20 children the worker then takes nothing more;
- ready: 30 more demo.sleep jobs are submitted through the API with
  priorities 0..9 three times over; kombu files them into the four lists it
  keeps for `default` (`default`, `default\\x06\\x163`, `...6`, `...9`;
  jobs.broker.queue_keys) as 9 / 9 / 9 / 3, so what a plain
  `LLEN default` reports (celery-exporter issue 272) is visibly wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from devstack.services import wait_for
from jobs.broker import queue_keys
from tests.integration.harness import HTTP_TIMEOUT, Platform
from tests.integration.telemetry import covers, scrape

HOUR = 3600


def _status_counts(platform: Platform) -> dict[str, int]:
    return dict(
        platform.scalar(
            "SELECT coalesce(json_object_agg(status, n), '{}') "
            "FROM (SELECT status, count(*) AS n FROM jobs_job GROUP BY status) s"
        )
    )


@pytest.mark.integration
@pytest.mark.timeout(420)
@covers("jobs_queue_depth", "celery_queue_length")
def test_queue_depth_reports_ready_reserved_scheduled_exactly(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform whose demo.flaky retries wait an hour, and a 20-child worker
    platform = platform_factory(
        "queue_depth",
        env={
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_base": HOUR, "backoff_floor": HOUR, "backoff_cap": HOUR}}
            ),
        },
        worker_concurrency=20,
    )
    broker = redis.Redis.from_url(platform.redis.url)
    keys = queue_keys("default")
    assert keys == ["default", "default\x06\x163", "default\x06\x166", "default\x06\x169"], keys
    job_ids: list[str] = []
    try:
        # and 10 retries scheduled an hour away
        job_ids += [platform.submit("demo.flaky", {"fail_times": 1}) for _ in range(10)]
        wait_for(
            lambda: _status_counts(platform) == {"retrying": 10},
            timeout=120,
            interval=0.2,
            what="10 jobs retrying",
        )
        # and 20 attempts running, their messages reserved (unacknowledged)
        job_ids += [platform.submit("demo.sleep", {"seconds": 300}) for _ in range(20)]
        wait_for(
            lambda: _status_counts(platform) == {"retrying": 10, "running": 20},
            timeout=120,
            interval=0.2,
            what="20 jobs running",
        )
        # and 30 more waiting in the broker, submitted with priorities 0..9 x 3
        job_ids += [
            platform.submit("demo.sleep", {"seconds": 300}, priority=i % 10) for i in range(30)
        ]
        wait_for(
            lambda: sum(broker.llen(key) for key in keys) == 30,
            timeout=30,
            what="30 ready messages",
        )
        lengths = {key: broker.llen(key) for key in keys}
        assert list(lengths.values()) == [9, 9, 9, 3], lengths
        assert broker.hlen("unacked") == 20
        assert _status_counts(platform) == {"retrying": 10, "running": 20, "queued": 30}

        # when the web /metrics is scraped
        samples = scrape(platform.url("/metrics"))

        # then the parts read exactly 30 ready, 20 reserved, 10 scheduled, 0 unpublished
        depth = {
            state: samples.get("jobs_queue_depth", {"queue": "default", "state": state})
            for state in ("ready", "reserved", "scheduled", "unpublished")
        }
        assert depth == {"ready": 30, "reserved": 20, "scheduled": 10, "unpublished": 0}
        # and celery_queue_length (celery-exporter's name) counts every sub-queue too
        assert samples.get("celery_queue_length", {"queue_name": "default"}) == 30
        # and the worker really held nothing more: still 20 unacked, 30 ready
        assert broker.hlen("unacked") == 20
        assert sum(broker.llen(key) for key in keys) == 30
    finally:
        # cleanup: cancel everything, so the worker's warm shutdown is quick
        for job_id in job_ids:
            platform.session.post(platform.url(f"/api/jobs/{job_id}/cancel/"), timeout=HTTP_TIMEOUT)
