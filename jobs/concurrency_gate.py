"""What a concurrency limit allows, read at the start and in the leader's release pass.

A kind's policy may set `concurrency` (at most N live attempts across every
worker and host) and `concurrency_key` (a dotted payload path: at most N per
value of it). Reads only; the row changes are the engine's
(jobs.engine.limiting). Where the check runs:

- PostgreSQL: `jobs_concurrency_admit` (jobs.concurrency_sql), in the start
  statement itself (`start_limited`) and first in the general path's
  transaction: an advisory lock per (kind, key), then a fresh count;
- other databases (SQLite): `admits` counts with the ORM on the locked
  row; SQLite's IMMEDIATE transactions serialise every writer.

A job may start when fewer than N jobs of its kind (key) run and no older
job waits for the same slot, so a held job keeps its place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from jobs import waiting
from jobs.kinds import registry
from jobs.models import Job, JobStatus
from jobs.policy import Policy
from jobs.reasons import WaitingReason


@dataclass(frozen=True)
class KindLimit:
    """At most `limit` live attempts of `kind`, per value of the payload `path` (() : none)."""

    kind: str
    limit: int
    path: tuple[str, ...] = ()

    def key(self, payload: Any) -> str | None:
        """The key of a job with `payload`: its value as JSON text (so 42 and "42" differ, as
        in PostgreSQL), None when the limit is per kind. A missing path reads as "null"."""
        return payload_key(self.path, payload)

    def waiting(self, payload: Any) -> waiting.Waiting:
        """The waiting reason and detail of a job of this kind held for a slot."""
        return waiting.for_concurrency(kind=self.kind, limit=self.limit, key=self.key(payload))


def payload_key(path: tuple[str, ...], payload: Any) -> str | None:
    """The value at the dotted `path` of `payload` as JSON text (the grouping identity, the
    text PostgreSQL's `(payload #> path)::text` gives, so 42 and "42" are two keys), None for
    an empty path; a missing path reads as "null" (also the rate limits' key: jobs.rate_gate)."""
    if not path:
        return None
    value = payload
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return json.dumps(value, sort_keys=True)


def valid_policies() -> Iterator[tuple[str, Policy]]:
    """(kind, policy with overrides applied) of every registered kind whose policy is valid
    (an invalid override is left out: the system check jobs.E002 says why)."""
    for name in registry.kind_names():
        try:
            yield name, registry.policy_for(name)
        except ValueError:
            continue


def limits() -> dict[str, KindLimit]:
    """{kind: its limit} of every registered kind whose policy (overrides applied) sets
    `concurrency`. A kind with an invalid override is left out (the system check says why)."""
    found: dict[str, KindLimit] = {}
    for name, policy in valid_policies():
        if policy.concurrency is not None:
            found[name] = KindLimit(name, policy.concurrency, policy.concurrency_path)
    return found


def limits_json(found: Mapping[str, KindLimit]) -> str:
    """`found` as jobs_concurrency_admit's `p_limits`: {kind: {"n": N, "path": [...]}}."""
    return json.dumps({k: {"n": v.limit, "path": list(v.path)} for k, v in found.items()})


def waiting_q() -> Q:
    """Queued jobs waiting for a concurrency slot, held or released (partial index
    jobs_job_concurrency_idx)."""
    return Q(status=JobStatus.QUEUED, waiting_reason=WaitingReason.CONCURRENCY_LIMIT)


def admits(job: Job, limit: KindLimit) -> bool:
    """Whether `job` may start under `limit` now (the ORM's count; row locked by the caller,
    writers serialised by the database): fewer than `limit.limit` jobs of its kind (key)
    run and no older job waits for the same slot."""
    key = limit.key(job.payload)
    running = Job.objects.filter(kind=job.kind, status=JobStatus.RUNNING).exclude(id=job.id)
    if _count(running.values_list("payload", flat=True), limit, key) >= limit.limit:
        return False
    older = Q(enqueued_at__lt=job.enqueued_at) | Q(enqueued_at=job.enqueued_at, id__lt=job.id)
    if job.enqueued_at is None:
        return True
    waiters = Job.objects.filter(waiting_q(), older, kind=job.kind).exclude(id=job.id)
    return _count(waiters.values_list("payload", flat=True), limit, key) == 0


def _count(payloads: Iterable[Any], limit: KindLimit, key: str | None) -> int:
    return sum(1 for payload in payloads if limit.key(payload) == key)


def free_slots(
    limit: KindLimit, *, running: Iterable[Any], in_flight: Iterable[Any]
) -> dict[str | None, int]:
    """{key: slots free} of `limit` given the payloads of its running jobs and of the jobs
    released but not started yet (a key absent from the result has `limit.limit` free)."""
    used: dict[str | None, int] = {}
    for payload in [*running, *in_flight]:
        key = limit.key(payload)
        used[key] = used.get(key, 0) + 1
    return {key: max(0, limit.limit - n) for key, n in used.items()}


def pick_released(
    limit: KindLimit, held: Iterable[tuple[Any, Any]], free: dict[str | None, int]
) -> list[Any]:
    """The ids of `held` ((id, payload), oldest first) to release into the `free` slots
    (free_slots), oldest first per key; `free` is consumed."""
    chosen = []
    for job_id, payload in held:
        key = limit.key(payload)
        room = free.get(key, limit.limit)
        if room > 0:
            chosen.append(job_id)
            free[key] = room - 1
    return chosen
