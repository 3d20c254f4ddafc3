"""The scheduler loop: promotes due retries, sweeps the outbox and expired leases.

Retries wait here, in the database, not as ETA messages inside a worker, so
worker memory and prefetch stay flat however many retries are pending.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from jobs import services

logger = logging.getLogger(__name__)

# The outbox and lease sweeps need not run on every tick.
SWEEP_EVERY_SECONDS = 1.0


def run_scheduler(*, stop: threading.Event, interval: float | None = None) -> None:
    """Loop until `stop` is set. `interval` (seconds) defaults to JOBS_SCHEDULER_INTERVAL."""
    interval = settings.JOBS_SCHEDULER_INTERVAL if interval is None else interval
    batch = settings.JOBS_SCHEDULER_BATCH
    last_sweep = 0.0
    logger.info("scheduler started interval=%ss batch=%s", interval, batch)
    while not stop.is_set():
        promoted = 0
        try:
            promoted = services.retries_promote_due(limit=batch)
            if time.monotonic() - last_sweep >= SWEEP_EVERY_SECONDS:
                services.outbox_sweep(limit=batch)
                services.leases_expire(limit=batch)
                last_sweep = time.monotonic()
        except DatabaseError as exc:
            logger.warning("scheduler pass failed: %s", exc)
            close_old_connections()
        if promoted < batch:
            stop.wait(interval)
    logger.info("scheduler stopped")
