"""The "dependency outage" scenario of jobs_storm (issue 24 item 4): the fuse on and off.

A local HTTP server stands in for a partner: it answers 503 for
`down_seconds`, then 200. `jobs` webhook.deliver jobs are sent to it at once,
on each side in turn: the platform with webhook.deliver's fuse on, then the
same platform with it off (a fresh database and Redis database each, a worker
of `concurrency` children and the scheduler; the same retry policy on both
sides). Each side is read from its database until every job ended or
`settle_seconds` passed; the destination counts the requests it got.
`other_jobs` jobs of another kind (demo.sleep, 0.05 s) go with them: their
latency (enqueue to end), beside theirs when the same submissions are sent
again once the destination is back (calm), shows whether the outage slows
what does not depend on the destination.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from config.env import env
from devstack.demo import DEFAULT_REDIS_URL, demo_redis
from devstack.loopback import LoopbackHTTPServer
from devstack.processes import ROOT, Stack
from devstack.services import ensure_redis

from .model import STORM_DIR, StormConfig
from .probes import PlatformProbe
from .sides import fresh_database, platform_env

# The kind's policy on both sides: a few quick retries, so the fuse-off side shows what an
# outage longer than the retries does; the fuse side adds its fuse fields.
POLICY: dict[str, Any] = {"max_attempts": 4, "backoff_base": 0.5, "backoff_cap": 2.0}
FUSE: dict[str, Any] = {
    "fuse": True,
    "fuse_min_attempts": 5,
    "fuse_failure_ratio": 0.5,
    "fuse_cooldown": 2.0,
    "fuse_cooldown_max": 8.0,
}
# Jobs of another kind sent with the outage's, to see whether its latency changes.
OTHER_JOBS = 20
OTHER_PAYLOAD = {"seconds": 0.05, "step_seconds": 0.05}
SUBMITTER = """
import json, sys
from jobs.services import job_submit
count, payload, others, other_payload = json.loads(sys.stdin.readline())
for n in range(count):
    job_submit(kind="webhook.deliver", payload=payload)
    if n % max(1, count // max(1, others)) == 0 and others > 0:
        job_submit(kind="demo.sleep", payload=other_payload)
        others -= 1
for _ in range(others):
    job_submit(kind="demo.sleep", payload=other_payload)
print("submitted", count, flush=True)
"""


@dataclass
class OutageResult:
    """One side's figures (times in seconds from the first submission)."""

    side: str
    jobs: int
    down_seconds: float
    requests_down: int = 0
    requests_up: int = 0
    succeeded: int = 0
    dead: dict[str, int] = field(default_factory=dict)
    attempts: int = 0
    trips: int = 0
    max_held: int = 0
    done_after_return: float | None = None
    # demo.sleep jobs sent among them: median and max seconds from enqueue to their end.
    other_latency: tuple[float, float] | None = None
    # The same submissions again once the destination is back (no outage): the demo.sleep
    # jobs' median and max seconds from enqueue to end, the latency the outage is judged by.
    other_calm: tuple[float, float] | None = None
    other_jobs: int = OTHER_JOBS
    # Jobs not ended when the side stopped, by "status/waiting reason".
    left: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class Destination:
    """503 until `up_at` (time.time()), then 200; counts requests before and after."""

    def __init__(self) -> None:
        self.up_at = float("inf")
        self.down = 0
        self.up = 0
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        dest = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                up = time.time() >= dest.up_at
                with dest.lock:
                    if up:
                        dest.up += 1
                    else:
                        dest.down += 1
                self.send_response(200 if up else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return

        return Handler


def run_outage(
    config: StormConfig,
    *,
    down_seconds: float,
    say: Callable[[str], None],
    other_jobs: int = OTHER_JOBS,
) -> list[OutageResult]:
    """Both sides, fuse on first; their results. Raises RuntimeError, TimeoutError or
    subprocess errors as the retry-storm drill does."""
    logdir = STORM_DIR / "logs"
    results = []
    with ExitStack() as cleanup:
        server_url, server = ensure_redis(env.str("REDIS_URL", default=DEFAULT_REDIS_URL))
        if server is not None:
            cleanup.callback(server.stop)
        for side, fused in (("fuse on", True), ("fuse off", False)):
            with ExitStack() as side_cleanup:
                redis_url = side_cleanup.enter_context(demo_redis(server_url))
                database_url = side_cleanup.enter_context(fresh_database(say))
                results.append(
                    _side(
                        side,
                        fused,
                        config,
                        down_seconds=down_seconds,
                        other_jobs=other_jobs,
                        urls=(database_url, redis_url),
                        logdir=logdir,
                        cleanup=side_cleanup,
                        say=say,
                    )
                )
    return results


def _side(
    side: str,
    fused: bool,
    config: StormConfig,
    *,
    down_seconds: float,
    other_jobs: int,
    urls: tuple[str, str],
    logdir: Path,
    cleanup: ExitStack,
    say: Callable[[str], None],
) -> OutageResult:
    database_url, redis_url = urls
    environ = platform_env(config, database_url, redis_url, STORM_DIR / f"metrics-{side[-3:]}")
    overrides = json.loads(environ["JOBS_KIND_OVERRIDES"])
    overrides["webhook.deliver"] = POLICY | (FUSE if fused else {})
    environ |= {
        "JOBS_KIND_OVERRIDES": json.dumps(overrides),
        "JOBS_ALLOW_PRIVATE_DESTINATIONS": "true",
        "JOBS_SCHEDULER_INTERVAL": "0.1",
    }
    stack = Stack(env=environ, logdir=logdir)
    cleanup.callback(stack.stop)
    dest = Destination()
    server = cleanup.enter_context(LoopbackHTTPServer(0, dest.handler()))
    say(f"{side}: migrating, starting a worker of {config.concurrency} and the scheduler")
    stack.run(["python", "manage.py", "migrate", "--noinput"], timeout=300)
    stack.start_worker(concurrency=config.concurrency, log_name=f"outage-worker-{side[-3:]}")
    stack.start_scheduler(log_name=f"outage-scheduler-{side[-3:]}")
    probe = PlatformProbe(database_url)
    cleanup.callback(probe.close)
    payload = {"url": f"http://127.0.0.1:{server.port}/hook", "connect_timeout": 1}
    result = OutageResult(side, config.jobs, down_seconds, other_jobs=other_jobs)
    started = time.time()
    dest.up_at = started + down_seconds
    _submit(stack, config.jobs, payload, other_jobs)
    # (the other kind's jobs went with them: other_jobs demo.sleep, spread among them)
    say(f"{side}: {config.jobs} jobs sent; the destination refuses for {down_seconds:g} s")
    while time.time() - started < config.settle_seconds:
        ended, held = probe.rows(
            "SELECT count(*) FILTER (WHERE status IN ('succeeded', 'dead', 'cancelled')),"
            " count(*) FILTER (WHERE waiting_reason = 'fuse_open') FROM jobs_job"
            " WHERE kind = 'webhook.deliver'"
        )[0]
        result.max_held = max(result.max_held, held)
        if ended >= config.jobs:
            break
        time.sleep(0.2)
    result.seconds = time.time() - started
    webhook = " AND kind = 'webhook.deliver'"
    statuses = dict(
        probe.rows(f"SELECT status, count(*) FROM jobs_job WHERE true{webhook} GROUP BY 1")
    )
    result.succeeded = statuses.get("succeeded", 0)
    result.dead = dict(
        probe.rows(
            f"SELECT dead_reason, count(*) FROM jobs_job WHERE status = 'dead'{webhook} GROUP BY 1"
        )
    )
    last = probe.rows(
        f"SELECT extract(epoch FROM max(finished_at))::float8 FROM jobs_job WHERE true{webhook}"
    )[0][0]
    if result.succeeded == config.jobs and last is not None:
        result.done_after_return = max(0.0, last - dest.up_at)
    result.left = {
        f"{status}/{reason or '-'}": n
        for status, reason, n in probe.rows(
            "SELECT status, waiting_reason, count(*) FROM jobs_job"
            f" WHERE status NOT IN ('succeeded', 'dead', 'cancelled'){webhook} GROUP BY 1, 2"
        )
    }
    result.attempts = probe.rows(
        "SELECT count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
        " WHERE j.kind = 'webhook.deliver'"
    )[0][0]
    median, longest = probe.rows(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), max(s) FROM ("
        " SELECT extract(epoch FROM finished_at - enqueued_at)::float8 AS s FROM jobs_job"
        " WHERE kind = 'demo.sleep' AND status = 'succeeded'"
        f" AND enqueued_at >= to_timestamp({float(started)!r})) t"
    )[0]
    if median is not None:
        result.other_latency = (float(median), float(longest))
    result.trips = probe.rows("SELECT coalesce(sum(trips), 0) FROM jobs_fuse")[0][0]
    result.requests_down, result.requests_up = dest.down, dest.up
    result.other_calm = _calm_latency(stack, probe, config.jobs, other_jobs, payload)
    return result


def _calm_latency(
    stack: Stack, probe: PlatformProbe, jobs: int, others: int, payload: dict[str, Any]
) -> tuple[float, float] | None:
    """The outage's submissions again with the destination up: the `others` demo.sleep
    jobs' median and max seconds from enqueue to end (None: none sent). Raises
    TimeoutError when they do not all succeed within 180 s."""
    if others <= 0:
        return None
    since = time.time()
    _submit(stack, jobs, payload, others)
    recent = f"kind = 'demo.sleep' AND enqueued_at >= to_timestamp({float(since)!r})"
    deadline = time.monotonic() + 180
    while (
        probe.rows(f"SELECT count(*) FROM jobs_job WHERE {recent} AND status = 'succeeded'")[0][0]
        < others
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the calm run's {others} demo.sleep jobs did not end in 180 s")
        time.sleep(0.2)
    median, longest = probe.rows(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY s), max(s) FROM ("
        " SELECT extract(epoch FROM finished_at - enqueued_at)::float8 AS s FROM jobs_job"
        f" WHERE {recent}) t"
    )[0]
    return float(median), float(longest)


def _submit(stack: Stack, count: int, payload: dict[str, Any], others: int) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-startup", "-v", "0", "-c", SUBMITTER],
        cwd=ROOT,
        env={**stack.environ(), "LOG_LEVEL": "WARNING"},
        input=json.dumps([count, payload, others, OTHER_PAYLOAD]) + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    if f"submitted {count}" not in done.stdout:
        raise RuntimeError(f"submitting jobs failed: {done.stderr[-1500:]}")


def outage_table(results: list[OutageResult]) -> str:
    """The sides side by side, one figure a row."""
    rows = [
        ("requests while down", lambda r: str(r.requests_down)),
        ("requests after it returned", lambda r: str(r.requests_up)),
        ("attempts", lambda r: str(r.attempts)),
        ("fuse trips", lambda r: str(r.trips)),
        ("most jobs held (fuse_open)", lambda r: str(r.max_held)),
        ("succeeded", lambda r: f"{r.succeeded} of {r.jobs}"),
        (
            "dead (reason: n)",
            lambda r: ", ".join(f"{k}: {v}" for k, v in sorted(r.dead.items())) or "0",
        ),
        (
            "not ended (status/reason: n)",
            lambda r: ", ".join(f"{k}: {v}" for k, v in sorted(r.left.items())) or "0",
        ),
        (
            "all done after it returned",
            lambda r: "-" if r.done_after_return is None else f"{r.done_after_return:.1f} s",
        ),
        (
            f"other kind ({results[0].other_jobs if results else OTHER_JOBS} demo.sleep):"
            " median / max",
            lambda r: (
                "-"
                if r.other_latency is None
                else f"{r.other_latency[0]:.2f} / {r.other_latency[1]:.2f} s"
            ),
        ),
        (
            "other kind, destination up: median / max",
            lambda r: (
                "-" if r.other_calm is None else f"{r.other_calm[0]:.2f} / {r.other_calm[1]:.2f} s"
            ),
        ),
        ("side took", lambda r: f"{r.seconds:.1f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'':<{width}}  " + "  ".join(f"{r.side:>14}" for r in results)]
    for name, value in rows:
        lines.append(f"{name:<{width}}  " + "  ".join(f"{value(r):>14}" for r in results))
    return "\n".join(lines)
