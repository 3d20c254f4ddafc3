"""Claims on unpublished rows: a scheduler claims a row before it publishes it (docs/scheduler.md).

A claim is `publish_claimed_by` (the scheduler's identity) and
`publish_claimed_until` (the database's now() plus JOBS_OUTBOX_CLAIM_SECONDS).
Rows are claimed under `FOR UPDATE SKIP LOCKED` (PostgreSQL) and only while
unclaimed or past their claim, so two schedulers that sweep at once (two
leaders for a moment, a paused leader waking up) never publish the same row.
What a claimer could not publish it releases, so the next sweep need not
wait for the claim to run out; a claimer that died leaves its rows to the
next sweep after JOBS_OUTBOX_CLAIM_SECONDS.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from jobs.models import Job, JobStatus
from jobs.waiting import HELD_REASONS


def claim_fields(*, claimer: str) -> dict[str, Any]:
    """The column values of a claim by `claimer`, for an UPDATE (the database's clock)."""
    return {
        "publish_claimed_by": claimer,
        "publish_claimed_until": Now() + timedelta(seconds=settings.JOBS_OUTBOX_CLAIM_SECONDS),
    }


def unclaimed() -> Q:
    """Rows no scheduler holds a claim on now: never claimed, released, or claimed in the past."""
    return Q(publish_claimed_until__isnull=True) | Q(publish_claimed_until__lt=Now())


def claim_unpublished(*, claimer: str, enqueued_before: datetime, limit: int) -> list[uuid.UUID]:
    """Claim up to `limit` unclaimed queued rows never published, queued before `enqueued_before`.

    Oldest first; rows another transaction has locked are skipped. Returns
    the ids claimed, committed before it returns. Raises the database's errors.
    """
    with transaction.atomic():
        ids = list(
            Job.objects.filter(
                unclaimed(),
                status=JobStatus.QUEUED,
                published_at__isnull=True,
                enqueued_at__lte=enqueued_before,
            )
            # Held by a pause, a concurrency or rate limit or a fuse: the leader publishes those when
            # they may start (jobs.engine.pausing, jobs.engine.limiting, jobs.engine.rating, jobs.engine.fusing).
            .exclude(waiting_reason__in=HELD_REASONS)
            .order_by("enqueued_at")
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            Job.objects.filter(id__in=ids).update(**claim_fields(claimer=claimer))
    return ids


def release_unpublished(*, job_ids: Sequence[uuid.UUID | str], claimer: str) -> int:
    """Release `claimer`'s claims on those of `job_ids` still unpublished; returns how many."""
    if not job_ids:
        return 0
    return Job.objects.filter(
        id__in=list(job_ids), publish_claimed_by=claimer, published_at__isnull=True
    ).update(publish_claimed_until=None)
