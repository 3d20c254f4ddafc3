"""Row changes of the fuse (docs/flow-control.md "Fuse"; the state machine is jobs.fuse_rules).

- `hold_if_open`: the general start path, on the locked job row: an open
  fuse holds the job as a pause does (status `queued`, unpublished,
  unclaimed, waiting reason `fuse_open`), before the retry budget is asked
  and before an attempt is spent; the first start after the cool-down
  becomes the probe (half-open).
- `record`: after an attempt of a fused kind ends (the engine's boundary,
  once the end committed): counts it in the fuse's window, trips, closes or
  re-opens the fuse.
- `release`: the leader's pass every tick: the held jobs of a closed fuse
  (oldest first), and one held job of an open fuse whose probe is due, are
  claimed for publishing (the services publish them).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from jobs import clock, outbox_claim
from jobs import waiting as waiting_fields
from jobs.engine import changes
from jobs.engine.values import Sweep
from jobs.fuse_gate import FuseConfig, held_q, probe_lease
from jobs.fuse_model import Fuse
from jobs.fuse_rules import WHOLE_KIND, FuseSnapshot, admit, close, record_end, trip
from jobs.models import Job
from jobs.reasons import FuseState

logger = logging.getLogger(__name__)

# Held rows read per tick.
RELEASE_SCAN = 5_000


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _dt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, tz=UTC)


def snapshot(row: Fuse) -> FuseSnapshot:
    """The Fuse row as the state machine's value."""
    return FuseSnapshot(
        state=FuseState(row.state),
        window_started=_ts(row.window_started_at),
        attempts=row.attempts,
        failures=row.failures,
        history=row.history,
        opened_at=_ts(row.opened_at),
        probe_due=_ts(row.probe_due_at),
        cooldown=row.cooldown_seconds,
        probe_job=str(row.probe_job_id or ""),
        probe_started=_ts(row.probe_started_at),
        trips=row.trips,
    )


def store(row: Fuse, s: FuseSnapshot, *, now: datetime) -> None:
    """Write `s` into the locked `row` (only when it changed)."""
    if s == snapshot(row):
        return
    row.state = s.state.value
    row.window_started_at = _dt(s.window_started)
    row.attempts, row.failures, row.trips = s.attempts, s.failures, s.trips
    row.history = s.history
    row.opened_at, row.probe_due_at = _dt(s.opened_at), _dt(s.probe_due)
    row.cooldown_seconds = s.cooldown
    row.probe_job_id = uuid.UUID(s.probe_job) if s.probe_job else None
    row.probe_started_at = _dt(s.probe_started)
    row.updated_at = now
    row.save()


def hold_if_open(job: Job, config: FuseConfig, *, now: datetime) -> bool:
    """Hold the locked queued `job` when its fuse does not let it start now; True when held
    (the delivery is then dropped unrun, DropReason.FUSE). One indexed read (and lock) of
    the Fuse row; no row (never counted) is closed."""
    destination = config.destination(job.payload)
    row = Fuse.objects.select_for_update().filter(kind=job.kind, destination=destination).first()
    if row is None or row.state == FuseState.CLOSED:
        return False
    was = snapshot(row)
    ok, after = admit(
        was,
        config.rules,
        now=now.timestamp(),
        job_id=str(job.id),
        probe_lease=probe_lease(job.kind),
    )
    store(row, after, now=now)
    if ok:
        if after.state == FuseState.HALF_OPEN and was.probe_job != after.probe_job:
            logger.warning(
                "fuse half-open: probe attempt kind=%s destination=%s job_id=%s",
                job.kind,
                destination,
                job.id,
            )
        return False
    why = waiting_fields.for_fuse(
        kind=job.kind, destination=destination, probe_due=_dt(after.probe_due)
    )
    job.save(update_fields=changes.apply(job, changes.held_by_pause(why)))
    logger.info(
        "delivery held: fuse open job_id=%s kind=%s destination=%s", job.id, job.kind, destination
    )
    return True


def operate(
    config: FuseConfig, destination: str, *, opening: bool, user: Any, reason: str, now: datetime
) -> Fuse:
    """An operator's trip (`opening`) or reset of the fuse of `config.kind` for `destination`,
    by `user` (None: the command line) with `reason`; the row after it (created if need be).
    The caller's transaction holds the row lock."""
    _ensure(config.kind, destination, now=now)
    row = Fuse.objects.select_for_update().get(kind=config.kind, destination=destination)
    was = snapshot(row)
    after = trip(was, config.rules, now=now.timestamp()) if opening else close(was, config.rules)
    row.changed_by, row.reason, row.updated_at = user, reason[:300], now
    row.save()
    store(row, after, now=now)
    return row


def _ensure(kind: str, destination: str, *, now: datetime) -> None:
    """Create the closed Fuse row of (`kind`, `destination`) unless it exists."""
    Fuse.objects.bulk_create(
        [Fuse(kind=kind, destination=destination, updated_at=now)], ignore_conflicts=True
    )


def record(config: FuseConfig, *, job_id: Any, payload: Any, failed: bool | None) -> str:
    """Count the end of an attempt of `config.kind` (job `job_id`) in its destination's fuse:
    `failed` True / False / None (jobs.fuse_gate.failed). Returns the transition for logs:
    "tripped", "reopened", "closed" or "". Creates the row on the first counted end; an
    uncounted end (None) still matters when it is the probe's (re-opened, probe due now)."""
    destination = config.destination(payload)
    with transaction.atomic():
        row = (
            Fuse.objects.select_for_update()
            .filter(kind=config.kind, destination=destination)
            .first()
        )
        if row is None and failed is None:
            return ""  # uncounted, and no probe of a fuse that does not exist
        if row is None:
            _ensure(config.kind, destination, now=clock.now())
            row = Fuse.objects.select_for_update().get(kind=config.kind, destination=destination)
        # Read once the row is locked: ends of a busy kind queue on this lock, and a trip's
        # `opened_at` must be when it took effect, not when its end began to wait.
        now = clock.now()
        was = snapshot(row)
        after = record_end(
            was, config.rules, now=now.timestamp(), job_id=str(job_id), failed=failed
        )
        if after.state == FuseState.OPEN and was.state == FuseState.CLOSED:
            row.changed_by, row.reason = None, "tripped by its failure ratio"
        store(row, after, now=now)
    change = _transition(was.state, after.state)
    if change:
        logger.warning(
            "fuse %s kind=%s destination=%s state=%s %s",
            change,
            config.kind,
            destination,
            after.state.value,
            asdict(after),
        )
    return change


def _transition(was: FuseState, now: FuseState) -> str:
    if was == FuseState.CLOSED and now == FuseState.OPEN:
        return "tripped"
    if was == FuseState.HALF_OPEN and now == FuseState.OPEN:
        return "reopened"
    if was != FuseState.CLOSED and now == FuseState.CLOSED:
        return "closed"
    return ""


def release(sweep: Sweep, found: Mapping[str, FuseConfig]) -> list[uuid.UUID]:
    """Claim, for `sweep.claimer`, the held jobs that may start: every one of a closed fuse
    (or of a kind whose fuse is off now), oldest first, their wait ended; and the oldest
    of an open fuse whose probe is due (or whose probe's lease ran out), when none of it is
    released and unstarted already (it keeps its reason: its start makes it the probe).
    Returns their ids, committed (the caller publishes them). One read of the partial
    index when nothing is held."""
    held = Job.objects.filter(held_q())
    if not held.exists():
        return []
    now = clock.now()
    fuses = {(f.kind, f.destination): f for f in Fuse.objects.all()}

    def key_of(kind: str, payload: Any) -> tuple[str, str]:
        config = found.get(kind)
        return kind, config.destination(payload) if config else WHOLE_KIND

    in_flight = {
        key_of(kind, payload)
        for kind, payload in held.exclude(outbox_claim.unclaimed()).values_list("kind", "payload")
    }
    free: list[uuid.UUID] = []
    probes: dict[tuple[str, str], uuid.UUID] = {}
    rows = held.filter(outbox_claim.unclaimed()).order_by("enqueued_at", "id")
    for job_id, kind, payload in rows.values_list("id", "kind", "payload")[:RELEASE_SCAN]:
        key = key_of(kind, payload)
        row = fuses.get(key)
        if kind not in found or row is None or row.state == FuseState.CLOSED:
            free.append(job_id)
        elif key not in probes and key not in in_flight and _probe_due(row, now):
            probes[key] = job_id
    with transaction.atomic():
        ids = _claim(free[: sweep.limit], sweep.claimer, clear=True)
        ids += _claim(list(probes.values()), sweep.claimer, clear=False)
    if ids:
        logger.info("released %s jobs held by fuses (%s probes)", len(ids), len(probes))
    return ids


def _probe_due(row: Fuse, now: datetime) -> bool:
    """Whether an open fuse's probe may start now: its cool-down is over, or (half-open) the
    probe's lease ran out (jobs.fuse_gate.probe_lease)."""
    if row.state == FuseState.OPEN:
        return row.probe_due_at is None or row.probe_due_at <= now
    if row.probe_started_at is None:
        return True
    return (now - row.probe_started_at).total_seconds() >= probe_lease(row.kind)


def _claim(chosen: list[uuid.UUID], claimer: str, *, clear: bool) -> list[uuid.UUID]:
    if not chosen:
        return []
    ids = list(
        Job.objects.filter(held_q(), outbox_claim.unclaimed(), id__in=chosen)
        .select_for_update(skip_locked=True)
        .values_list("id", flat=True)
    )
    if ids:
        extra = waiting_fields.NOT_WAITING if clear else {}
        Job.objects.filter(id__in=ids).update(**extra, **outbox_claim.claim_fields(claimer=claimer))
    return ids
