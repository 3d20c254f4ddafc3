"""Why isn't my job running? What a queued or waiting job waits for now, and when it may start.

The reasons decided where a job is held are stored on its row (jobs.waiting:
backoff, Retry-After, the retry budget, run_after, a pause that held its
delivery). For a `queued` job with none stored, `job_waiting` looks now:

- `paused`: its kind or queue is paused (its delivery will be held);
- `no_worker`: no live worker report lists its queue (workers report their
  queues every JOBS_WORKER_REPORT_INTERVAL; a report without the list is
  "unknown", never "none");
- `backpressure`: its queue holds as many ready jobs as it may
  (JOBS_QUEUE_MAX_READY): new submissions get 503, this one waits its turn.

`estimated_start` is `next_attempt_at` for a job due at a time; for a job
behind others on its queue, the jobs ahead of it divided by the queue's
starts per second over the last minute; None where nothing can be said (a
pause, no worker). A job held for a concurrency slot or a rate limit has its
reason stored (jobs.engine.limiting, jobs.engine.rating); a rate-limited one's
`next_attempt_at` is its reserved start, so that is its estimate. A job held
by an open fuse (`fuse_open`, stored by jobs.engine.fusing) may start at its
fuse's probe time (the cool-down's end, read from the Fuse row on the job's own
page); half-open with a probe running, nothing can be said.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from jobs import clock, fuse_gate, selectors, waiting, worker_reports
from jobs.fuse_model import Fuse
from jobs.fuse_rules import WHOLE_KIND
from jobs.models import Attempt, Job, JobStatus
from jobs.pauses import pause_for
from jobs.reasons import FuseState, WaitingReason

logger = logging.getLogger(__name__)

# Starts per second are measured over this window.
RATE_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class WaitingNow:
    """Why the job waits; `until` when it may go on (if known); `estimated_start` a guess."""

    reason: WaitingReason
    detail: str
    until: datetime | None
    estimated_start: datetime | None


def job_waiting(job: Job, *, live: bool = True) -> WaitingNow | None:
    """What `job` waits for, or None (running, terminal, or simply next in its queue).

    With `live` False only the stored reason is read (no query: the lists).
    Reading the live reasons costs a few indexed queries and one state-store
    read; a failing store or broker leaves that reason out (logged).
    """
    if job.waiting_reason:
        reason = WaitingReason(job.waiting_reason)
        until = job.next_attempt_at
        if reason == WaitingReason.FUSE_OPEN:
            until = fuse_probe_due(job) if live else None
        estimate = until if reason != WaitingReason.PAUSED else None
        return WaitingNow(reason, job.waiting_detail, until, estimate)
    if not live or job.status != JobStatus.QUEUED:
        return None
    pause = pause_for(kind=job.kind, queue=job.queue)
    if pause is not None:
        held = waiting.for_pause(
            scope=pause.scope, name=pause.name, paused_at=pause.paused_at, reason=pause.reason
        )
        return WaitingNow(held.reason, held.detail, None, None)
    if not _queue_consumed(job.queue):
        detail = f"no live worker consumes queue {job.queue}; it starts when one does"
        return WaitingNow(WaitingReason.NO_WORKER, detail, None, None)
    full = _backpressure(job.queue)
    if full is not None:
        return WaitingNow(WaitingReason.BACKPRESSURE, full, None, estimated_start(job))
    return None


def fuse_probe_due(job: Job) -> datetime | None:
    """When the probe of the fuse holding `job` may start: an open fuse's cool-down end;
    None when half-open (a probe runs), closed (released at the next tick) or unknown."""
    config = fuse_gate.configs().get(job.kind)
    destination = config.destination(job.payload) if config is not None else WHOLE_KIND
    row = Fuse.objects.filter(kind=job.kind, destination=destination).first()
    if row is None or row.state != FuseState.OPEN:
        return None
    due: datetime | None = row.probe_due_at
    return due


def _queue_consumed(queue: str) -> bool:
    """False only when the live reports all list their queues and none lists `queue`."""
    try:
        reports = worker_reports.read(max_age=3 * settings.JOBS_WORKER_REPORT_INTERVAL)
    except Exception as exc:  # no verdict without the store
        logger.warning("worker reports unreadable: %s: %s", type(exc).__name__, exc)
        return True
    if any(report.get("queues") is None for report in reports):
        return True
    return any(queue in report["queues"] for report in reports)


def _backpressure(queue: str) -> str | None:
    limit = selectors.queue_max_ready(queue=queue)
    ready = selectors.queue_ready_count(queue=queue)
    if ready < limit:
        return None
    return (
        f"queue {queue} holds {ready} ready jobs, at its limit of {limit} (backpressure: "
        "new submissions get 503); this one waits its turn"
    )


def estimated_start(job: Job) -> datetime | None:
    """When `job` may start at its queue's recent pace: jobs ahead / starts per second; None
    when nothing started on the queue in the last RATE_WINDOW_SECONDS."""
    now = clock.now()
    since = now - timedelta(seconds=RATE_WINDOW_SECONDS)
    starts = Attempt.objects.filter(job__queue=job.queue, started_at__gte=since).count()
    if starts == 0:
        return None
    ahead = Job.objects.filter(
        queue=job.queue, status=JobStatus.QUEUED, enqueued_at__lt=job.enqueued_at or now
    ).count()
    return now + timedelta(seconds=ahead * RATE_WINDOW_SECONDS / starts)
