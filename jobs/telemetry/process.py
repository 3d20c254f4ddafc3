"""Starting a process role's telemetry: observability.start plus the jobs domain's series."""

from __future__ import annotations

import observability
from jobs.telemetry import series


def start(role: str, *, hostname: str | None = None) -> None:
    """observability.start(role) and, except in a worker child, every known series at 0.

    Roles as observability.ROLES (raises ValueError for an unknown one);
    `hostname` is the worker's node name (role "worker"). Call it after
    fork, once per process, after the multiprocess directory is active.
    """
    observability.start(role, hostname=hostname)
    if role != "worker-child":
        series.initialize(role, hostname=hostname)
