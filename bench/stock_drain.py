"""Drain rate of stock tracked Celery: the baseline bench/drain.py's figures are compared with.

    .venv/bin/python -m bench.stock_drain --jobs 2000 --runs 3

N no-op messages wait in a fresh Redis; then `celery worker` (prefork,
`--concurrency` children, INFO logging, acks_late, prefetch 1, task events
on: what Flower needs) starts, and the time from its "ready" line until the
queue and its unacked set are empty is the drain time. `--defaults` runs
Celery's defaults instead (acks early, prefetch 4, no events). Prints
jobs/s per run and the median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devstack.services import RedisServer, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = """
from celery import Celery
import os
app = Celery("stock", broker=os.environ["STOCK_BROKER_URL"])
if os.environ.get("STOCK_TRACKED") == "1":
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1,
                    worker_send_task_events=True, task_send_sent_event=True)
app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False)

@app.task(name="stock.noop")
def noop(n):
    return None
"""


def one_run(*, jobs: int, concurrency: int, tracked: bool, workdir: Path) -> float:
    """Seconds one stock worker takes to drain `jobs` no-op messages."""
    server = RedisServer().start()
    env = {
        **os.environ,
        "STOCK_BROKER_URL": server.url,
        "STOCK_TRACKED": "1" if tracked else "0",
        "PYTHONPATH": str(workdir),
        "PYTHONUNBUFFERED": "1",
    }
    try:
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import stock_app\nfor n in range({jobs}): stock_app.noop.delay(n)",
            ],
            env=env,
            cwd=workdir,
            check=True,
        )
        log = workdir / "worker.log"
        with open(log, "wb") as handle:
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "stock_app",
                    "worker",
                    "--loglevel",
                    "INFO",
                    "--concurrency",
                    str(concurrency),
                    "--without-gossip",
                    "--without-mingle",
                ],
                env=env,
                cwd=workdir,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for(lambda: b" ready." in log.read_bytes(), timeout=60, what="stock worker ready")
            started = time.perf_counter()
            client = redis.Redis.from_url(server.url)
            wait_for(
                lambda: client.llen("celery") == 0 and client.hlen("unacked") == 0,
                timeout=3600,
                interval=0.05,
                what="stock drain",
            )
            return time.perf_counter() - started
        finally:
            worker.terminate()
            worker.wait(30)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--defaults", action="store_true", help="stock Celery defaults")
    args = parser.parse_args()
    rates = []
    with tempfile.TemporaryDirectory(prefix="stock-drain-") as tmp:
        workdir = Path(tmp)
        (workdir / "stock_app.py").write_text(APP)
        for n in range(args.runs):
            seconds = one_run(
                jobs=args.jobs,
                concurrency=args.concurrency,
                tracked=not args.defaults,
                workdir=workdir,
            )
            rates.append(args.jobs / seconds)
            print(
                f"run {n + 1}: {args.jobs} jobs in {seconds:.2f} s = {rates[-1]:.1f}/s", flush=True
            )
    print(
        f"median {statistics.median(rates):.1f} jobs/s (min {min(rates):.1f}, max {max(rates):.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
