"""The scheduler's passes: due retries, the outbox, expired leases, jobs held by a pause that
ended (row changes: jobs.engine)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from django.db import DatabaseError, transaction

from jobs import engine, outbox_claim, selectors
from jobs.engine.lifecycle import unpublished_before
from jobs.engine.values import Sweep
from jobs.models import JobStatus
from jobs.services.publishing import job_publish, jobs_publish

logger = logging.getLogger(__name__)


def retries_promote_due(*, now: datetime | None = None, limit: int = 500, claimer: str = "") -> int:
    """Move due `retrying` and `delayed` jobs to `queued` and publish them on commit.

    The rows are claimed for `claimer` (jobs.outbox_claim) in the same
    UPDATE, so no outbox sweep publishes them meanwhile; what the broker
    refused is released for the sweep; those of a paused kind or queue are
    held, not published (jobs.engine.pausing). Returns how many were promoted. Safe
    to run in several schedulers at once.
    """
    with transaction.atomic():
        ids = engine.current().promote_due(Sweep(now=now, limit=limit, claimer=claimer))
        if ids:
            # Due work of a paused kind or queue is queued but held, never published.
            publish = engine.current().hold_paused(ids)
            transaction.on_commit(lambda: publish_claimed(job_ids=publish, claimer=claimer))
    return len(ids)


def held_release(*, limit: int = 500, claimer: str = "") -> int:
    """Publish up to `limit` jobs held by a pause that has ended; returns how many were released.

    The leader calls it every tick, so a resumed kind or queue starts within one tick.
    Costs one read of the (partial-indexed) held rows when nothing is held.
    """
    ids = engine.current().release_held(Sweep(limit=limit, claimer=claimer))
    if ids:
        published = publish_claimed(job_ids=ids, claimer=claimer)
        logger.info("resumed: published %s of %s held jobs", published, len(ids))
    return len(ids)


def concurrency_release(*, limit: int = 500, claimer: str = "") -> int:
    """Publish the oldest jobs held for a concurrency slot into the slots free now; returns how
    many (and those held for a limit their kind no longer has). The leader calls it every
    tick; one read of the (partial-indexed) waiting rows when none wait."""
    ids = engine.current().release_waiting(Sweep(limit=limit, claimer=claimer))
    if ids:
        publish_claimed(job_ids=ids, claimer=claimer)
    return len(ids)


def rate_release(*, limit: int = 500, claimer: str = "") -> int:
    """Publish the jobs held for a rate limit whose reserved start has come; returns how many
    were released. The leader's pacer calls it at each reserved start (jobs.rate_pacer)."""
    ids = engine.current().release_rate_due(Sweep(limit=limit, claimer=claimer))
    if ids:
        publish_claimed(job_ids=ids, claimer=claimer)
    return len(ids)


def publish_claimed(*, job_ids: list[uuid.UUID], claimer: str) -> int:
    """jobs_publish, then release `claimer`'s claims on the rows it did not publish (also the
    engine's publish of a concurrency hand-off: jobs.apps).

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
    # Rows of a paused kind or queue are held, not published (the leader's release
    # publishes them after the resume).
    ids = engine.current().hold_paused(ids)
    # Stops at the first refused publish (the broker is down): the rest on the next pass.
    published = publish_claimed(job_ids=ids, claimer=claimer)
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
