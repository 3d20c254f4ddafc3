"""Row changes of a rate limit (docs/flow-control.md): hold a job over its kind's rate with a
reserved start time, and release the held jobs when their time comes.

A held job is treated like a paused one: `queued`, unpublished and unclaimed,
waiting reason `rate_limit`, no attempt and no retry budget spent; its
`next_attempt_at` is the start reserved for it (a planning cursor per (kind,
key), one interval apart, in the order the jobs were held: jobs.gcra.next_slot).
`release_due` (the scheduler leader's pacer, jobs.rate_pacer) claims the held
jobs whose time has come, oldest slot first, and keeps their reason until they
start, so a newer job still queues behind them (jobs.rate_gate). The start's
check still decides: a released job refused again is held again, and as the oldest it
takes the next start that comes (jobs.rate_gate.fill_due_slots).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Min

from jobs import gcra, outbox_claim, rate_gate
from jobs.engine import changes
from jobs.engine.limiting import claim_held, release_unlimited
from jobs.engine.values import Sweep
from jobs.models import Job, RateBucket
from jobs.rate_gate import KindRate
from jobs.reasons import WaitingReason

logger = logging.getLogger(__name__)

# Held rows read per keyed kind and pass to find the oldest of each key.
RELEASE_SCAN = 5_000

# A held job may be released this long before its bucket would admit it, counting the
# released jobs still on their way: a publish and a delivery take tens of ms (more across
# hosts), and the start waits out the rest (MAX_START_WAIT). Past it, a bucket that fell
# behind its reserved starts is not sent jobs it would refuse.
RELEASE_LEAD = 0.4

# A start refused by the rate alone waits at most this long in the worker and tries again
# (a released job delivered a little before its slot); longer, and it is held.
MAX_START_WAIT = 0.5

_ARGS = "id, kind, payload, enqueued_at, waiting_reason, GREATEST(%s, enqueued_at), %s::jsonb"


def admit_first(job_id: uuid.UUID | str, rates_json: str, now: datetime) -> bool | None:
    """PostgreSQL: take the job's (kind, key) rate lock and judge it at `now` (its bucket moves
    when admitted), before its row is locked; None when there is no such job. True for a
    kind without a rate."""
    found = _call(f"jobs_rate_admit({_ARGS})", job_id, rates_json, now)
    return None if found is None else bool(found)


def give_back(job: Job, rate: KindRate | None) -> None:
    """PostgreSQL: move back the bucket admit_first moved for the locked `job` (`rate`: its
    kind's rate when admitted, else None: nothing to do) that the start then did not start
    (paused, held by its fuse or its concurrency limit, a stale delivery), so it spends no
    rate slot. Exact: the admit's (kind, key) lock is held to the end of the transaction."""
    if rate is None:
        return
    RateBucket.objects.filter(kind=job.kind, key=rate.key(job.payload) or "").update(
        tat=F("tat") - rate.interval
    )


def start_wait(job_id: uuid.UUID | str, rates_json: str, now: datetime) -> float | None:
    """PostgreSQL: seconds until a start at `now` would conform, no lock (a hint: the start
    decides); None when an older job waits, the kind has no rate or there is no job."""
    found = _call(f"jobs_rate_wait({_ARGS})", job_id, rates_json, now)
    return None if found is None else float(found)


def _call(expression: str, job_id: uuid.UUID | str, rates_json: str, now: datetime) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {expression} FROM jobs_job WHERE id = %s", [now, rates_json, str(job_id)]
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def hold_if_over_rate(
    job: Job, rate: KindRate, *, admitted: bool | None, now: datetime, rates_json: str
) -> bool:
    """Hold the locked queued `job` when `rate` does not admit it at `now`; True when held
    (the delivery is then dropped unrun, DropReason.RATE). `admitted` is admit_first's answer
    on PostgreSQL; None asks the ORM (_orm_admits, SQLite)."""
    at = max(now, job.enqueued_at) if job.enqueued_at is not None else now
    if admitted is None:
        admitted = _orm_admits(job, rate, at=at.timestamp())
    if admitted:
        return False
    slot = _reserve(job.kind, job.payload, rate, at=at, rates_json=rates_json)
    fields = changes.held_by_pause(rate.waiting(job.payload, wait=slot - at.timestamp()))
    fields["next_attempt_at"] = datetime.fromtimestamp(slot, tz=UTC)
    job.save(update_fields=changes.apply(job, fields))
    logger.info(
        "delivery held: over the rate job_id=%s kind=%s rate=%s slot_in=%.3fs",
        job.id,
        job.kind,
        rate.text,
        slot - at.timestamp(),
    )
    return True


def hold_new(
    kind: str, payload: Any, rate: KindRate, *, now: datetime, rates_json: str
) -> tuple[Any, datetime] | None:
    """A new job of `kind` (a rate per kind) submitted at `now` while an older one is held for
    the rate, unreleased: its waiting reason and the start reserved for it (the planning
    cursor moves on), so it queues behind them unpublished instead of being delivered only to
    be held; None (publish it) when nothing is held or the rate is per key. One indexed
    probe of jobs_job_rate_idx; the reservation only when held."""
    if rate.path:
        return None
    held = Job.objects.filter(rate_gate.waiting_q(), outbox_claim.unclaimed(), kind=kind)
    if not held.exists():
        return None
    slot = _reserve(kind, payload, rate, at=now, rates_json=rates_json)
    return rate.waiting(payload, wait=slot - now.timestamp()), datetime.fromtimestamp(slot, tz=UTC)


def _reserve(kind: str, payload: Any, rate: KindRate, *, at: datetime, rates_json: str) -> float:
    if connection.vendor != "postgresql":
        return _orm_reserve(kind, payload, rate, at=at.timestamp())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jobs_rate_hold(%s, %s::jsonb, %s, %s::jsonb)",
            [kind, json.dumps(payload), at, rates_json],
        )
        return float(cursor.fetchone()[0])


def _bucket(kind: str, payload: Any, rate: KindRate) -> RateBucket:
    bucket, _ = RateBucket.objects.get_or_create(kind=kind, key=rate.key(payload) or "")
    return bucket


def _orm_admits(job: Job, rate: KindRate, *, at: float) -> bool:
    """Whether `job` may start at `at` (epoch seconds) under `rate`, moving its bucket when it
    may (the ORM's check; writers serialised by the database): no older job of its kind
    (key) waits for the rate and the bucket conforms (jobs.gcra.judge)."""
    if job.waiting_reason != WaitingReason.RATE_LIMIT and rate_gate.older_waits(job, rate):
        return False
    bucket = _bucket(job.kind, job.payload, rate)
    verdict = gcra.judge(
        tat=bucket.tat, at=at, per_second=rate.enforced_per_second, burst=rate.burst
    )
    if verdict.admitted:
        bucket.tat = verdict.tat
        bucket.save(update_fields=["tat"])
    return verdict.admitted


def _orm_reserve(kind: str, payload: Any, rate: KindRate, *, at: float) -> float:
    """The start time (epoch seconds) reserved for a job of `kind` with `payload`, held at
    `at` (the ORM's twin of jobs_rate_hold): the bucket's first conforming time, not before
    its planning cursor, which moves one interval on."""
    bucket = _bucket(kind, payload, rate)
    slot = gcra.next_slot(
        tat=bucket.tat,
        plan=bucket.plan,
        at=at,
        per_second=rate.enforced_per_second,
        burst=rate.burst,
    )
    bucket.plan = slot + rate.interval
    bucket.save(update_fields=["plan"])
    return slot


def release_due(sweep: Sweep, rates: Mapping[str, KindRate], *, now: datetime) -> list[uuid.UUID]:
    """Claim, for `sweep.claimer`, as many held jobs per (kind, key) as reserved starts have
    come by `now`, oldest submitted first (rate_gate.fill_due_slots: a newer job held first
    hands its start to the older one), and the jobs held for a rate their kind no longer
    has (no longer waiting); returns their ids, committed (the caller publishes them)."""
    waiting = Job.objects.filter(rate_gate.waiting_q())
    held = waiting.filter(outbox_claim.unclaimed())
    columns = ("id", "payload", "next_attempt_at")
    with transaction.atomic():
        ids = release_unlimited(held.exclude(kind__in=list(rates)), sweep, limit_name="rate limit")
        for kind, rate in rates.items():
            room = sweep.limit - len(ids)
            mine = held.filter(kind=kind)
            due = list(
                mine.filter(next_attempt_at__lte=now)
                .order_by("next_attempt_at")
                .values_list(*columns)[:room]
            )
            due = due[: _room_in_bucket(rate, now=now)]
            if room <= 0 or not due:
                continue
            scan = RELEASE_SCAN if rate.path else len(due)
            oldest = list(mine.order_by("enqueued_at", "id").values_list(*columns)[:scan])
            chosen, moves = rate_gate.fill_due_slots(rate, due, oldest)
            for job_id, slot in moves:
                Job.objects.filter(id=job_id).update(next_attempt_at=slot)
            ids += claim_held(mine, chosen, sweep.claimer)
    return ids


def _room_in_bucket(rate: KindRate, *, now: datetime) -> int:
    """How many more jobs of a rate per kind may be released now: those that would conform
    by now + RELEASE_LEAD once the released ones still on their way have started (so a
    bucket that fell behind its reserved starts, deliveries having been slow, is not sent
    jobs it must refuse). Unbounded for a rate per key (its buckets are not read here)."""
    if rate.path:
        return RELEASE_SCAN
    tat = RateBucket.objects.filter(kind=rate.kind, key="").values_list("tat", flat=True).first()
    if tat is None:
        return RELEASE_SCAN
    in_flight = Job.objects.filter(rate_gate.waiting_q(), ~outbox_claim.unclaimed(), kind=rate.kind)
    busy_until = tat + in_flight.count() * rate.interval - rate.burst * rate.interval
    ahead = now.timestamp() + RELEASE_LEAD - busy_until
    return 0 if ahead < 0 else int(ahead / rate.interval) + 1


def next_due(rates: Mapping[str, KindRate]) -> datetime | None:
    """The earliest reserved start of a held (unreleased) job of a kind with a rate."""
    held = Job.objects.filter(rate_gate.waiting_q(), outbox_claim.unclaimed(), kind__in=list(rates))
    found: datetime | None = held.aggregate(at=Min("next_attempt_at"))["at"]
    return found
