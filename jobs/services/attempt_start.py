"""Starting attempts (a façade over the engine: jobs.engine.Engine.start)."""

from __future__ import annotations

import uuid

from jobs import engine
from jobs.engine.values import Delivery, StartedAttempt


def attempt_start(
    *,
    job_id: uuid.UUID | str,
    attempt: int,
    hostname: str,
    pid: int,
    rss_bytes: int | None,
    resume: bool = False,
) -> StartedAttempt | None:
    """Begin the attempt a delivery asks for, or return None to drop it unrun.

    `attempt` is the number the message was published for; `resume` is for a
    retry of this very call after a lost connection. See Engine.start.
    """
    delivery = Delivery(
        job_id=job_id,
        attempt=attempt,
        hostname=hostname,
        pid=pid,
        rss_bytes=rss_bytes,
        resume=resume,
    )
    return engine.current().start(delivery)
