"""The worker's memory block: children's RSS and threads, main RSS, recycle limits, pending retries.

Read by its main process for `celery inspect stats`, `inspect jobs_memory`
(jobs.telemetry.worker_info) and the worker report (jobs.telemetry.worker_report).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import close_old_connections, connection

from jobs.child_retire import limit_shown_kib
from observability.memory import rss_bytes
from observability.worker_info import children_memory

logger = logging.getLogger(__name__)


def memory_block(worker: Any, *, with_pending_retries: bool = True) -> dict[str, Any]:
    """RSS (bytes) and live threads per child, main RSS, the recycle limits, pending retries.

    `with_pending_retries=False` leaves out the database count (None).
    """
    return {
        "children": children_memory(worker),
        "main_rss_bytes": rss_bytes(),
        # Celery's setting is in KiB (config/settings/celery.py); without a
        # limit the pool has an unreachable one (jobs.child_retire).
        "max_memory_per_child_bytes": limit_shown_kib(worker.max_memory_per_child) * 1024,
        "max_tasks_per_child": int(worker.max_tasks_per_child or 0),
        "pending_retries": pending_retries() if with_pending_retries else None,
    }


def pending_retries() -> int | None:
    """Jobs in status retrying, or None when the database cannot be read.

    The main process holds no connection between calls: it is opened here and
    closed again, so none is inherited by children forked later.
    """
    # Imported here: jobs.selectors needs the app registry, which is not ready when
    # config.celery_app imports the worker bootstep (this module's importer).
    from jobs import selectors  # noqa: PLC0415 - needs the app registry ready

    try:
        close_old_connections()
        return selectors.pending_retry_count()
    except Exception as exc:
        logger.warning("pending retries not counted: %s", exc)
        return None
    finally:
        connection.close()
