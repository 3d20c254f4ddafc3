"""Pause and resume (issue 24 item 2, Acceptance): pause a kind with 500 jobs queued and 3
running: no new attempt starts while paused, the 3 finish, resume starts the rest within one
tick; nothing dead, nothing lost; cancel works while paused.

Real PostgreSQL, Redis, gunicorn, a worker of 3 children and the scheduler (tick 0.1 s,
harness.BASE_ENV). Runs about 25 s (most of it the platform's start and the 500
submissions): in the slow tier.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform
from tests.integration.pausing import resume_and_time_first_start

QUEUED = 500
RUNNING = 3
# Long enough that the 3 still run when the pause request is done on a loaded box.
RUN_SECONDS = 6
TICK = 0.1  # JOBS_SCHEDULER_INTERVAL of every integration platform
# Resume to first start: one tick, plus a publish and a delivery on a loaded 2-core box.
START_SLACK = TICK + 0.9


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_pause_resume_kind_with_500_queued_and_3_running(
    platform_factory: Callable[..., Platform],
) -> None:
    # The worker starts once every job is queued, so the 3 long jobs (submitted first: the
    # queue is FIFO) take its 3 children and the 500 wait behind them whatever the time
    # the 500 submissions take on a loaded box; the 3 need only outlast the pause request.
    t0 = time.time()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.time() - t0, 1)

    platform = platform_factory("pause", worker=False)
    phase("platform")
    ops = requests.Session()
    token = platform.create_users(
        {"ops": {"staff": True, "perms": ["view_pause", "add_pause", "delete_pause"]}}
    )["ops"]
    ops.headers["Authorization"] = f"Token {token}"

    # given 3 long jobs of demo.flaky and 500 short ones queued behind them
    running = [
        platform.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": RUN_SECONDS})
        for _ in range(RUNNING)
    ]
    began = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        queued = list(
            pool.map(lambda _: platform.submit("demo.flaky", {"fail_times": 0}), range(QUEUED))
        )
    submitted_in = time.time() - began
    # and the 3 running on the worker's 3 children
    phase("submitted")
    platform.worker = platform.stack.start_worker(concurrency=RUNNING, timeout=120)
    phase("worker")
    wait_for(
        lambda: platform.job_count(status="running") == RUNNING,
        timeout=60,
        interval=0.05,
        what="3 running",
    )
    phase("running")
    # when the kind is paused
    response = ops.post(
        platform.url("/api/pauses/"),
        json={"scope": "kind", "name": "demo.flaky", "reason": "acceptance"},
        timeout=HTTP_TIMEOUT,
    )
    assert response.status_code == 201, response.text
    started = platform.rows("SELECT job_id::text FROM jobs_attempt")
    assert sorted(row[0] for row in started) == sorted(running), (
        f"not the 3 long jobs alone when paused: {started}"
    )

    # then the 3 running finish, and no new attempt starts: every delivery goes back to
    # wait in the database, no message lingers on the broker
    for job_id in running:
        assert platform.wait_job(job_id, timeout=90)["status"] == "succeeded"

    phase("3 finished")
    seen: dict[str, object] = {}

    def all_held() -> bool:
        seen["held"] = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE status = 'queued' AND published_at IS NULL"
            " AND waiting_reason = 'paused'"
        )
        seen["broker"] = platform.broker_messages()[0]
        return seen["held"] == QUEUED and seen["broker"] == 0

    try:
        wait_for(all_held, timeout=120, interval=0.2, what="500 held, broker empty")
    except TimeoutError as exc:
        rows = platform.rows(
            "SELECT status, waiting_reason, published_at IS NULL, count(*) FROM jobs_job"
            " GROUP BY 1, 2, 3"
        )
        raise AssertionError(f"{exc}: {seen}, rows {rows}\n{platform.log_tails()}") from None
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == RUNNING
    shown = platform.job(queued[0])
    assert shown["status"] == "queued"
    assert shown["waiting"]["reason"] == "paused", shown

    # and cancel works while paused
    cancelled = platform.session.post(platform.url(f"/api/jobs/{queued[-1]}/cancel/"), timeout=30)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"

    # when resumed, the held jobs start within one tick and all of them finish
    phase("held")
    resumed_at, after = resume_and_time_first_start(
        ops, platform.url("/api/pauses/resume/"), "demo.flaky", platform, running=RUNNING
    )
    first_start = after["started"]
    wait_for(
        lambda: platform.job_count(status="succeeded") == RUNNING + QUEUED - 1,
        timeout=120,
        interval=0.5,
        what="every held job succeeded",
    )
    drained = time.monotonic() - resumed_at
    phase("drained")
    counts = dict(platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY status"))
    print(
        f"pause: {QUEUED} submitted in {submitted_in:.1f} s; {QUEUED} held with 0 attempts "
        f"while paused; all {QUEUED - 1} released "
        f"(published) {after['released']:.3f} s and first start {first_start:.3f} s after resume; "
        f"all {RUNNING + QUEUED - 1} done {drained:.1f} s after resume; final {counts}; "
        f"phases (s from the start) {phases}"
    )
    assert counts == {"succeeded": RUNNING + QUEUED - 1, "cancelled": 1}
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == RUNNING + QUEUED - 1
    assert first_start <= START_SLACK, f"first start {first_start:.3f} s after resume"
