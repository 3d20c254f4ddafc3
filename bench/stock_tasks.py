"""The baseline: plain Celery tasks retried the stock way (an ETA message held by the worker).

Loaded into a benchmark's worker with `celery -A config worker -I bench.stock_tasks`
(bench/retry_memory.py) or by the drill's stock app (bench/storm_stock_app.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import task_failure

# The seed's code kept each attempt's buffer to resume from on the next try,
# in a module-level cache, dropped when the job succeeds: in this child only.
# A retry often runs in another child, so the other children keep theirs.
KEPT: dict[str, list[bytearray]] = {}
# Counters the drill reads (bench/storm/probes.py), in the broker's database.
COUNTER_PREFIX = "storm:stock:"
_clients: dict[str, redis.Redis] = {}
PAGE_BYTES = 4096


def touched_buffer(size: int) -> bytearray:
    """`size` bytes with one byte written per 4 KiB page, so all of it is resident.

    The same as jobs.kinds.storm.touched_buffer; not imported from there,
    because this module runs in a worker without Django.
    """
    buffer = bytearray(size)
    buffer[::PAGE_BYTES] = b"\x01" * len(range(0, size, PAGE_BYTES))
    return buffer


def counters(task: Task) -> redis.Redis:
    """This process's client of the task's broker database (where the drill reads the counters)."""
    url = str(task.app.conf.broker_url)
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url)
    return _clients[url]


@shared_task(name="bench.stock_noop", acks_late=True)
def stock_noop() -> None:
    """Does nothing; only its waiting matters."""


@shared_task(
    bind=True,
    name="bench.stock_storm",
    # Celery's documented automatic retry: each retry is a countdown (ETA)
    # message, reserved and held in the worker's memory until due.
    autoretry_for=(SoftTimeLimitExceeded,),
    retry_backoff=1,
    retry_backoff_max=8,
    retry_jitter=True,
    max_retries=10,
)
def stock_storm(
    self: Task, fail_times: int, buffer_bytes: int, leave_thread: bool, thread_seconds: float
) -> None:
    """The drill's job, stock: hangs (until the soft time limit) on its first `fail_times` runs.

    Each run allocates `buffer_bytes` (resident) and keeps it in KEPT across
    retries; with `leave_thread` the hanging call runs in a helper thread
    that holds the buffer for `thread_seconds`, since nothing tells it that
    its task was given up.
    """
    client = counters(self)
    if self.request.retries:
        client.decr(COUNTER_PREFIX + "pending")
    client.incr(COUNTER_PREFIX + "attempts")
    client.incr(COUNTER_PREFIX + "inflight")
    try:
        _run(self, fail_times, buffer_bytes, leave_thread, thread_seconds)
    except SoftTimeLimitExceeded:
        # Counted before autoretry_for publishes the countdown retry (which
        # may start at once: the jitter can make the countdown 0).
        client.incr(COUNTER_PREFIX + "pending")
        raise
    finally:
        client.decr(COUNTER_PREFIX + "inflight")


def _run(
    task: Task, fail_times: int, buffer_bytes: int, leave_thread: bool, thread_seconds: float
) -> None:
    task_id = str(task.request.id)
    buffer = touched_buffer(buffer_bytes)
    KEPT.setdefault(task_id, []).append(buffer)
    hangs = task.request.retries < fail_times
    if leave_thread:
        done = threading.Event()

        def call(held: bytearray = buffer) -> None:
            if hangs:
                time.sleep(thread_seconds)
            done.set()

        threading.Thread(target=call, name=f"stock-storm-{task_id}", daemon=True).start()
        while not done.wait(0.05):  # SoftTimeLimitExceeded lands here
            pass
    elif hangs:
        time.sleep(3600)
    KEPT.pop(task_id, None)
    counters(task).incr(COUNTER_PREFIX + "succeeded")


@task_failure.connect
def _count_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    # Retries exhausted: the last one re-raised instead of scheduling a retry.
    if getattr(sender, "name", None) == "bench.stock_storm":
        client = counters(sender)
        client.incr(COUNTER_PREFIX + "failed")
        if isinstance(exception, SoftTimeLimitExceeded):
            client.decr(COUNTER_PREFIX + "pending")
