"""The attempt engine: the only writer of job and attempt rows (docs/engine.md).

`Engine` holds the named transitions, each taking value objects
(jobs.engine.values): `start(delivery)`, `finish(attempt, report)`,
`lose(loss)`, `cancel(job)`, `drop(job)`, `requeue(job)`, `retry_now(job)`,
`promote_due(sweep)`, `expire_leases(sweep)`, `reopen_outbox(...)`, and
`submitted(...)` for a new row. Its backend (ORM, PostgreSQL, SQLite;
jobs.engine.backends) is chosen once per process: `current()` is the
engine the jobs app built at startup (jobs.apps), and tests pass another.

Every transition runs through `_boundary`, the one place domain events
(jobs.events, which telemetry subscribes to) leave the engine: a backend
only collects them, and the boundary sends them once the transaction
commits (at once in autocommit). Publishing and History stay with the
callers (jobs.services), which act on what a transition returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from django.apps import apps
from django.db import transaction

from jobs import clock
from jobs.engine import changes, lifecycle
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

T = TypeVar("T")

__all__ = ["Engine", "current", "requeue_max_attempts"]

requeue_max_attempts = lifecycle.requeue_max_attempts


class Engine:
    """The named transitions over one backend (module docstring)."""

    def __init__(self, backend: OrmBackend) -> None:
        self.backend = backend

    @classmethod
    def for_vendor(cls, vendor: str) -> Engine:
        """The engine for a database of `vendor` (Django's `connection.vendor`)."""
        return cls(choose(vendor))

    def _boundary(self, run: Callable[[Effects], T]) -> T:
        """Run a transition, then send what it collected once its transaction commits."""
        effects = Effects()
        result = run(effects)
        for signal, kwargs in effects.events:
            transaction.on_commit(partial(signal.send, sender=Job, **kwargs))
        for call in effects.calls:
            transaction.on_commit(call)
        return result

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
        """Queue due `retrying` and `delayed` jobs; their ids, to publish."""
        return self._boundary(lambda _fx: lifecycle.promote_due(sweep))

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

    def submitted(self, *, delayed: bool, run_after: datetime | None, **columns: Any) -> Job:
        """A new job row (unsaved), `delayed` until `run_after` or queued (the caller inserts it)."""
        return changes.submitted(delayed=delayed, run_after=run_after, **columns)


def current() -> Engine:
    """The engine this process chose at startup (jobs.apps.JobsConfig.ready)."""
    engine: Engine = apps.get_app_config("jobs").engine  # type: ignore[attr-defined]
    return engine
