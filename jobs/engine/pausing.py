"""Row changes of a pause (docs/flow-control.md): hold a paused job, release it after the resume.

A held job stays `queued` with no publish and no claim, waiting reason
`paused`; it spends no attempt and no retry budget. Three places hold:

- `hold_if_paused`: the general start path, on the locked row, once the
  attempt number is decided (the fast start statement's `not_paused`
  condition sends a paused job there);
- `hold_paused`: the leader's sweeps (due retries and delayed jobs, the
  outbox), between claiming rows and publishing them;

and one releases: `release_held`, the leader's pass every tick, which
claims the held jobs no pause stops any more and clears their reason; the
caller publishes them (jobs.services.sweeps.held_release).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from django.db import transaction

from jobs import outbox_claim, pause_gate, waiting
from jobs.engine import changes
from jobs.engine.values import Sweep
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)


def hold_if_paused(job: Job) -> bool:
    """Hold the locked queued `job` when its kind or queue is paused; True when held
    (the delivery is then dropped unrun, DropReason.PAUSED). One indexed read otherwise."""
    pause = pause_gate.pause_stopping(job)
    if pause is None:
        return False
    job.save(update_fields=changes.apply(job, changes.held_by_pause(pause_gate.waiting_for(pause))))
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
    """Hold those of the claimed queued `job_ids` a pause stops; returns the others (to publish).

    One read of the Pause table when nothing is paused.
    """
    keep, held = pause_gate.split_paused(job_ids)
    for pause, ids in held:
        Job.objects.filter(id__in=ids, status=JobStatus.QUEUED).update(
            **changes.held_by_pause(pause_gate.waiting_for(pause))
        )
    if held:
        logger.info("held %s jobs of paused kinds or queues", sum(len(ids) for _, ids in held))
    return keep


def release_held(sweep: Sweep) -> list[uuid.UUID]:
    """Claim up to `sweep.limit` held jobs no pause stops any more for `sweep.claimer` and
    clear their waiting reason; returns their ids, committed (the caller publishes them).
    Oldest first; rows another transaction locked are skipped."""
    with transaction.atomic():
        ids = list(
            pause_gate.released()
            .filter(outbox_claim.unclaimed())
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[: sweep.limit]
        )
        if ids:
            Job.objects.filter(id__in=ids).update(
                **waiting.NOT_WAITING, **outbox_claim.claim_fields(claimer=sweep.claimer)
            )
    return ids
