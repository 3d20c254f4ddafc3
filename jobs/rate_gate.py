"""What a rate limit allows, read at the start and by the leader's paced release.

A kind's policy may set `rate` ("20/s", "600/m": attempt starts across every
worker and host), `rate_burst` (extra starts at once after a quiet spell)
and `rate_key` (a dotted payload path: one bucket per value of it). The
check is a GCRA bucket per (kind, key) (jobs.gcra) whose state is a
jobs_ratebucket row (jobs.models.RateBucket). Where it runs:

- PostgreSQL: `jobs_rate_admit` (jobs.rate_sql), in the start statement
  (`start_limited`) and first in the general path's transaction, under an
  advisory lock per (kind, key);
- other databases (SQLite): the ORM (jobs.engine.rating), under the
  IMMEDIATE transaction's writer lock, which serialises every writer.

A job may start when no older job of its kind (key) waits for the rate and
the bucket conforms; the row changes are the engine's (jobs.engine.rating).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q

from jobs import gcra, waiting
from jobs.concurrency_gate import payload_key, valid_policies
from jobs.models import Job, JobStatus
from jobs.outbox_claim import unclaimed
from jobs.reasons import WaitingReason


@dataclass(frozen=True)
class KindRate:
    """At most `per_second` starts of `kind` (+ `burst`), per value of the payload `path`."""

    kind: str
    text: str
    per_second: float
    burst: int = 0
    path: tuple[str, ...] = ()
    margin: float = 0.0  # seconds of dispatch jitter allowed for (JOBS_RATE_DISPATCH_MARGIN)

    @property
    def interval(self) -> float:
        """Seconds between two starts (GCRA's emission interval T), the margin included."""
        return gcra.interval_of(
            per_second=self.per_second, period=gcra.period_of(self.text), margin=self.margin
        )

    @property
    def enforced_per_second(self) -> float:
        """Starts per second the buckets allow: 1 / `interval` (just under `per_second`)."""
        return 1.0 / self.interval

    def key(self, payload: Any) -> str | None:
        """The key value of a job with `payload` (jobs.concurrency_gate.payload_key)."""
        return payload_key(self.path, payload)

    def waiting(self, payload: Any, *, wait: float) -> waiting.Waiting:
        """The waiting reason and detail of a job of this kind held `wait` s from its slot."""
        return waiting.for_rate(kind=self.kind, rate=self.text, key=self.key(payload), wait=wait)


def rates(*, margin: float | None = None) -> dict[str, KindRate]:
    """{kind: its rate} of every registered kind whose policy (overrides applied) sets `rate`,
    with `margin` seconds of dispatch jitter (default JOBS_RATE_DISPATCH_MARGIN). A kind
    with an invalid override is left out (the system check jobs.E002 says why)."""
    margin = settings.JOBS_RATE_DISPATCH_MARGIN if margin is None else margin
    found: dict[str, KindRate] = {}
    for name, policy in valid_policies():
        if policy.rate is not None and policy.rate_per_second is not None:
            found[name] = KindRate(
                name,
                policy.rate,
                policy.rate_per_second,
                policy.rate_burst,
                policy.rate_path,
                margin,
            )
    return found


def rates_json(found: Mapping[str, KindRate]) -> str:
    """`found` as jobs_rate_admit's `p_rates`: {kind: {"t": T, "b": burst, "path": [...]}}."""
    return json.dumps(
        {k: {"t": v.interval, "b": v.burst, "path": list(v.path)} for k, v in found.items()}
    )


def waiting_q() -> Q:
    """Queued jobs waiting for a rate limit, held or released (partial index jobs_job_rate_idx)."""
    return Q(status=JobStatus.QUEUED, waiting_reason=WaitingReason.RATE_LIMIT)


def older_waits(job: Job, rate: KindRate) -> bool:
    """Whether an older job of `job`'s kind and key is held for the rate, unreleased (the
    ORM's twin of jobs_rate_admit's place check)."""
    if job.enqueued_at is None:
        return False
    older = Q(enqueued_at__lt=job.enqueued_at) | Q(enqueued_at=job.enqueued_at, id__lt=job.id)
    waiters = Job.objects.filter(waiting_q(), unclaimed(), older, kind=job.kind).exclude(id=job.id)
    key = rate.key(job.payload)
    return any(rate.key(p) == key for p in waiters.values_list("payload", flat=True))


# A held job as the pacer reads it: (id, payload, reserved start).
Held = tuple[Any, Any, Any]


def fill_due_slots(
    rate: KindRate, due: Sequence[Held], oldest: Sequence[Held]
) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """Which held jobs the pacer releases: per key, as many of the `oldest` (held jobs in
    submission order) as `due` slots have come (reserved starts in the past), so the oldest
    goes first even when a newer one was held first. Returns the ids to release and the
    moves [(id, reserved start)] handing the released jobs' later starts to the due jobs
    left held."""
    wanted: dict[str | None, int] = {}
    for _, payload, _ in due:
        key = rate.key(payload)
        wanted[key] = wanted.get(key, 0) + 1
    chosen: list[Held] = []
    for row in oldest:
        key = rate.key(row[1])
        if wanted.get(key, 0) > 0:
            chosen.append(row)
            wanted[key] -= 1
    chosen_ids = {row[0] for row in chosen}
    due_ids = {row[0] for row in due}
    moves: list[tuple[Any, Any]] = []
    keys = {rate.key(row[1]) for row in due}
    for key in keys:
        left = sorted(
            (r for r in due if r[0] not in chosen_ids and rate.key(r[1]) == key),
            key=lambda r: r[2],
        )
        freed = sorted(r[2] for r in chosen if r[0] not in due_ids and rate.key(r[1]) == key)
        moves += [(row[0], slot) for row, slot in zip(left, freed, strict=False)]
    return [row[0] for row in chosen], moves
