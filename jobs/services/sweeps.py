"""The scheduler's passes: due retries, the outbox, expired leases (row changes: jobs.engine)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.db import DatabaseError, transaction

from jobs import engine, outbox_claim, selectors
from jobs.engine.lifecycle import unpublished_before
from jobs.engine.values import Sweep
from jobs.models import JobStatus
from jobs.services.submission import job_publish, jobs_publish

logger = logging.getLogger(__name__)


def retries_promote_due(*, now: datetime | None = None, limit: int = 500, claimer: str = "") -> int:
    """Move due `retrying` and `delayed` jobs to `queued` and publish them on commit.

    The rows are claimed for `claimer` (jobs.outbox_claim) in the same
    UPDATE, so no outbox sweep publishes them meanwhile; what the broker
    refused is released for the sweep. Returns how many were promoted. Safe
    to run in several schedulers at once.
    """
    with transaction.atomic():
        ids = engine.current().promote_due(Sweep(now=now, limit=limit, claimer=claimer))
        if ids:
            transaction.on_commit(lambda: _publish_claimed(job_ids=ids, claimer=claimer))
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
    before = unpublished_before(now or selectors.database_now())
    ids = outbox_claim.claim_unpublished(claimer=claimer, enqueued_before=before, limit=limit)
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
    reopened = engine.current().reopen_outbox(published_before=published_before, limit=limit)
    if reopened:
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
    closed = engine.current().expire_leases(Sweep(now=now, limit=limit))
    for job in closed:
        if job.status == JobStatus.QUEUED:
            transaction.on_commit(lambda j=job.id: job_publish(job_id=j))
    return len(closed)
