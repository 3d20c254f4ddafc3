"""What a pause stops, read at the start and in the leader's sweeps (jobs.pauses has the service).

Reads only; the row changes are the engine's (jobs.engine.pausing):

- the start's one-statement fast path carries the check itself: the
  `not_paused` condition of jobs/engine/sql/shared.sql, a scalar subquery on
  the Pause table in the job UPDATE's WHERE (a read of an empty table when
  nothing is paused: ~2 µs, no extra statement), so a job of a paused kind or
  queue never takes it and falls through to the general path;
- `pause_stopping(job)`: the general path's check on the locked row (the
  engine then holds the job: `queued`, unpublished, waiting reason `paused`);
- `split_paused(ids)`: which of the rows a sweep claimed a pause stops;
- `released()`: the held jobs no pause stops any more (the leader's pass).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from django.db.models import Exists, OuterRef, Q, QuerySet

from jobs import waiting
from jobs.models import Job, JobStatus, Pause
from jobs.pauses import pause_for
from jobs.reasons import PauseScope, WaitingReason


def paused_q() -> Q:
    """Job rows whose kind or queue is paused now (a correlated EXISTS each)."""
    by_kind = Pause.objects.filter(scope=PauseScope.KIND, name=OuterRef("kind"))
    by_queue = Pause.objects.filter(scope=PauseScope.QUEUE, name=OuterRef("queue"))
    return Q(Exists(by_kind)) | Q(Exists(by_queue))


def waiting_for(pause: Pause) -> waiting.Waiting:
    """The waiting reason and detail of a job `pause` holds."""
    return waiting.for_pause(
        scope=pause.scope, name=pause.name, paused_at=pause.paused_at, reason=pause.reason
    )


def pause_stopping(job: Job) -> Pause | None:
    """The pause that stops `job` (its kind's first, else its queue's), or None: one indexed read."""
    return pause_for(kind=job.kind, queue=job.queue)


Held = list[tuple[Pause, list[uuid.UUID]]]


def split_paused(job_ids: Sequence[uuid.UUID]) -> tuple[list[uuid.UUID], Held]:
    """(`job_ids` no pause stops, [(pause, the ids it stops)]).

    One read of the Pause table when nothing is paused (the common case);
    else one more read of the rows' kinds and queues.
    """
    if not job_ids:
        return [], []
    pauses = list(Pause.objects.all())
    if not pauses:
        return list(job_ids), []
    kinds = {p.name: p for p in pauses if p.scope == PauseScope.KIND}
    queues = {p.name: p for p in pauses if p.scope == PauseScope.QUEUE}
    keep: list[uuid.UUID] = []
    held: dict[int, tuple[Pause, list[uuid.UUID]]] = {}
    rows = Job.objects.filter(id__in=list(job_ids)).values_list("id", "kind", "queue")
    for job_id, kind, queue in rows:
        pause = kinds.get(kind) or queues.get(queue)
        if pause is None:
            keep.append(job_id)
        else:
            held.setdefault(pause.pk, (pause, []))[1].append(job_id)
    return keep, list(held.values())


def held_jobs() -> QuerySet[Job]:
    """Queued jobs held by a pause (published when it ends); the partial index
    jobs_job_paused_held_idx holds exactly these."""
    return Job.objects.filter(
        status=JobStatus.QUEUED, published_at__isnull=True, waiting_reason=WaitingReason.PAUSED
    )


def released() -> QuerySet[Job]:
    """Held jobs whose kind and queue are no longer paused, oldest first."""
    return held_jobs().exclude(paused_q()).order_by("enqueued_at")
