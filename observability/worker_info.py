"""Worker memory in `celery inspect stats`, and so on Flower's worker page.

`WorkerInfo` is a worker bootstep. Celery merges every bootstep's `info()`
into the stats reply (celery/worker/worker.py `WorkController.stats` ->
`Blueprint.info`), so `celery -A config inspect stats` gains a "memory"
block (Flower lists it under the worker's "Other" tab):

    "memory": {
        "children": [{"pid": 4242, "rss_bytes": 61_000_000, "threads": 3}, ...],
        "main_rss_bytes": 58_000_000,
        "max_memory_per_child_bytes": 536_870_912,   # 0: no limit
        "max_tasks_per_child": 1000,                 # 0: no limit
        "pending_retries": 12,                       # None: database unreachable
    }

Children are read from the process table by the main process (psutil), so
a busy or stuck child still shows. Importing this module also registers
the `jobs_dump` inspect command (observability.dumps).
"""

from __future__ import annotations

import logging
from typing import Any

import psutil
from celery import bootsteps

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

    def info(self, worker: Any) -> dict[str, Any]:
        return {"memory": memory_block(worker)}

    def close(self, worker: Any) -> None:
        dumps.remove_parent_dir()


def pool_pids(worker: Any) -> list[int]:
    """Pids of the worker's pool children; [] for a pool without any (solo, threads)."""
    try:
        info = worker.pool.info or {}
    except Exception:  # pool not started yet, or already stopped
        return []
    return [int(pid) for pid in info.get("processes") or [] if pid]


def memory_block(worker: Any) -> dict[str, Any]:
    """RSS (bytes) and live threads per child, main RSS, the recycle limits, pending retries."""
    children = []
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
                        "threads": child.num_threads(),
                    }
                )
        except psutil.Error:
            continue
    return {
        "children": children,
        "main_rss_bytes": rss_bytes(),
        # Celery's setting is in KiB (config/settings/celery.py).
        "max_memory_per_child_bytes": int(worker.max_memory_per_child or 0) * 1024,
        "max_tasks_per_child": int(worker.max_tasks_per_child or 0),
        "pending_retries": pending_retries(),
    }


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
