"""Stock Celery for `python -m bench`: a worker of bench.stock_app, and when its queue is drained."""

from __future__ import annotations

import time

import redis

from devstack.processes import Process, Stack
from devstack.services import wait_for


def start_stock_worker(
    stack: Stack, broker_url: str, *, tracked: bool, name: str, concurrency: int = 2
) -> Process:
    """A stock Celery worker (bench.stock_app) on `broker_url`; returns once it is ready."""
    argv = ["celery", "-A", "bench.stock_app", "-b", broker_url, "worker", "-Q", "stock"]
    argv += ["--loglevel", "INFO", "--concurrency", str(concurrency)]
    argv += ["--hostname", f"{name}-{time.time_ns()}@%h"]
    if tracked:
        argv += ["-E", "--prefetch-multiplier", "1"]
    stack.commands[name] = argv
    process = stack.start(name)
    # The log file is appended to by every worker of this name: only this one's lines count
    # (an earlier run's " ready." made later runs' timing start before the worker booted).
    offset = len(process.log())

    def ready() -> bool:
        if not process.alive():
            raise RuntimeError(f"{name} exited early:\n{process.log()[-3000:]}")
        return " ready." in process.log()[offset:]

    wait_for(ready, timeout=120, what=f"{name} ready")
    return process


def queue_empty(client: redis.Redis, queue: str) -> bool:
    """No message of `queue` waits (any priority sub-queue) and none is unacknowledged."""
    pipe = client.pipeline()
    keys = [queue, *(f"{queue}\x06\x16{p}" for p in range(1, 10))]
    for key in keys:
        pipe.llen(key)
    pipe.hlen("unacked")
    return not any(pipe.execute())


def wait_drained(client: redis.Redis, queue: str, *, timeout: float) -> float:
    """Seconds (perf_counter) at which `queue` was first seen empty twice in a row, 10 ms apart."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if queue_empty(client, queue):
            seen = time.perf_counter()
            time.sleep(0.01)
            if queue_empty(client, queue):
                return seen
        time.sleep(0.01)
    raise TimeoutError(f"queue {queue} not drained in {timeout} s")
