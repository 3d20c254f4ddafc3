"""Queued jobs whose broker message vanished: found by the FIFO order of the lists, republished.

The row is the truth and a message only a wake-up (DESIGN.md, "Faults"). A
message can vanish while its row says `queued`: handed by BRPOP to a
consumer whose connection was already dead (kombu records a delivery in the
`unacked` hash only after BRPOP returned it), acknowledged by a delivery
that failed before it could start the attempt, removed by an acknowledgement
meant for another delivery, or lost by the broker itself (eviction,
FLUSHDB, a restart without persistence, a failover to a replica that missed
recent writes). Nothing in the broker then says the job exists.

How a vanished message is told from one that is merely waiting, at a cost
that does not grow with the backlog:

1. Every publish is stamped twice on the database's clock (one clock for
   every publisher, so no host's skew matters): the message carries the
   time read just before the publish (header `jobs_published_at`), the row
   gets `published_at` just after it. So `published_at` of job J earlier
   than the header of message M means J was pushed before M.
2. Each priority sub-queue is a Redis list, FIFO: LPUSH at publish, BRPOP
   from the other end. If M is the message nearest the consuming end, every
   message pushed before M has been taken by a consumer already. A queued
   job published before M's stamp is therefore either in a consumer's hands
   (the `unacked` hash, bounded by prefetch x worker processes) or lost. An
   empty sub-queue says the same of every job published before it was read
   (the database's time, read before the broker).
3. Kombu puts messages back out of order: a restore of unacknowledged
   messages (a worker closing its channel, the visibility timeout) RPUSHes
   them ahead of newer ones; a requeue after a lost child LPUSHes them
   behind. Both mark the message `redelivered`. Reading only the message
   at index -1 (LINDEX) is therefore not enough: a worker that stops with
   two prefetched messages J then M restores J, then M, so M (published
   after J) ends at the consuming end with J just behind it, and J would
   look lost while it waits. So the boundary is the
   nearest message to the consuming end that is not redelivered and carries
   a stamp, looked for among the last TAIL_WINDOW messages; every message
   read is "still in the broker" whatever its stamp. No such message within
   the window: no verdict for that sub-queue on this pass (it will have one
   once the restored messages are consumed). A requeue after a lost child
   updates `published_at` before the LPUSH (jobs.engine.Engine.lose), so that
   job is not older than the messages ahead of it; the margin (below)
   covers the time between the two.
4. One indexed query (a partial index on queue, priority, published_at of
   queued rows) returns the queued jobs published more than `margin` seconds
   before their sub-queue's boundary: usually only the few held by
   consumers. Jobs with a message in `unacked` or among the messages read
   are dropped; the rest are suspects.
5. A consumer holds a message for microseconds between BRPOP and recording
   it in `unacked`, so a suspect is acted on only when two consecutive
   checks (JOBS_LOST_MESSAGE_CHECK_INTERVAL apart) both found it, with the
   same `published_at` (jobs.scheduler.LostMessageWatch). Then its row is
   put back in the outbox (`published_at` NULL, only if still queued with
   that very `published_at`, so concurrent schedulers cannot both act) and
   published with job_publish; jobs_messages_lost_total counts it.

Cost of one check: one round trip to Redis (LRANGE of TAIL_WINDOW messages
per sub-queue and the `unacked` hash) and two cheap queries, whatever the
number of queued jobs (docs/benchmarks.md: 100,000 queued).

Known gap: a child lost before its attempt started leaves the job queued
with its old `published_at` while Celery requeues the message behind newer
ones (jobs.tasks.AttemptRequest._worker_lost leaves that requeue to
Celery); if that message waits longer than two checks, the job is
republished and the later of its two deliveries is dropped unrun.

Not a lost message: a message a consumer took and holds unacknowledged
without starting it (its worker may be dead, e.g. a SIGKILLed host; kombu
restores it only after the visibility timeout). Such a job is a suspect with
reason "held" once published longer than `held_after` ago; the scheduler
passes 0 and republishes it once its own checks saw it held for
JOBS_REPUBLISH_AFTER (jobs.scheduler.LostMessageWatch). A duplicate
delivery is dropped unrun by attempt_start either way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import partial, reduce
from operator import or_

from django.db import transaction
from django.db.models import Q

from jobs import broker, brokers, events, outbox_claim, selectors
from jobs.models import Job, JobStatus
from jobs.services.publishing import job_publish

logger = logging.getLogger(__name__)

# Messages read at the consuming end of each sub-queue. Restored messages
# sit there (at most what consumers held unacknowledged when they were
# restored); the first message that is not one is the boundary.
TAIL_WINDOW = 32
# Rows put back in the outbox per transaction.
REOPEN_CHUNK = 500


class SuspectReason(StrEnum):
    VANISHED = "vanished"  # in no list and no consumer's hands
    HELD = "held"  # unacknowledged by a consumer for longer than JOBS_REPUBLISH_AFTER


@dataclass(frozen=True)
class Suspect:
    """A queued job whose message is not waiting in any sub-queue (see the module docstring)."""

    job_id: uuid.UUID
    kind: str
    queue: str
    published_at: datetime
    reason: str  # SuspectReason


def _priorities_of(step: int) -> tuple[int | None, ...]:
    """Job priorities (None: published without one) that kombu files under `step`."""
    values: list[int | None] = [p for p in range(10) if broker.step_of(p) == step]
    if broker.step_of(None) == step:
        values.append(None)
    return tuple(values)


def lost_message_suspects(
    *,
    queues: list[str],
    margin: float,
    held_after: float,
    limit: int,
    adapter: brokers.Broker | None = None,
) -> dict[uuid.UUID, Suspect]:
    """Queued jobs of `queues` that no broker list holds a message for, by job id.

    `margin` (seconds) is taken off every boundary; `held_after` (seconds):
    a job whose message a consumer holds unacknowledged is a suspect (reason
    "held") only when published longer ago than this. At most `limit` rows
    are examined, oldest first. Raises redis.RedisError when the broker
    cannot be read and the database's errors. `adapter` (default: this
    process's broker) decides the rule: a broker that cannot be peeked
    (RabbitMQ) is judged by counting (counted_suspects).
    """
    adapter = adapter or brokers.current()
    if not adapter.can_peek:
        return counted_suspects(queues=queues, margin=margin, limit=limit, adapter=adapter)
    now = selectors.database_now()  # before the broker read: see the module docstring, 2.
    snapshot = adapter.read_tails(queues, window=TAIL_WINDOW)
    in_lists: set[str] = set()
    horizons = []
    for tail in snapshot.tails:
        in_lists |= tail.job_ids()
        boundary = now if tail.empty else tail.boundary()
        if boundary is None:
            continue  # only restored or foreign messages in reach: no verdict now
        horizons.append(
            selectors.SubQueueHorizon(
                queue=tail.queue,
                priorities=_priorities_of(tail.step),
                before=boundary - timedelta(seconds=margin),
            )
        )
    unacked = snapshot.unacked_job_ids()
    held_before = now - timedelta(seconds=held_after)
    suspects: dict[uuid.UUID, Suspect] = {}
    rows = selectors.jobs_published_before_horizons(horizons=horizons, limit=limit).values_list(
        "id", "kind", "queue", "published_at"
    )
    for job_id, kind, queue, published_at in rows:
        if str(job_id) in in_lists or published_at is None:
            continue
        if str(job_id) in unacked:
            if published_at >= held_before:
                continue  # taken by a consumer and waiting for a free child
            reason = SuspectReason.HELD
        else:
            reason = SuspectReason.VANISHED
        suspects[job_id] = Suspect(
            job_id=job_id, kind=kind, queue=queue, published_at=published_at, reason=reason
        )
    return suspects


def counted_suspects(
    *, queues: list[str], margin: float, limit: int, adapter: brokers.Broker
) -> dict[uuid.UUID, Suspect]:
    """The vanished-message rule without a peek (RabbitMQ): count, then take the oldest.

    A queue holding `ready` messages holds at most the `ready` most recently
    published of its queued jobs; every older queued job published more than
    `margin` seconds before the read is a suspect (its message vanished, or a
    consumer holds it for the instant before starting it, which the second
    check rules out). A wrong pick costs a duplicate message, dropped unrun
    at start. At most `limit` rows per queue. docs/brokers.md, "Vanished messages".
    """
    now = selectors.database_now()  # before the broker read, as in lost_message_suspects
    ready = adapter.ready_counts(queues)
    before = now - timedelta(seconds=margin)
    suspects: dict[uuid.UUID, Suspect] = {}
    for queue in queues:
        rows = (
            Job.objects.filter(status=JobStatus.QUEUED, queue=queue, published_at__isnull=False)
            .order_by("-published_at")
            .values_list("id", "kind", "published_at")[ready[queue] : ready[queue] + limit]
        )
        for job_id, kind, published_at in rows:
            if published_at is not None and published_at < before:
                suspects[job_id] = Suspect(
                    job_id=job_id,
                    kind=kind,
                    queue=queue,
                    published_at=published_at,
                    reason=SuspectReason.VANISHED,
                )
    return suspects


def lost_messages_republish(
    *, suspects: Iterable[Suspect], publish_limit: int, claimer: str = ""
) -> int:
    """Put confirmed suspects back in the outbox and publish up to `publish_limit` of them now.

    A suspect's row is reopened only while it is still queued with the
    `published_at` it was suspected with (anything that published, started
    or requeued it since changed that). Rows not published here (the limit,
    or the broker refusing) stay in the outbox for outbox_sweep. Reopened
    rows are claimed for `claimer` (jobs.outbox_claim) until published or
    released, so no other scheduler's sweep publishes them too. Sends
    events.message_lost for each vanished one. Returns how many rows were
    reopened. Raises the database's errors.
    """
    pending = list(suspects)
    reasons = {s.job_id: s.reason for s in pending}
    reopened: list[Job] = []
    for start in range(0, len(pending), REOPEN_CHUNK):
        chunk = pending[start : start + REOPEN_CHUNK]
        unchanged = reduce(or_, (Q(id=s.job_id, published_at=s.published_at) for s in chunk))
        with transaction.atomic():
            rows = list(
                Job.objects.select_for_update(skip_locked=True)
                .filter(unchanged, status=JobStatus.QUEUED)
                .only("id", "kind", "queue", "status")
            )
            Job.objects.filter(id__in=[row.id for row in rows]).update(
                published_at=None, **outbox_claim.claim_fields(claimer=claimer)
            )
            for row in rows:
                if reasons[row.id] == SuspectReason.VANISHED:
                    transaction.on_commit(partial(events.message_lost.send, sender=Job, job=row))
        reopened += rows
    if not reopened:
        return 0
    vanished = [row for row in reopened if reasons[row.id] == SuspectReason.VANISHED]
    logger.warning(
        "lost messages: republishing %s queued jobs (%s vanished from the broker, %s held "
        "unacknowledged past JOBS_REPUBLISH_AFTER); first: %s",
        len(reopened),
        len(vanished),
        len(reopened) - len(vanished),
        ", ".join(f"{row.id} ({reasons[row.id]})" for row in reopened[:5]),
    )
    for row in reopened[:publish_limit]:
        if not job_publish(job_id=row.id):
            break  # the broker refused: outbox_sweep publishes the rest later
    outbox_claim.release_unpublished(job_ids=[row.id for row in reopened], claimer=claimer)
    return len(reopened)
