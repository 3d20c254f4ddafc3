"""Pause and resume (issue 24 item 2, Acceptance): pause a kind with 500 jobs queued and 3
running: no new attempt starts while paused, the 3 finish, resume starts the rest within one
tick; nothing dead, nothing lost; cancel works while paused.

Real PostgreSQL, Redis, gunicorn, a worker of 3 children and the scheduler (tick 0.1 s,
harness.BASE_ENV). Runs about 45 s: in the slow tier.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
import requests

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform

QUEUED = 500
RUNNING = 3
# Long enough that the 3 still run when 500 submissions and the pause are done on a loaded box.
RUN_SECONDS = 20
TICK = 0.1  # JOBS_SCHEDULER_INTERVAL of every integration platform
# Resume to first start: one tick, plus a publish and a delivery on a loaded 2-core box.
START_SLACK = TICK + 0.9


def _broker_messages(platform: Platform) -> int:
    client = redis.Redis.from_url(platform.redis.url)
    try:
        return sum(
            client.llen(key) for key in client.scan_iter("default*") if client.type(key) == b"list"
        )
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_pause_resume_kind_with_500_queued_and_3_running(
    platform_factory: Callable[..., Platform],
) -> None:
    platform = platform_factory("pause", worker_concurrency=RUNNING)
    ops = requests.Session()
    token = platform.create_users(
        {"ops": {"staff": True, "perms": ["view_pause", "add_pause", "delete_pause"]}}
    )["ops"]
    ops.headers["Authorization"] = f"Token {token}"

    # given 3 running jobs of demo.flaky, which keep the 3 children busy,
    running = [
        platform.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": RUN_SECONDS})
        for _ in range(RUNNING)
    ]
    wait_for(lambda: platform.job_count(status="running") == RUNNING, timeout=60, what="3 running")
    # and 500 more queued behind them
    with ThreadPoolExecutor(max_workers=8) as pool:
        queued = list(
            pool.map(lambda _: platform.submit("demo.flaky", {"fail_times": 0}), range(QUEUED))
        )

    # when the kind is paused
    response = ops.post(
        platform.url("/api/pauses/"),
        json={"scope": "kind", "name": "demo.flaky", "reason": "acceptance"},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 201, response.text
    attempts_at_pause = platform.scalar("SELECT count(*) FROM jobs_attempt")
    assert attempts_at_pause == RUNNING, "the 3 ended before the pause: the box is too slow"

    # then the 3 running finish, and no new attempt starts: every delivery goes back to
    # wait in the database, no message lingers on the broker
    for job_id in running:
        assert platform.wait_job(job_id, timeout=90)["status"] == "succeeded"

    seen: dict[str, object] = {}

    def all_held() -> bool:
        seen["held"] = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE status = 'queued' AND published_at IS NULL"
            " AND waiting_reason = 'paused'"
        )
        seen["broker"] = _broker_messages(platform)
        return seen["held"] == QUEUED and seen["broker"] == 0

    try:
        wait_for(all_held, timeout=120, interval=0.2, what="500 held, broker empty")
    except TimeoutError as exc:
        rows = platform.rows(
            "SELECT status, waiting_reason, published_at IS NULL, count(*) FROM jobs_job"
            " GROUP BY 1, 2, 3"
        )
        raise AssertionError(f"{exc}: {seen}, rows {rows}\n{platform.log_tails()}") from None
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == attempts_at_pause == RUNNING
    shown = platform.job(queued[0])
    assert shown["status"] == "queued"
    assert shown["waiting"]["reason"] == "paused", shown

    # and cancel works while paused
    cancelled = platform.session.post(platform.url(f"/api/jobs/{queued[-1]}/cancel/"), timeout=30)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"

    # when resumed, the held jobs start within one tick and all of them finish
    resumed_at = time.time()
    response = ops.post(
        platform.url("/api/pauses/resume/"),
        json={"scope": "kind", "name": "demo.flaky"},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 200, response.text
    wait_for(
        lambda: platform.scalar("SELECT count(*) FROM jobs_attempt") > RUNNING,
        timeout=10,
        interval=0.01,
        what="a first attempt after the resume",
    )
    first_start = time.time() - resumed_at
    wait_for(
        lambda: platform.job_count(status="succeeded") == RUNNING + QUEUED - 1,
        timeout=120,
        interval=0.5,
        what="every held job succeeded",
    )
    counts = dict(platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY status"))
    print(
        f"pause: {QUEUED} held with 0 attempts while paused; first start "
        f"{first_start:.3f} s after resume; final {counts}"
    )
    assert counts == {"succeeded": RUNNING + QUEUED - 1, "cancelled": 1}
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == RUNNING + QUEUED - 1
    assert first_start <= START_SLACK, f"first start {first_start:.3f} s after resume"
