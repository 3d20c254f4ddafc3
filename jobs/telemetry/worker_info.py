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
(jobs.telemetry.worker_report) while the worker is up.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps
from celery.worker.control import inspect_command

from jobs.telemetry import worker_report
from jobs.telemetry.worker_memory import memory_block
from observability import dumps
from observability.worker_info import readable

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
        self.writer = worker_report.start_writer(worker)

    def stop(self, worker: Any) -> None:
        if self.writer is not None:
            self.writer.stop()

    def close(self, worker: Any) -> None:
        dumps.remove_parent_dir()


@inspect_command()
def jobs_memory(state: Any, **_: Any) -> dict[str, Any]:
    """The worker's memory_block() in bytes (`celery -A config inspect jobs_memory`)."""
    return memory_block(state.consumer.controller)
