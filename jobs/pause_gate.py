"""The pause at the start and in the leader's sweeps (jobs.pauses has the service).

- `NOT_PAUSED`: a SQL condition on the job row, added to the attempt start's
  one-statement fast path, so a job of a paused kind or queue never takes
  it (a read of an empty table when nothing is paused: ~2 µs);
- `hold_if_paused`: the general start path's check, on the locked row: a
  paused job goes back to wait in the database (`queued`, unpublished,
  waiting reason `paused`) without spending an attempt or the budget;
- `hold_paused`: the leader's sweeps publish nothing of a paused kind or
  queue (the rows are held instead);
- `release_resumed`: the leader's pass, every tick, that publishes the held
  jobs whose kind and queue are no longer paused.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from jobs import outbox_claim, waiting
from jobs.models import Job, JobStatus, Pause
from jobs.pauses import pause_for
from jobs.reasons import PauseScope, WaitingReason

logger = logging.getLogger(__name__)

_PAUSE_TABLE = Pause._meta.db_table
_JOB_TABLE = Job._meta.db_table

# True while neither the job's kind nor its queue is paused (the start's WHERE).
# A scalar subquery (not NOT EXISTS, which PostgreSQL may turn into an anti join
# and so into another plan for finding the job): it stays a filter on the one row
# found, a SubPlan reading the Pause table, 1-2 µs when it is empty (EXPLAIN
# ANALYZE; docs/flow-control.md).
NOT_PAUSED = f"""(
        SELECT count(*) FROM {_PAUSE_TABLE} pz
        WHERE (pz.scope = 'kind' AND pz.name = {_JOB_TABLE}.kind)
           OR (pz.scope = 'queue' AND pz.name = {_JOB_TABLE}.queue)
    ) = 0"""

# The columns of a job held by a pause (the waiting reason is set beside them).
_HELD = {"published_at": None, "publish_claimed_by": "", "publish_claimed_until": None}


def _paused_q() -> Q:
    """Rows whose kind or queue is paused now (a correlated EXISTS)."""
    by_kind = Pause.objects.filter(scope=PauseScope.KIND, name=OuterRef("kind"))
    by_queue = Pause.objects.filter(scope=PauseScope.QUEUE, name=OuterRef("queue"))
    return Q(Exists(by_kind)) | Q(Exists(by_queue))


def _waiting_for(pause: Pause) -> waiting.Waiting:
    return waiting.for_pause(
        scope=pause.scope, name=pause.name, paused_at=pause.paused_at, reason=pause.reason
    )


def hold_if_paused(job: Job) -> bool:
    """Hold the locked `job` (queued, about to start) when its kind or queue is paused.

    Held: published_at NULL, no claim, waiting reason `paused`; saved; True
    returned and the delivery is to be dropped unrun (DropReason.PAUSED).
    One indexed read when nothing stops it (False).
    """
    pause = pause_for(kind=job.kind, queue=job.queue)
    if pause is None:
        return False
    for field, value in _HELD.items():
        setattr(job, field, value)
    job.save(update_fields=[*_HELD, *waiting.apply(job, _waiting_for(pause))])
    logger.info(
        "delivery held: %s %s is paused job_id=%s kind=%s queue=%s",
        pause.scope,
        pause.name,
        job.id,
        job.kind,
        job.queue,
    )
    return True


def hold_paused(job_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Hold those of the claimed queued `job_ids` whose kind or queue is paused; return the rest.

    For the leader's sweeps, between claiming rows and publishing them.
    Costs one read of the Pause table when nothing is paused.
    """
    if not job_ids:
        return []
    pauses = list(Pause.objects.all())
    if not pauses:
        return list(job_ids)
    kinds = {p.name: p for p in pauses if p.scope == PauseScope.KIND}
    queues = {p.name: p for p in pauses if p.scope == PauseScope.QUEUE}
    keep: list[uuid.UUID] = []
    held: dict[int, list[uuid.UUID]] = {}
    by_pk: dict[int, Pause] = {}
    for job_id, kind, queue in Job.objects.filter(id__in=list(job_ids)).values_list(
        "id", "kind", "queue"
    ):
        pause = kinds.get(kind) or queues.get(queue)
        if pause is None:
            keep.append(job_id)
        else:
            held.setdefault(pause.pk, []).append(job_id)
            by_pk[pause.pk] = pause
    for pk, ids in held.items():
        Job.objects.filter(id__in=ids, status=JobStatus.QUEUED).update(
            **_HELD, **_waiting_for(by_pk[pk]).fields()
        )
    if held:
        logger.info("held %s jobs of paused kinds or queues", sum(map(len, held.values())))
    return keep


def held_jobs() -> Any:
    """Queued jobs held by a pause (published when it ends)."""
    return Job.objects.filter(
        status=JobStatus.QUEUED, published_at__isnull=True, waiting_reason=WaitingReason.PAUSED
    )


def release_resumed(*, limit: int, claimer: str = "") -> list[uuid.UUID]:
    """Claim up to `limit` held jobs no pause stops any more and clear their waiting reason.

    Returns the ids, committed and claimed for `claimer`: the caller
    publishes them (jobs.services.sweeps). Oldest first; locked rows skipped.
    """
    with transaction.atomic():
        ids = list(
            held_jobs()
            .filter(outbox_claim.unclaimed())
            .exclude(_paused_q())
            .order_by("enqueued_at")
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            Job.objects.filter(id__in=ids).update(
                **waiting.NOT_WAITING, **outbox_claim.claim_fields(claimer=claimer)
            )
    return ids
