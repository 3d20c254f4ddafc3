"""Whether an attempt can still be running: the guard before a redelivery starts another.

A redelivered message (a lost worker, a restored prefetch) must not start a
second attempt while the first may still run somewhere (docs/engine.md, "one
live attempt"). The first is provably over when its lease ran out, or when it
ran on this machine in a process that is gone or is not the same process.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

import psutil

from jobs.models import Attempt, Job


def provably_over(previous: Attempt, job: Job, *, now: datetime, hostname: str) -> bool:
    """Whether the attempt `previous` can no longer be running.

    True when its lease has expired, or it ran on this machine in a process
    that is gone, is a zombie, started after the attempt (pid reuse), or is
    this very process (a prefork child runs one task at a time, so a
    redelivery it receives cannot overlap its own earlier attempt).
    """
    if job.lease_expires_at is not None and job.lease_expires_at < now:
        return True
    machine = hostname.rpartition("@")[2]  # Celery node names look like "worker-1@box"
    if not previous.worker_pid or previous.worker_hostname.rpartition("@")[2] != machine:
        return False
    if previous.worker_pid == os.getpid():
        return True
    try:
        process = psutil.Process(previous.worker_pid)
        # DB time on both sides: the process's start is `now` (the database's
        # clock) less its age, an interval measured on this host's own clock.
        started = now.timestamp() - (time.time() - process.create_time())
        return (
            process.status() == psutil.STATUS_ZOMBIE
            or started > previous.started_at.timestamp() + 1
        )
    except psutil.NoSuchProcess:
        return True
