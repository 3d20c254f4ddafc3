"""Starting attempts (a façade over the engine: jobs.engine.Engine.start)."""

from __future__ import annotations

from typing import Any

from jobs import engine
from jobs.engine.values import Delivery, StartedAttempt


def attempt_start(**delivery: Any) -> StartedAttempt | None:
    """Begin the attempt a delivery asks for, or return None to drop it unrun.

    Keyword arguments are jobs.engine.values.Delivery's: `job_id`, `attempt`
    (the number the message was published for), `hostname`, `pid`,
    `rss_bytes`, `resume` (a retry of this very call after a lost
    connection). See jobs.engine.Engine.start. Raises TypeError for others.
    """
    return engine.current().start(Delivery(**delivery))
