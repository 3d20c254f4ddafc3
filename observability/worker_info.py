"""Worker memory in `celery inspect stats` (so on Flower's worker page) and `inspect jobs_memory`.

`WorkerInfo` is a worker bootstep. Celery merges every bootstep's `info()`
into the stats reply (celery/worker/worker.py `WorkController.stats` ->
`Blueprint.info`). Flower shows each top-level key of it as one row of the
worker page's "Other" tab, so the stats carry readable rows:

    "memory_children": "pid 4242: 58.3 MiB RSS, 3 threads; pid 4243: 57.9 MiB RSS, 3 threads",
    "memory_main_process": "98.5 MiB RSS",
    "memory_limit_per_child": "512.0 MiB, 1000 tasks",   # "none" where unlimited
    "pending_retries": 12,                               # None: database unreachable

The same numbers in bytes, for programs, come from
`celery -A config inspect jobs_memory`:

    {
        "children": [{"pid": 4242, "rss_bytes": 61_000_000, "threads": 3}, ...],
        "main_rss_bytes": 58_000_000,
        "max_memory_per_child_bytes": 536_870_912,   # 0: no limit
        "max_tasks_per_child": 1000,                 # 0: no limit
        "pending_retries": 12,                       # None: database unreachable
    }

Children are read from the process table by the main process (psutil), so
a busy or stuck child still shows. Importing this module also registers
the `jobs_dump` inspect command (observability.dumps). The step also runs
the thread that writes this worker's report for the admin overview
(observability.worker_report) while the worker is up.
"""

from __future__ import annotations

import logging
from typing import Any

import psutil
from celery import bootsteps
from celery.worker.control import inspect_command

from jobs.child_retire import limit_shown_kib
from observability import dumps
from observability.memory import rss_bytes

logger = logging.getLogger(__name__)


class WorkerInfo(bootsteps.StartStopStep):
    """Adds the "memory" block to the worker's stats; prepares dumps before the pool forks.

    A StartStopStep, not a plain Step: `Blueprint.info` asks only the steps in
    the worker's `steps` list, and only StartStopSteps are put there. It starts
    and stops nothing (no `create()` object).
    """

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        # Steps are built before any of them starts, so this runs before the fork.
        dumps.prepare_parent()
        self.writer: Any = None

    def info(self, worker: Any) -> dict[str, Any]:
        return readable(memory_block(worker))

    def start(self, worker: Any) -> None:
        # After the pool (required above): the report lists its children.
        from observability import worker_report

        self.writer = worker_report.start_writer(worker)

    def stop(self, worker: Any) -> None:
        if self.writer is not None:
            self.writer.stop()

    def close(self, worker: Any) -> None:
        dumps.remove_parent_dir()


def pool_pids(worker: Any) -> list[int]:
    """Pids of the worker's pool children; [] for a pool without any (solo, threads)."""
    try:
        info = worker.pool.info or {}
    except Exception:  # pool not started yet, or already stopped
        return []
    return [int(pid) for pid in info.get("processes") or [] if pid]


OWNED_FAMILY = "jobs_worker_child_owned_bytes"


def owned_by_pid() -> dict[int, int]:
    """{pid: bytes the child owns} from the children's own gauge files (jobs_worker_child_owned_bytes).

    Each child writes what it owns (RSS grown since fork) at start and
    after each attempt to its `gauge_liveall_<pid>.db` in this worker's
    multiprocess directory; only it knows its size at fork. {} when the
    worker keeps no directory.
    """
    import json
    import re

    from prometheus_client.mmap_dict import MmapedDict

    from observability.multiproc import multiproc_dir

    directory = multiproc_dir()
    if directory is None:
        return {}
    owned: dict[int, int] = {}
    for path in directory.glob("gauge_liveall_*.db"):
        match = re.fullmatch(r"gauge_liveall_(\d+)\.db", path.name)
        if not match:
            continue
        try:
            values = MmapedDict.read_all_values_from_file(str(path))
        except (OSError, ValueError):
            continue  # a child's file half written or just removed
        for key, value, _timestamp, _pos in values:
            if json.loads(key)[0] == OWNED_FAMILY:
                owned[int(match.group(1))] = int(value)
    return owned


def memory_block(worker: Any, *, with_pending_retries: bool = True) -> dict[str, Any]:
    """RSS (bytes) and live threads per child, main RSS, the recycle limits, pending retries.

    `with_pending_retries=False` leaves out the database count (None).
    """
    children = []
    owned = owned_by_pid()
    for pid in pool_pids(worker):
        try:
            child = psutil.Process(pid)
            with child.oneshot():
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                children.append(
                    {
                        "pid": pid,
                        "rss_bytes": child.memory_info().rss,
                        # What the per-child limit judges; None before the child reported it.
                        "owned_bytes": owned.get(pid),
                        "threads": child.num_threads(),
                    }
                )
        except psutil.Error:
            continue
    return {
        "children": children,
        "main_rss_bytes": rss_bytes(),
        # Celery's setting is in KiB (config/settings/celery.py); without a
        # limit the pool has an unreachable one (jobs.child_retire).
        "max_memory_per_child_bytes": limit_shown_kib(worker.max_memory_per_child) * 1024,
        "max_tasks_per_child": int(worker.max_tasks_per_child or 0),
        "pending_retries": pending_retries() if with_pending_retries else None,
    }


MIB = 1024 * 1024


def _mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"


def readable(block: dict[str, Any]) -> dict[str, Any]:
    """The rows Flower shows for a memory_block(): sizes in MiB, one string per row."""
    children = "; ".join(
        f"pid {c['pid']}: {_mib(c['rss_bytes'])} RSS, "
        + (f"{_mib(c['owned_bytes'])} owned, " if c.get("owned_bytes") is not None else "")
        + f"{c['threads']} threads"
        for c in block["children"]
    )
    memory_limit = block["max_memory_per_child_bytes"]
    task_limit = block["max_tasks_per_child"]
    return {
        "memory_children": children or "none",
        "memory_main_process": f"{_mib(block['main_rss_bytes'])} RSS",
        "memory_limit_per_child": (
            f"{_mib(memory_limit) if memory_limit else 'no memory limit'}, "
            f"{f'{task_limit} tasks' if task_limit else 'no task limit'}"
        ),
        "pending_retries": block["pending_retries"],
    }


@inspect_command()
def jobs_memory(state: Any, **_: Any) -> dict[str, Any]:
    """The worker's memory_block() in bytes (`celery -A config inspect jobs_memory`)."""
    return memory_block(state.consumer.controller)


def pending_retries() -> int | None:
    """Jobs in status retrying, or None when the database cannot be read.

    The main process holds no connection between calls: it is opened here and
    closed again, so none is inherited by children forked later.
    """
    from django.db import close_old_connections, connection

    from jobs import selectors

    try:
        close_old_connections()
        return selectors.pending_retry_count()
    except Exception as exc:
        logger.warning("pending retries not counted: %s", exc)
        return None
    finally:
        connection.close()
