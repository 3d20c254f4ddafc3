"""Row changes of a concurrency limit (docs/flow-control.md): hold a job over its kind's limit,
release the oldest held jobs when slots free.

A held job is treated like a paused one: it stays `queued`, unpublished and
unclaimed, waiting reason `concurrency_limit`; it spends no attempt and no
retry budget. `release_waiting` (the leader, every tick) claims the oldest
held jobs into the free slots of their kind (key) and keeps their reason,
so a job submitted later still sees them waiting and queues behind them
(jobs.concurrency_gate); the start clears it. A released job whose claim
runs out unstarted (its message lost) counts as held again.

`hand_off` does the same for the one kind (key) whose slot an ending attempt
just freed, at once (the engine's boundary, after the end commits), so no
freed slot waits for the leader's tick; the leader's pass stays the safety
net for a hand-off that failed or never ran.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from jobs import concurrency_gate, concurrency_sql, outbox_claim
from jobs import waiting as waiting_fields
from jobs.concurrency_gate import KindLimit
from jobs.engine import changes
from jobs.engine.values import Sweep
from jobs.models import Job, JobStatus

logger = logging.getLogger(__name__)

# Held rows read per kind and tick: past this many, later keys wait a tick more.
RELEASE_SCAN = 5_000


def admit_first(job_id: uuid.UUID | str, limits_json: str) -> bool | None:
    """PostgreSQL: take the job's (kind, key) lock and judge it now, before its row is locked
    (every start takes that lock first: no cycle); None for an unlimited kind or no job.
    The answer holds for the rest of the caller's transaction: nobody else starts a job of
    that kind (key) while the lock is held."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jobs_concurrency_admit(id, kind, payload, enqueued_at, %s::jsonb), kind "
            "FROM jobs_job WHERE id = %s",
            [limits_json, str(job_id)],
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def hold_if_over_limit(job: Job, limit: KindLimit, *, admitted: bool | None) -> bool:
    """Hold the locked queued `job` when `limit` has no slot for it; True when held (the
    delivery is then dropped unrun, DropReason.CONCURRENCY). `admitted` is admit_first's
    answer on PostgreSQL; None asks the ORM (jobs.concurrency_gate.admits)."""
    if admitted is None:
        admitted = concurrency_gate.admits(job, limit)
    if admitted:
        return False
    job.save(update_fields=changes.apply(job, changes.held_by_pause(limit.waiting(job.payload))))
    logger.info(
        "delivery held: no concurrency slot job_id=%s kind=%s limit=%s",
        job.id,
        job.kind,
        limit.limit,
    )
    return True


def release_waiting(sweep: Sweep, limits: Mapping[str, KindLimit]) -> list[uuid.UUID]:
    """Claim, for `sweep.claimer`, the oldest held jobs of each limited kind that fit in its
    free slots (running and released-unstarted jobs take slots); returns their ids,
    committed (the caller publishes them). Jobs held for a kind that has no limit any more
    are released too. One read of the partial index when nothing waits."""
    waiting = Job.objects.filter(concurrency_gate.waiting_q())
    if not waiting.exists():
        return []
    ids: list[uuid.UUID] = []
    with transaction.atomic():
        ids += release_unlimited(waiting.exclude(kind__in=list(limits)), sweep)
        for kind, limit in limits.items():
            if len(ids) >= sweep.limit:
                break
            ids += _release_kind(limit, waiting.filter(kind=kind), sweep, sweep.limit - len(ids))
    return ids


def release_unlimited(
    waiting: QuerySet[Job], sweep: Sweep, *, limit_name: str = "concurrency limit"
) -> list[uuid.UUID]:
    """Jobs held for a limit their kind no longer has (the settings changed): all released,
    no longer waiting (also the rate limits': jobs.engine.rating)."""
    ids = list(
        waiting.filter(outbox_claim.unclaimed())
        .order_by("enqueued_at", "id")
        .select_for_update(skip_locked=True)
        .values_list("id", flat=True)[: sweep.limit]
    )
    if ids:
        Job.objects.filter(id__in=ids).update(
            **waiting_fields.NOT_WAITING, **outbox_claim.claim_fields(claimer=sweep.claimer)
        )
        logger.info("released %s jobs held for a %s no longer set", len(ids), limit_name)
    return ids


def _release_kind(
    limit: KindLimit, waiting: QuerySet[Job], sweep: Sweep, room: int
) -> list[uuid.UUID]:
    free = _free_slots(limit, waiting)
    held = waiting.filter(outbox_claim.unclaimed()).order_by("enqueued_at", "id")
    chosen = concurrency_gate.pick_released(
        limit, held.values_list("id", "payload")[:RELEASE_SCAN], free
    )[:room]
    if not chosen:
        return []
    ids = claim_held(held, chosen, sweep.claimer)
    if ids:
        logger.info("released %s jobs waiting for a concurrency slot of %s", len(ids), limit.kind)
    return ids


def _free_slots(limit: KindLimit, waiting: QuerySet[Job]) -> dict[Any, int]:
    """Free slots per key of `limit` (concurrency_gate.free_slots): its kind's running jobs and
    the `waiting` jobs released but not started yet take slots."""
    running = Job.objects.filter(kind=limit.kind, status=JobStatus.RUNNING)
    in_flight = waiting.filter(~outbox_claim.unclaimed())
    return concurrency_gate.free_slots(
        limit,
        running=running.values_list("payload", flat=True),
        in_flight=in_flight.values_list("payload", flat=True),
    )


def claim_held(held: QuerySet[Job], chosen: list[uuid.UUID], claimer: str) -> list[uuid.UUID]:
    """Claim for `claimer` those of `chosen` among `held` no other transaction has locked;
    their ids."""
    ids = list(
        held.filter(id__in=chosen).select_for_update(skip_locked=True).values_list("id", flat=True)
    )
    if ids:
        Job.objects.filter(id__in=ids).update(**outbox_claim.claim_fields(claimer=claimer))
    return ids


def hand_off(limit: KindLimit, payload: Any, *, claimer: str) -> list[uuid.UUID]:
    """Claim, for `claimer`, the oldest jobs held for the slot of `limit`'s kind and the key of
    `payload` (a job whose attempt just ended) that fit in its free slots now; their ids,
    committed (the caller publishes them). One read when nothing waits for that key.

    On PostgreSQL the count runs under the (kind, key) advisory lock every start takes
    (jobs_concurrency_admit), so hand-offs and starts of one key do not over-release; a
    released job that still loses the race at its start is held again (its claim cleared).
    """
    key = limit.key(payload)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            _lock(limit, payload)
        waiting = Job.objects.filter(concurrency_gate.waiting_q(), kind=limit.kind)
        held = waiting.filter(outbox_claim.unclaimed()).order_by("enqueued_at", "id")
        mine = [
            job_id
            for job_id, held_payload in held.values_list("id", "payload")[:RELEASE_SCAN]
            if limit.key(held_payload) == key
        ]
        if not mine:
            return []
        free = _free_slots(limit, waiting).get(key, limit.limit)
        if free <= 0:
            return []
        ids = claim_held(held, mine[:free], claimer)
    if ids:
        logger.info(
            "handed off %s concurrency slots of %s to the oldest waiting jobs", len(ids), limit.kind
        )
    return ids


def _lock(limit: KindLimit, payload: Any) -> None:
    """Take the transaction-scoped advisory lock jobs_concurrency_admit takes for the (kind,
    key) of `payload`, its key computed by the database as the function does."""
    if limit.path:
        key_sql = "coalesce((%s::jsonb #> %s::text[])::text, '')"
        params: list[Any] = [json.dumps(payload), list(limit.path)]
    else:
        key_sql, params = "''", []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_advisory_xact_lock(%s, hashtext(%s || chr(31) || {key_sql}))",
            [concurrency_sql.LOCK_CLASS, limit.kind, *params],
        )
