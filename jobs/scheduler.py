"""The scheduler loop: promotes due retries, sweeps the outbox, lost messages and expired leases.

Retries wait here, in the database, not as delayed messages inside a worker, so
worker memory and prefetch stay flat however many retries are pending.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from jobs import broker, services

logger = logging.getLogger(__name__)

# The outbox and lease sweeps need not run on every tick.
SWEEP_EVERY_SECONDS = 1.0


class BrokerRestartWatch:
    """Notices a broker restart by its changed run_id; returns when it was first seen running."""

    def __init__(self) -> None:
        self.run_id: str | None = None

    def restarted(self) -> bool:
        """True once after the broker's run_id changed; False while unreachable or unchanged."""
        try:
            run_id = broker.server_run_id()
        except Exception:  # unreachable or unreadable: no verdict this time
            return False
        previous, self.run_id = self.run_id, run_id
        return previous is not None and previous != run_id


def sweep(*, batch: int, watch: BrokerRestartWatch) -> None:
    """One pass of the slower sweeps: lost messages, the outbox, expired leases."""
    now = timezone.now()
    if watch.restarted():
        logger.warning("broker restarted (new run_id): republishing every queued job")
        while services.outbox_reopen(published_before=now, limit=batch) == batch:
            pass
    services.outbox_reopen(
        published_before=now - timedelta(seconds=settings.JOBS_REPUBLISH_AFTER), limit=batch
    )
    services.outbox_sweep(limit=batch)
    services.leases_expire(limit=batch)


def run_scheduler(*, stop: threading.Event, interval: float | None = None) -> None:
    """Loop until `stop` is set. `interval` (seconds) defaults to JOBS_SCHEDULER_INTERVAL."""
    interval = settings.JOBS_SCHEDULER_INTERVAL if interval is None else interval
    batch = settings.JOBS_SCHEDULER_BATCH
    watch = BrokerRestartWatch()
    last_sweep = 0.0
    logger.info("scheduler started interval=%ss batch=%s", interval, batch)
    while not stop.is_set():
        promoted = 0
        try:
            promoted = services.retries_promote_due(limit=batch)
            if time.monotonic() - last_sweep >= SWEEP_EVERY_SECONDS:
                sweep(batch=batch, watch=watch)
                last_sweep = time.monotonic()
        except DatabaseError as exc:
            logger.warning("scheduler pass failed: %s", exc)
            close_old_connections()
        except Exception:
            # One bad pass must not stop retries, the outbox and the lease sweep for good.
            logger.exception("scheduler pass failed")
        if promoted < batch:
            stop.wait(interval)
    logger.info("scheduler stopped")
