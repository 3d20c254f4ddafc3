"""The scheduler leader's paced release of jobs held for a rate limit (docs/flow-control.md).

A held job has a reserved start (jobs.engine.rating); releasing a batch per
tick would let 1 + burst of them start per tick and send the rest back to
wait. So between two ticks the leader waits in `wait_releasing`: it
publishes the held jobs whose start has come (services.rate_release), then
sleeps until the next reserved start, never longer than GRANULARITY (a job
held meanwhile for an idle bucket may be due sooner). With no rate limit
configured it is the tick's plain wait.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DatabaseError

from jobs import clock, engine, services

logger = logging.getLogger(__name__)

# The longest sleep between two looks at the held jobs while some kind has a rate (seconds).
GRANULARITY = 0.05


def wait_releasing(stop: threading.Event, interval: float, *, claimer: str, batch: int) -> None:
    """Wait `interval` seconds (or until `stop`), publishing held rate-limited jobs at their
    reserved starts meanwhile. A database error ends the release for this wait (logged)."""
    deadline = time.monotonic() + interval
    current = engine.current()
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if not current.backend.rates():
            stop.wait(left)
            return
        try:
            released = services.rate_release(limit=batch, claimer=claimer)
            due = current.next_rate_due()
        except DatabaseError as exc:
            logger.warning("rate release failed (next tick): %s", exc)
            stop.wait(left)
            return
        pause = GRANULARITY
        if released >= batch:
            pause = 0.0
        elif due is not None:
            pause = min(pause, max(0.0, (due - clock.now()).total_seconds()))
        stop.wait(min(left, max(pause, 0.001)))
