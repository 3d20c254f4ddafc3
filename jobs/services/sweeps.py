"""The scheduler's passes: due retries, the outbox, lost messages, expired leases."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, transaction

from jobs import outbox_claim, pause_gate, selectors, waiting
from jobs.models import Job, JobStatus
from jobs.services.submission import job_publish, jobs_publish
from jobs.services.worker_loss import record_worker_lost

logger = logging.getLogger(__name__)


def retries_promote_due(*, now: datetime | None = None, limit: int = 500, claimer: str = "") -> int:
    """Move due `retrying` and `delayed` jobs to `queued` and publish them on commit.

    The rows are claimed for `claimer` (jobs.outbox_claim) in the same
    UPDATE, so no outbox sweep publishes them meanwhile; what the broker
    refused is released for the sweep. Returns how many were promoted. Safe
    to run in several schedulers at once.
    """
    now = now or selectors.database_now()
    with transaction.atomic():
        ids = list(
            selectors.jobs_due_for_retry(now=now, limit=limit)
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)
        )
        if not ids:
            return 0
        Job.objects.filter(id__in=ids, status__in=(JobStatus.RETRYING, JobStatus.DELAYED)).update(
            status=JobStatus.QUEUED,
            next_attempt_at=None,
            enqueued_at=now,
            published_at=None,
            **waiting.NOT_WAITING,
            **outbox_claim.claim_fields(claimer=claimer),
        )
        # Due work of a paused kind or queue is queued but held, never published.
        publish = pause_gate.hold_paused(ids)
        transaction.on_commit(lambda: _publish_claimed(job_ids=publish, claimer=claimer))
    return len(ids)


def held_release(*, limit: int = 500, claimer: str = "") -> int:
    """Publish up to `limit` jobs held by a pause that has ended; returns how many were released."""
    ids = pause_gate.release_resumed(limit=limit, claimer=claimer)
    if ids:
        published = _publish_claimed(job_ids=ids, claimer=claimer)
        logger.info("resumed: published %s of %s held jobs", published, len(ids))
    return len(ids)


def _publish_claimed(*, job_ids: list[uuid.UUID], claimer: str) -> int:
    """jobs_publish, then release `claimer`'s claims on the rows it did not publish.

    Never raises for a lost database connection: unreleased claims run out
    after JOBS_OUTBOX_CLAIM_SECONDS.
    """
    published = jobs_publish(job_ids=job_ids)
    if published < len(job_ids):
        try:
            outbox_claim.release_unpublished(job_ids=job_ids, claimer=claimer)
        except DatabaseError as exc:
            logger.warning("outbox claims not released (they run out): %s", exc)
    return published


def outbox_sweep(*, now: datetime | None = None, limit: int = 500, claimer: str = "") -> int:
    """Republish queued jobs left unpublished past JOBS_SWEEP_UNPUBLISHED_AFTER seconds.

    Each row is claimed for `claimer` before it is published (jobs.outbox_claim),
    so two schedulers sweeping at once publish it once. Returns how many were published.
    """
    now = now or selectors.database_now()
    before = now - timedelta(seconds=settings.JOBS_SWEEP_UNPUBLISHED_AFTER)
    ids = outbox_claim.claim_unpublished(claimer=claimer, enqueued_before=before, limit=limit)
    ids = pause_gate.hold_paused(ids)
    # Stops at the first refused publish (the broker is down): the rest on the next pass.
    published = _publish_claimed(job_ids=ids, claimer=claimer)
    if ids:
        logger.info("outbox sweep published %s of %s unpublished jobs", published, len(ids))
    return published


def outbox_reopen(*, published_before: datetime, limit: int = 500) -> int:
    """Mark queued jobs published before `published_before` as unpublished, for the sweep to republish.

    For messages the broker lost (restart without persistence, flush,
    eviction). A message that was not lost after all is delivered twice;
    attempt_start drops the second copy. Returns how many rows were reopened.
    """
    ids = list(
        selectors.jobs_published_before(published_before=published_before, limit=limit).values_list(
            "id", flat=True
        )
    )
    if not ids:
        return 0
    reopened = Job.objects.filter(
        id__in=ids, status=JobStatus.QUEUED, published_at__lt=published_before
    ).update(published_at=None, publish_claimed_until=None)
    logger.warning(
        "outbox reopened for %s queued jobs published before %s",
        reopened,
        published_before.isoformat(),
    )
    return reopened


def leases_expire(*, now: datetime | None = None, limit: int = 500) -> int:
    """Close running attempts past their lease as `worker_lost` and queue the job again.

    A lease outlives the hard time limit, so such an attempt cannot still be
    running; its worker died without any process able to record it (e.g.
    the whole worker was killed). Returns how many attempts were closed.
    """
    now = now or selectors.database_now()
    closed = 0
    for job_id in list(
        selectors.jobs_lease_expired(now=now, limit=limit).values_list("id", flat=True)
    ):
        with transaction.atomic():
            job = (
                Job.objects.select_for_update()
                .filter(id=job_id, status=JobStatus.RUNNING, lease_expires_at__lt=now)
                .first()
            )
            if job is None:
                continue
            row = job.attempts.filter(number=job.attempts_made).first()
            if row is None or row.finished_at is not None:
                continue
            record_worker_lost(
                job,
                row,
                now=now,
                requeued=False,
                message="lease expired: no worker finished this attempt",
            )
            if job.status == JobStatus.QUEUED:
                transaction.on_commit(lambda j=job.id: job_publish(job_id=j))
            closed += 1
    return closed
