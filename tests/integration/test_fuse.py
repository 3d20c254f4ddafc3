"""The fuse (issue 24 item 3) with real processes: a destination that refuses trips the fuse of
webhook.deliver for its host; the jobs wait in the database (waiting reason fuse_open), at most
one probe attempt reaches the destination per cool-down, nothing ends dead; once the
destination answers again, a probe closes the fuse and every job succeeds.

Real PostgreSQL, Redis, gunicorn, the scheduler (tick 0.1 s, harness.BASE_ENV), one worker of
4 children, and a local HTTP server standing in for the destination (503 while "down").
About 30-40 s: in the slow tier.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from devstack.loopback import LoopbackHTTPServer
from devstack.services import wait_for
from tests.integration.harness import Platform

JOBS = 30
COOLDOWN = 2.0
COOLDOWN_MAX = 4.0
DOWN_AFTER_TRIP = 9.0  # seconds the destination stays down once the fuse tripped
POLICY = {
    "fuse": True,
    "fuse_min_attempts": 5,
    "fuse_failure_ratio": 0.5,
    "fuse_window": 30.0,
    "fuse_cooldown": COOLDOWN,
    "fuse_cooldown_max": COOLDOWN_MAX,
    "max_attempts": 4,
    "backoff_base": 0.2,
    "backoff_floor": 0.1,
    "backoff_cap": 0.5,
}


class Destination:
    """A destination that answers 503 while `down`, 200 otherwise; every request's time kept."""

    def __init__(self) -> None:
        self.down = True
        self.hits: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        destination = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code = 503 if destination.down else 200
                with destination.lock:
                    destination.hits.append((time.time(), code))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        return Handler


@pytest.fixture
def destination() -> Iterator[tuple[Destination, int]]:
    dest = Destination()
    with LoopbackHTTPServer(0, dest.handler()) as server:
        yield dest, server.port


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(120)
def test_fuse_trips_holds_and_recovers(
    platform_factory: Callable[..., Platform], destination: tuple[Destination, int]
) -> None:
    dest, port = destination
    host = f"127.0.0.1:{port}"
    # given webhook.deliver with a fuse per destination host, and a destination refusing
    platform = platform_factory(
        "fuse",
        env={"JOBS_KIND_OVERRIDES": json.dumps({"webhook.deliver": POLICY})},
        worker_concurrency=4,
    )
    url = f"http://{host}/hook"

    # when 30 jobs are submitted
    ids = [
        platform.submit("webhook.deliver", {"url": url, "connect_timeout": 1, "read_timeout": 2})
        for _ in range(JOBS)
    ]

    # then the fuse of that host trips, and the jobs wait in the database saying why
    def fuse(column: str) -> object:
        return platform.scalar(
            f"SELECT {column} FROM jobs_fuse WHERE kind = 'webhook.deliver' AND destination = %s",
            (host,),
        )

    wait_for(lambda: fuse("trips") == 1, timeout=30, interval=0.05, what="the fuse trips")
    opened = float(str(fuse("extract(epoch FROM opened_at)")))
    held_sql = (
        "SELECT count(*) FROM jobs_job WHERE waiting_reason = 'fuse_open' AND status = 'queued'"
    )
    wait_for(lambda: platform.scalar(held_sql) >= 5, timeout=20, interval=0.1, what="held jobs")
    held_id = platform.scalar(
        "SELECT id::text FROM jobs_job WHERE waiting_reason = 'fuse_open' LIMIT 1"
    )
    shown = platform.job(held_id)["waiting"]
    assert shown["reason"] == "fuse_open", shown
    assert host in shown["detail"], shown

    # while the destination stays down: at most one probe per cool-down reaches it
    down_until = opened + DOWN_AFTER_TRIP
    wait_for(lambda: time.time() >= down_until, timeout=30, interval=0.1, what="the outage")
    dest.down = False
    with dest.lock:
        before_trip = [t for t, _ in dest.hits if t < opened]
        # Attempts that started before the trip may still reach it in its first 0.5 s.
        while_open = [t for t, _ in dest.hits if opened + 0.5 <= t < down_until]
    # Cool-downs: 2 s, then 4 s (doubled, capped): probes due at +2, +6 (then +10 > 9).
    assert len(while_open) <= 2, while_open
    dead_while_down = platform.scalar("SELECT count(*) FROM jobs_job WHERE status = 'dead'")
    max_held = platform.scalar(held_sql)

    # when the destination answers again, a probe closes the fuse and every job succeeds
    back = time.time()
    try:
        wait_for(
            lambda: platform.job_count(status="succeeded") == JOBS,
            timeout=40,
            interval=0.2,
            what="every job succeeded",
        )
    except TimeoutError as exc:
        rows = platform.rows("SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2")
        fuses = platform.rows("SELECT destination, state, probe_due_at, trips FROM jobs_fuse")
        raise AssertionError(f"{exc}: {rows} {fuses}\n{platform.log_tails()}") from None
    recovered = time.time() - back

    # then nothing ended dead, and the fuse is closed
    attempts = platform.scalar("SELECT count(*) FROM jobs_attempt")
    assert platform.scalar("SELECT count(*) FROM jobs_job WHERE status = 'dead'") == 0
    assert dead_while_down == 0
    assert fuse("state") == "closed"
    print(
        f"fuse: {JOBS} jobs; {len(before_trip)} requests before the trip; tripped "
        f"{opened - min(t for t, _ in dest.hits):.2f} s after the first request; "
        f"{len(while_open)} requests in the {DOWN_AFTER_TRIP - 0.5:.1f} s it stayed down "
        f"after the trip (cool-down {COOLDOWN} s doubling to {COOLDOWN_MAX} s); up to "
        f"{max_held} jobs held with fuse_open; 0 dead; all {JOBS} succeeded "
        f"{recovered:.1f} s after the destination returned; {attempts} attempts in all; "
        f"{len(dest.hits)} requests in all"
    )
    assert len(ids) == JOBS
