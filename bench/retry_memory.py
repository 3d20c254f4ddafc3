"""Worker memory with N retries pending: stock Celery ETA messages vs the platform's scheduler.

Stock Celery parks a retry delay (`countdown`/`eta`, `Task.retry`) as a
message the worker reserves and holds in memory until due (celery issues
2218 and 9849). The platform keeps pending retries in the database and
publishes them when due. This measures, in one run on one machine, the
growth of a worker's RSS (main + children, bytes) from idle to N pending
retries, for both, and prints the ratio.

    .venv/bin/python -m bench.retry_memory --pending 2000

Needs PostgreSQL at 127.0.0.1:5432 (user postgres); starts its own Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack.postgres import create_database, drop_database  # noqa: E402
from devstack.processes import Stack  # noqa: E402
from devstack.services import RedisServer, free_port, wait_for  # noqa: E402
from observability.memory import tree_rss_bytes  # noqa: E402

MIB = 1024 * 1024


def settle_rss(pid: int, *, seconds: float = 3.0) -> int:
    """Median of RSS samples over `seconds` (the worker's tree, bytes)."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(tree_rss_bytes(pid))
        time.sleep(0.2)
    return sorted(samples)[len(samples) // 2]


def stock(stack: Stack, pending: int) -> tuple[int, int, int]:
    """(idle RSS, RSS with `pending` ETA retries, messages the worker holds)."""
    os.environ["CELERY_BROKER_URL"] = stack.env["CELERY_BROKER_URL"]
    from celery import Celery  # noqa: PLC0415 - the stock side's Celery app is built only when it runs

    app = Celery("bench", broker=stack.env["CELERY_BROKER_URL"], set_as_current=False)
    app.conf.task_default_queue = "default"
    worker = stack.start_worker("-I", "bench.stock_tasks", concurrency=2, log_name="stock-worker")
    idle = settle_rss(worker.pid)
    for _ in range(pending):
        app.send_task("bench.stock_noop", countdown=3600, queue="default")

    def held() -> int:
        scheduled = app.control.inspect(timeout=2).scheduled() or {}
        return sum(len(v) for v in scheduled.values())

    wait_for(
        lambda: held() >= pending, timeout=300, interval=1, what="worker holding every ETA message"
    )
    loaded = settle_rss(worker.pid)
    count = held()
    worker.stop()
    return idle, loaded, count


def ours(stack: Stack, pending: int, token: str, base_url: str) -> tuple[int, int, int]:
    """(idle RSS, RSS with `pending` retries waiting in the scheduler's store, messages held)."""
    from celery import Celery  # noqa: PLC0415 - the stock side's Celery app is built only when it runs

    app = Celery("bench", broker=stack.env["CELERY_BROKER_URL"], set_as_current=False)
    worker = stack.start_worker(concurrency=2, log_name="platform-worker")
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"

    def submit(_: int) -> None:
        r = session.post(
            f"{base_url}/api/jobs/",
            json={"kind": "demo.flaky", "payload": {"fail_times": 1}},
            timeout=30,
        )
        r.raise_for_status()

    # Warm the children up on a few jobs first, as a worker in service would be.
    for i in range(20):
        submit(i)
    count_url = f"{base_url}/api/jobs/?status=retrying"
    wait_for(lambda: session.get(count_url).json()["count"] >= 20, timeout=120, what="warm-up")
    idle = settle_rss(worker.pid)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(submit, range(pending)))
    wait_for(
        lambda: session.get(count_url).json()["count"] >= pending + 20,
        timeout=600,
        interval=1,
        what="every job waiting for its retry",
    )
    loaded = settle_rss(worker.pid)
    inspect = app.control.inspect(timeout=2)
    held = sum(len(v) for v in (inspect.scheduled() or {}).values()) + sum(
        len(v) for v in (inspect.reserved() or {}).values()
    )
    worker.stop()
    return idle, loaded, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=2000, help="pending retries (default 2000)")
    args = parser.parse_args()
    redis = RedisServer().start()
    db_name = f"jobs_bench_{os.getpid()}"
    database_url = create_database(db_name)
    logdir = Path(tempfile.mkdtemp(prefix="jobs-bench-"))
    stack = Stack(
        env={
            "DATABASE_URL": database_url,
            "REDIS_URL": redis.url,
            "CELERY_BROKER_URL": redis.url,
            "DJANGO_DEBUG": "false",
            "JOBS_METRICS_DIR": str(logdir / "metrics"),
            "JOBS_WORKER_METRICS_PORT": "0",
            "JOBS_QUEUE_MAX_READY": str(10 * args.pending),
            "JOBS_RETRY_BUDGET_FLOOR": str(10 * args.pending),
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_floor": 3600, "backoff_cap": 7200}}
            ),
        },
        logdir=logdir,
    )
    try:
        stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
        script = (
            "from django.contrib.auth.models import User; from rest_framework.authtoken.models import Token;"
            "u=User.objects.create_user('bench'); print('TOKEN=' + Token.objects.create(user=u).key)"
        )
        out = stack.run(["python", "manage.py", "shell", "-c", script]).stdout
        token = next(line[6:] for line in out.splitlines() if line.startswith("TOKEN="))
        port = free_port()
        stack.start_web(port)
        stack.start_scheduler()
        s_idle, s_loaded, s_held = stock(stack, args.pending)
        o_idle, o_loaded, o_held = ours(stack, args.pending, token, f"http://127.0.0.1:{port}")
    finally:
        stack.stop()
        redis.stop()
        drop_database(db_name)
    s_growth, o_growth = s_loaded - s_idle, o_loaded - o_idle
    print(
        f"\nworker RSS (main + 2 children) with {args.pending} retries pending; logs in {logdir}\n"
    )
    print(
        f"| {'retries wait in':<34} | {'msgs held by worker':>19} | {'idle MiB':>8} | {'loaded MiB':>10} | {'growth MiB':>10} | {'growth vs stock':>15} |"
    )
    print(f"|{'-' * 36}|{'-' * 21}|{'-' * 10}|{'-' * 12}|{'-' * 12}|{'-' * 17}|")
    for label, idle, loaded, held, growth in (
        ("stock Celery (countdown=3600)", s_idle, s_loaded, s_held, s_growth),
        ("platform (scheduler's store)", o_idle, o_loaded, o_held, o_growth),
    ):
        ratio = growth / s_growth if s_growth > 0 else float("nan")
        print(
            f"| {label:<34} | {held:>19} | {idle / MIB:>8.1f} | {loaded / MIB:>10.1f} | {growth / MIB:>10.1f} | {ratio:>15.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
