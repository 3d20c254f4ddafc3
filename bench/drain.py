"""Drain rate of no-op jobs: how many attempts per second one worker finishes.

    .venv/bin/python -m bench.drain --jobs 2000 --runs 3

N `demo.flaky` jobs that succeed at once (or, with `--fail`, fail every
attempt) are submitted through the API while no worker runs, so they wait
as messages; then a worker (prefork, `--concurrency` children, INFO
logging as shipped) starts and the time from its "ready" line until the
last attempt is recorded in PostgreSQL is the drain time. Prints
attempts/s per run and the median. Used to measure the per-attempt cost of
a change (run it on both checkouts, same machine, one after the other).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rig import TOKEN_SCRIPT  # noqa: E402
from devstack.postgres import create_database, drop_database  # noqa: E402
from devstack.processes import Stack  # noqa: E402
from devstack.services import RedisServer, free_port, wait_for  # noqa: E402


def one_run(*, jobs: int, concurrency: int, fail: bool, logdir: Path) -> tuple[float, int]:
    """One fresh platform; returns (seconds to drain, attempts recorded)."""
    redis = RedisServer().start()
    db_name = f"bench_drain_{time.time_ns()}"
    database_url = create_database(db_name)
    stack = Stack(
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DJANGO_DEBUG": "false",
            "LOG_LEVEL": "INFO",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis.url,
            "CELERY_BROKER_URL": redis.url,
            "JOBS_METRICS_DIR": str(logdir / db_name / "metrics"),
            "JOBS_WORKER_METRICS_PORT": str(free_port()),
            "JOBS_SCHEDULER_METRICS_PORT": str(free_port()),
            "OTEL_SDK_DISABLED": "true",
            "JOBS_RETRY_BUDGET_RATIO": "1000",
            "JOBS_RETRY_BUDGET_FLOOR": "1000000",
            # One token submits thousands of jobs a second: far above the API's
            # default rate limits (config/settings/security.py), still counted.
            "JOBS_API_RATE_PER_TOKEN": "10000/s",
            "JOBS_API_RATE_PER_ADDRESS": "10000/s",
            # Failing attempts retry far in the future: each job is attempted once.
            "JOBS_KIND_OVERRIDES": json.dumps(
                {
                    "demo.flaky": {
                        "max_attempts": 2,
                        "backoff_floor": 3600,
                        "backoff_base": 3600,
                        "backoff_cap": 7200,
                    }
                }
            ),
            "JOBS_QUEUE_MAX_READY": str(jobs * 2),
        },
        logdir=logdir / db_name,
    )
    try:
        stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
        out = stack.run(["python", "manage.py", "shell", "-c", TOKEN_SCRIPT]).stdout
        token = next(line[6:] for line in out.splitlines() if line.startswith("TOKEN="))
        port = free_port()
        stack.start_web(port, workers=2, threads=4, timeout=90)
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        body: dict[str, Any] = {
            "kind": "demo.flaky",
            "payload": {"fail_times": 100 if fail else 0},
        }

        def submit(_: int) -> None:
            response = session.post(f"http://127.0.0.1:{port}/api/jobs/", json=body, timeout=30)
            response.raise_for_status()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(submit, range(jobs)))
        dsn = database_url.replace("postgres://", "postgresql://", 1)
        stack.start_worker(concurrency=concurrency, timeout=120)
        started = time.perf_counter()

        def drained() -> int | None:
            with psycopg.connect(dsn) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"
                ).fetchone()
            done = int(row[0]) if row else 0
            return done if done >= jobs else None

        attempts = wait_for(drained, timeout=3600, interval=0.2, what="drain")
        return time.perf_counter() - started, attempts
    finally:
        stack.stop()
        redis.stop()
        drop_database(db_name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--fail", action="store_true", help="every attempt fails (and retries)")
    args = parser.parse_args()
    logdir = Path("var") / "bench" / "drain"
    rates = []
    for n in range(args.runs):
        seconds, attempts = one_run(
            jobs=args.jobs, concurrency=args.concurrency, fail=args.fail, logdir=logdir
        )
        rates.append(attempts / seconds)
        print(
            f"run {n + 1}: {attempts} attempts in {seconds:.2f} s = {rates[-1]:.1f}/s", flush=True
        )
    print(
        f"median {statistics.median(rates):.1f} attempts/s (min {min(rates):.1f}, max {max(rates):.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
