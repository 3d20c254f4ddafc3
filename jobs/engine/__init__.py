"""The attempt engine: the only writer of job and attempt rows (docs/engine.md).

`Engine` holds the named transitions, each taking value objects
(jobs.engine.values): `start(delivery)`, `finish(attempt, report)`,
`lose(loss)`, `cancel(job)`, `drop(job)`, `requeue(job)`, `retry_now(job)`,
`promote_due(sweep)`, `expire_leases(sweep)`, `reopen_outbox(...)`,
`hold_paused(ids)`, `release_held(sweep)` (a pause: jobs.engine.pausing),
`release_waiting(sweep)` (a concurrency limit: jobs.engine.limiting),
`release_fused(sweep)` (a fuse: jobs.engine.fusing),
`release_rate_due(sweep)` and `next_rate_due()` (a rate limit: jobs.engine.rating), and
`submitted(...)` for a new row. Its backend (ORM, PostgreSQL, SQLite;
jobs.engine.backends) is chosen once per process: `current()` is the
engine the jobs app built at startup (jobs.apps), and tests pass another.

Every transition runs through `_boundary`, the one place domain events
(jobs.events, which telemetry subscribes to) leave the engine: a backend
only collects them, and the boundary sends them once the transaction
commits (at once in autocommit). Publishing and History stay with the
callers (jobs.services), which act on what a transition returns; the one
exception is the hand-off of a freed concurrency slot (jobs.engine.limiting.
hand_off), which the boundary runs after commit and publishes through the
`publish` callable the jobs app gives the engine (the services' claimed
publish: outbox claim, publish, stamp).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from django.apps import apps
from django.db import DatabaseError, transaction

from jobs import clock, events, fuse_gate
from jobs.concurrency_gate import KindLimit
from jobs.engine import changes, fusing, lifecycle, limiting, pausing, rating
from jobs.engine.backends import OrmBackend, choose
from jobs.engine.values import (
    AttemptEnd,
    AttemptRef,
    AttemptReport,
    Delivery,
    Effects,
    JobRef,
    Loss,
    Moved,
    StartedAttempt,
    Sweep,
)
from jobs.models import Job
from jobs.waiting import Waiting

T = TypeVar("T")

# Publishes claimed job ids for a claimer (jobs.services.sweeps.publish_claimed); how many.
Publish = Callable[[list[uuid.UUID], str], int]

logger = logging.getLogger(__name__)

__all__ = ["Engine", "current", "requeue_max_attempts"]

requeue_max_attempts = lifecycle.requeue_max_attempts


class Engine:
    """The named transitions over one backend (module docstring)."""

    def __init__(self, backend: OrmBackend, publish: Publish | None = None) -> None:
        self.backend = backend
        # None (a test's engine): freed slots wait for the leader's pass instead.
        self.publish = publish

    @classmethod
    def for_vendor(cls, vendor: str, publish: Publish | None = None) -> Engine:
        """The engine for a database of `vendor` (Django's `connection.vendor`); `publish`
        publishes the jobs a freed concurrency slot is handed to (module docstring)."""
        return cls(choose(vendor), publish)

    def _boundary(self, run: Callable[[Effects], T]) -> T:
        """Run a transition, then send what it collected once its transaction commits, and
        hand off the concurrency slots it freed."""
        effects = Effects()
        result = run(effects)
        for signal, kwargs in effects.events:
            transaction.on_commit(partial(signal.send, sender=Job, **kwargs))
        for call in effects.calls:
            transaction.on_commit(call)
        self._count_fuse_ends(effects)
        if effects.freed and self.publish is not None:
            limits = self.backend.limits()
            for job in effects.freed:
                limit = limits.get(job.kind)
                if limit is not None:
                    transaction.on_commit(partial(self._hand_off, limit, job.payload))
        return result

    def _count_fuse_ends(self, effects: Effects) -> None:
        """After commit, count each ended attempt of a kind with a fuse in its fuse
        (jobs.engine.fusing.record): one look at the events for every other kind."""
        fuses = self.backend.fuses.get()
        if not fuses:
            return
        for signal, kwargs in effects.events:
            job = kwargs.get("job")
            if signal is not events.attempt_finished or job is None or job.kind not in fuses:
                continue
            decision = kwargs.get("decision")
            failed = fuse_gate.failed(
                kwargs["attempt"].outcome, decision.dead_reason if decision else ""
            )
            transaction.on_commit(
                partial(self._record_fuse, fuses[job.kind], job.id, job.payload, failed)
            )

    def _record_fuse(
        self, config: fuse_gate.FuseConfig, job_id: Any, payload: Any, failed: bool | None
    ) -> None:
        """Count one attempt's end in its fuse. Never raises: the end it counts is committed;
        a count lost to a database error is one attempt fewer in the window."""
        try:
            fusing.record(config, job_id=job_id, payload=payload, failed=failed)
        except Exception:
            logger.exception("fuse count of %s lost", config.kind)

    def _hand_off(self, limit: KindLimit, payload: Any) -> None:
        """Release the oldest jobs waiting for the slot a job with `payload` freed and publish
        them (jobs.engine.limiting.hand_off). Never raises: what it could not do, the
        leader's pass does at its next tick (claims it took run out or are released)."""
        claimer = f"hand-off@{socket.gethostname()}:{os.getpid()}"
        try:
            ids = limiting.hand_off(limit, payload, claimer=claimer)
            if ids and self.publish is not None:
                self.publish(ids, claimer)
        except DatabaseError as exc:
            logger.warning("concurrency hand-off of %s left to the leader: %s", limit.kind, exc)
        except Exception:
            # Runs after the attempt's end committed: nothing here may fail that end.
            logger.exception("concurrency hand-off of %s left to the leader", limit.kind)

    def start(self, delivery: Delivery) -> StartedAttempt | None:
        """Begin the attempt a delivery asks for, or return None to drop it unrun.

        Every delivery counts in `Job.deliveries`. Dropped when the job is gone
        or terminal, the number is stale, that attempt may still be live (one
        live attempt per job) or the retry budget holds it. A redelivery after
        a lost worker starts the next attempt (the loss recorded first when
        nobody could). With `delivery.resume`, an unfinished attempt this
        process already started for it is returned.
        """
        now = clock.now()
        return self._boundary(lambda fx: self.backend.start(delivery, now=now, effects=fx))

    def finish(self, attempt: AttemptRef, report: AttemptReport) -> AttemptEnd:
        """Record how `attempt` ended and move the job on by the one retry decision.

        The AttemptEnd's `status` is the job's new status, or None when the
        attempt was already recorded or the job moved on (cancelled).
        Raises the database's errors.
        """
        now = clock.now()
        return self._boundary(lambda fx: self.backend.finish(attempt, report, now=now, effects=fx))

    def lose(self, loss: Loss) -> AttemptEnd:
        """Record that the child running the job's current attempt died (jobs.decisions:
        queued again, or dead `poison`/`exhausted`); `decision` None when nothing was."""
        now = clock.now()
        return self._boundary(lambda fx: self.backend.lose(loss, now=now, effects=fx))

    def cancel(self, job: JobRef) -> Moved:
        """Cancel a non-terminal job (raises InvalidTransition when terminal)."""
        return self._boundary(lambda fx: lifecycle.cancel(job, effects=fx))

    def drop(self, job: JobRef, *, attempt: int) -> Job | None:
        """End a queued job `dead` (delivery_limit) whose message for `attempt` the broker
        dropped; None when the job moved on since."""
        return self._boundary(lambda fx: lifecycle.drop(job, attempt=attempt, effects=fx))

    def requeue(self, job: JobRef) -> Moved:
        """Queue a dead job again with the attempts it has left, at least one."""
        return self._boundary(lambda fx: lifecycle.requeue(job, effects=fx))

    def retry_now(self, job: JobRef) -> Moved:
        """Queue a retrying job now (its budget unchanged), or requeue a dead one."""
        return self._boundary(lambda fx: lifecycle.requeue(job, effects=fx, retrying_too=True))

    def promote_due(self, sweep: Sweep) -> list[uuid.UUID]:
        """Queue due `retrying` and `delayed` jobs; their ids (hold_paused says which to publish)."""
        return self._boundary(lambda _fx: lifecycle.promote_due(sweep))

    def hold_paused(self, job_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        """Hold the claimed queued jobs a pause stops; the others' ids, to publish."""
        return self._boundary(lambda _fx: pausing.hold_paused(job_ids))

    def release_held(self, sweep: Sweep) -> list[uuid.UUID]:
        """Claim the held jobs no pause stops any more and end their wait; their ids, to publish."""
        return self._boundary(lambda _fx: pausing.release_held(sweep))

    def release_waiting(self, sweep: Sweep) -> list[uuid.UUID]:
        """Claim the oldest jobs held for a concurrency slot that fit in the free slots; their
        ids, to publish (jobs.engine.limiting)."""
        limits = self.backend.limits()
        return self._boundary(lambda _fx: limiting.release_waiting(sweep, limits))

    def release_fused(self, sweep: Sweep) -> list[uuid.UUID]:
        """Claim the jobs held by fuses that may start now (a closed fuse's, an open fuse's
        due probe); their ids, to publish (jobs.engine.fusing.release)."""
        found = self.backend.fuses.get()
        return self._boundary(lambda _fx: fusing.release(sweep, found))

    def release_rate_due(self, sweep: Sweep) -> list[uuid.UUID]:
        """Claim the jobs held for a rate limit whose reserved start has come (and those held
        for a rate no longer set); their ids, to publish (jobs.engine.rating)."""
        rates = self.backend.rates()
        return self._boundary(lambda _fx: rating.release_due(sweep, rates, now=clock.now()))

    def next_rate_due(self) -> datetime | None:
        """The earliest reserved start of a job held for a rate limit (None: none held)."""
        rates = self.backend.rates()
        return rating.next_due(rates) if rates else None

    def expire_leases(self, sweep: Sweep) -> list[Job]:
        """Close attempts past their lease as `worker_lost`; their jobs after the change."""
        return self._boundary(
            lambda fx: lifecycle.expire_leases(sweep, backend=self.backend, effects=fx)
        )

    def reopen_outbox(self, *, published_before: datetime, limit: int) -> int:
        """Put queued jobs published before `published_before` back in the outbox."""
        return self._boundary(
            lambda _fx: lifecycle.reopen_outbox(published_before=published_before, limit=limit)
        )

    def submitted(
        self,
        *,
        delayed: bool,
        run_after: datetime | None,
        held_by: Waiting | None = None,
        held_until: datetime | None = None,
        **columns: Any,
    ) -> Job:
        """A new job row (unsaved), `delayed` until `run_after` or queued, held unpublished
        when `held_by` says why (until `held_until`, a rate's reserved start; the caller
        inserts it, and publishes it unless held)."""
        return changes.submitted(
            delayed=delayed, run_after=run_after, held_by=held_by, held_until=held_until, **columns
        )

    def held_at_submit(
        self, kind: str, payload: Any, *, now: datetime
    ) -> tuple[Waiting, datetime] | None:
        """Why a new job of `kind` with `payload` submitted at `now` must wait unpublished for
        its kind's rate (older jobs are held for it; jobs.engine.rating.hold_new), with its
        reserved start; None for a kind without a rate per kind (no read)."""
        rate = self.backend.rates().get(kind)
        if rate is None:
            return None
        flow = self.backend.flow.now()
        return rating.hold_new(kind, payload, rate, now=now, rates_json=flow.rates_json)


def current() -> Engine:
    """The engine this process chose at startup (jobs.apps.JobsConfig.ready)."""
    engine: Engine = apps.get_app_config("jobs").engine  # type: ignore[attr-defined]
    return engine
