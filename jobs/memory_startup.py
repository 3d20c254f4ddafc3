"""The worker main process's side of the memory guard, before its pool forks.

- `install_recycle_measure`: billiard's after-task per-child check reads owned
  memory (observability.memory.owned_bytes) instead of ru_maxrss.
- `fresh_child_owned_bytes`: what a new child owns once started, measured on
  a probe fork, for the start-up refusal (config.startup, jobs.E005).
- `allocate_ballast`: JOBS_WORKER_BALLAST_BYTES, a stand-in for a heavy import.

See jobs.memory_guard for the measure and the per-attempt limits.
"""

from __future__ import annotations

import gc
import logging
import os
import time
import uuid

import billiard.pool
from celery import signals
from django.db import connections

from jobs import child_retire, events
from observability.memory import mark_fork, owned_bytes

logger = logging.getLogger(__name__)

# --- recycling after an attempt ----------------------------------------------

_recycle: dict[str, object] = {"limit_kb": 0, "hostname": ""}


def owned_kib() -> int:
    """Owned memory in KiB, as billiard's per-child check compares it; counts a recycle it causes.

    When the reading is over the pool's per-child limit, billiard ends the
    child right after this call (billiard/pool.py Worker.workloop), so the
    recycle is announced here (events.child_recycling, reason max_memory).
    A child marked to retire (jobs.child_retire) reads just over the limit
    once, and its recycle is announced with that reason.
    """
    limit_kb = int(_recycle["limit_kb"] or 0)  # type: ignore[call-overload]
    retiring = child_retire.take_pending()
    if retiring is not None:
        events.child_recycling.send(
            sender=None, hostname=str(_recycle["hostname"]), reason=retiring
        )
        return (limit_kb or child_retire.UNREACHABLE_KIB) + 1
    used_kb = max(1, owned_bytes() // 1024)  # billiard logs an error for <= 0
    if limit_kb and used_kb > limit_kb:
        events.child_recycling.send(
            sender=None, hostname=str(_recycle["hostname"]), reason=events.RecycleReason.MAX_MEMORY
        )
    return used_kb


def install_recycle_measure(*, hostname: str, limit_kb: int) -> None:
    """Make billiard's after-task memory check read owned memory; call in the main process before forking.

    billiard compares `mem_rss()` (ru_maxrss, the peak RSS including what a
    child inherited at fork) with worker_max_memory_per_child after each
    task and, when over, ends the child with EX_RECYCLE once its result is
    sent. That is the right moment and exit path; only the reading is
    wrong. billiard.pool imports `mem_rss` by name, so replacing that one
    module attribute changes the reading and nothing else;
    tests/unit/test_memory_guard.py fails if billiard stops calling it.
    """

    _recycle["limit_kb"], _recycle["hostname"] = limit_kb, hostname
    billiard.pool.mem_rss = owned_kib  # type: ignore[attr-defined]


# --- start-up check ------------------------------------------------------------


def fresh_child_owned_bytes(timeout: float = 30.0) -> int | None:
    """Bytes a new pool child of this (main) process owns once started, measured on a probe fork.

    The probe marks its RSS at fork, runs what a pool child runs at start
    (Celery's worker_process_init receivers: ours, Django's) and what every
    attempt needs first (a database connection of its own and an ORM
    query), collects garbage, reports owned_bytes() through a pipe and exits
    with os._exit, so nothing of it runs on. A database it cannot reach
    only makes the figure smaller. Returns None when the probe fails or
    takes longer than `timeout` seconds (it is then killed).
    """

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the probe
        status = 1
        try:
            os.close(read_fd)
            mark_fork()
            signals.worker_process_init.send(sender=None)
            _warm_up()
            os.write(write_fd, str(owned_bytes()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return None
        data = os.read(read_fd, 64)
    finally:
        os.close(read_fd)
    try:
        return int(data)
    except ValueError:
        return None


def _warm_up() -> None:
    """In the probe: what an attempt needs first, a database connection and an ORM query."""

    from jobs.models import Job  # noqa: PLC0415 - imported by config.startup before the app registry is ready

    # An inherited connection shares its socket with the parent: never use or
    # close it here. Keeping a reference stops its finalizer from sending a
    # goodbye on the parent's socket before os._exit.
    inherited = []
    for conn in connections.all(initialized_only=True):
        inherited.append(conn.connection)
        conn.connection = None
    try:
        Job.objects.filter(id=uuid.uuid4()).exists()
    except Exception:  # a database down now is the checks' business, not this figure's
        logger.info("memory probe: no database; its figure leaves the connection out")
    connections.close_all()  # its own connection only: the inherited ones were set aside
    gc.collect()


def allocate_ballast(size: int) -> bytearray | None:
    """Allocate and touch `size` bytes in this process (JOBS_WORKER_BALLAST_BYTES), or None for 0.

    Stands in for a heavy import in the worker's main process: every page is
    written, so it is resident, and a forked child inherits it.
    """
    if size <= 0:
        return None
    ballast = bytearray(size)
    page = os.sysconf("SC_PAGE_SIZE")
    for offset in range(0, size, page):
        ballast[offset] = 1
    return ballast
