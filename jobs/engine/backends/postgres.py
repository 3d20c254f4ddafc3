"""The PostgreSQL backend: the two transitions almost every attempt takes, one statement each.

Profiled on a worker child draining no-op jobs (docs/performance.md), the
attempt's own bookkeeping was ~12 round trips in two transactions (BEGIN,
SELECT ... FOR UPDATE, one UPDATE per save, the Attempt INSERT, COMMIT).
Here (SQL in jobs/engine/sql/postgres.sql, in autocommit: a single
statement is its own transaction):

- start: `queued` with `attempts_made = n - 1` -> `running`, the lease
  taken and the Attempt row inserted (a data-modifying CTE);
- finish: `running` with this attempt current and unfinished -> the
  outcome, the attempt row and the job row written together, with the one
  retry decision made before the write (jobs.engine.changes.ending).

The row lock the UPDATE takes replaces SELECT ... FOR UPDATE: a concurrent
writer (the lease sweep, a cancel, a redelivery) either commits first, and
then the WHERE no longer matches, or waits for this statement. When the
condition does not hold, nothing is written and the ORM path (the base
class) handles the case. Events go into the `Effects` passed in.
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs import budget, clock, events
from jobs.engine import changes, rating, sql
from jobs.engine.backends import pg_statement
from jobs.engine.backends.orm import OrmBackend
from jobs.engine.values import (
    AttemptEnd,
    AttemptRef,
    AttemptReport,
    Delivery,
    Effects,
    StartedAttempt,
)
from jobs.engine.verdicts import (
    decide_end,
    log_decision,
    log_finished,
    log_started,
    started_attempt,
)
from jobs.kinds import policy_for, registry
from jobs.models import Attempt, Job, JobStatus
from observability import tracing


def savepoint_if_nested() -> Any:
    """A savepoint inside a caller's transaction (tests), else nothing: the statement needs
    no transaction of its own, and a refused write (DataError) must not abort the caller's."""
    return transaction.atomic() if transaction.get_connection().in_atomic_block else nullcontext()


def aware(value: Any) -> datetime:
    """A datetime column read by raw SQL, made aware (SQLite returns naive UTC, as text or
    as a datetime). Raises ValueError for anything else."""
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return timezone.make_aware(parsed, UTC) if timezone.is_naive(parsed) else parsed


class PostgresBackend(OrmBackend):
    """Start and finish in one statement each when they match; the ORM path otherwise."""

    name = "postgres"
    dialect = "postgres"

    def __init__(self) -> None:
        super().__init__()
        self._leases: tuple[Any, dict[str, float]] = (None, {})
        self._leases_json: tuple[dict[str, float] | None, str] = (None, "{}")

    def leases_json(self) -> str:
        """leases() as the JSON text the start statement takes, encoded once per change."""
        leases = self.leases()
        if self._leases_json[0] is not leases:
            self._leases_json = (leases, json.dumps(leases))
        return self._leases_json[1]

    def leases(self) -> dict[str, float]:
        """{kind: lease seconds} (hard time limit + JOBS_LEASE_GRACE) of every registered kind.

        Computed once and again only when the registry, the overrides or the
        grace change (tests swap settings). A kind with an invalid override is
        left out: the ORM path raises its error. A kind with a fuse has its lease
        negated (the `_lease_fused` of postgres.sql).
        """
        overrides, grace = settings.JOBS_KIND_OVERRIDES, settings.JOBS_LEASE_GRACE
        key = (len(registry._KINDS), id(overrides), grace)
        if self._leases[0] != key:
            leases = {}
            for name in registry._KINDS:
                try:
                    policy = registry.policy_for(name)
                except ValueError:
                    continue
                # A kind with a fuse has its lease negated: the start statement then starts
                # its job only while none of its fuses is open (postgres.sql `_lease_fused`),
                # and SQLite's never (the general path judges it: jobs.engine.fusing).
                lease = float(policy.hard_time_limit) + float(grace)
                leases[name] = -lease if policy.fuse else lease
            self._leases = (key, leases)
        return self._leases[1]

    def start(
        self, delivery: Delivery, *, now: datetime, effects: Effects
    ) -> StartedAttempt | None:
        """A first attempt, or a retry the budget counted in the window it starts in
        (budget.admit would pass it unasked), in one statement; anything else by the ORM."""
        if delivery.resume:
            return super().start(delivery, now=now, effects=effects)
        params = {
            "job_id": str(delivery.job_id),
            "number": delivery.attempt,
            "hostname": delivery.hostname,
            "pid": delivery.pid,
            "rss": delivery.rss_bytes,
            "now": now,
            "running": JobStatus.RUNNING.value,
            "queued": JobStatus.QUEUED.value,
        }
        due_from, due_to = budget.admitted_due_range(now.timestamp())
        params |= {"due_from": due_from, "due_to": due_to}
        if self.limits() or self.rates():
            # A kind with a concurrency or rate limit is judged in the statement (start_limited).
            params["limits"] = self.flow.now().limits_json
            params["rates"] = self.flow.now().rates_json
        with savepoint_if_nested():
            done = self.start_statement(params)
        if done is None and self.rates():
            done, now = self.start_after_wait(params, delivery)
        if done is None:
            return super().start(delivery, now=now, effects=effects)
        job, attempt_id, at = done
        row = Attempt(
            id=attempt_id,
            job=job,
            number=delivery.attempt,
            worker_hostname=delivery.hostname,
            worker_pid=delivery.pid,
            started_at=at,
            rss_before_bytes=delivery.rss_bytes,
        )
        row._state.adding = False
        effects.send(events.attempt_started, job=job, attempt=row)
        if delivery.attempt == 1:
            # The retry budget's denominator, as in the ORM path.
            effects.call(lambda: budget.record_first(job.kind, now=now.timestamp()))
        log_started(job, delivery.attempt)
        return started_attempt(job, delivery.attempt, policy_for(job.kind))

    def start_after_wait(
        self, params: dict[str, Any], delivery: Delivery
    ) -> tuple[tuple[Job, int, datetime] | None, datetime]:
        """A start the rate refused only because it came a little early (a released job
        delivered before its bucket admits it): wait until the bucket conforms and run the
        statement again, while the waits add up to at most rating.MAX_START_WAIT (another
        start may take the turn meanwhile); (its result, the time used)."""
        now, waited = params["now"], 0.0
        for _ in range(10):
            if self.dialect != "postgres" or params.get("rates") is None:
                break
            wait = rating.start_wait(delivery.job_id, params["rates"], now)
            if wait is None or waited + wait > rating.MAX_START_WAIT:
                break
            wait = max(wait, 0.001)
            time.sleep(wait)
            waited += wait
            now = clock.now()
            with savepoint_if_nested():
                done = self.start_statement(params | {"now": now})
            if done is not None:
                return done, now
        return None, now

    def start_statement(self, params: dict[str, Any]) -> tuple[Job, int, datetime] | None:
        """Run the start; the job after it, the attempt's id and start, or None (no match)."""
        name = "start_limited" if "limits" in params else "start"
        # While some kind has a fuse, its lease (negated) is judged against its fuses.
        queries = sql.queries(self.dialect, fused=bool(self.fuses.get()))
        done = pg_statement.run(queries[name], params | {"leases": self.leases_json()})
        if done is None:
            return None
        job, extra = done
        return job, extra["jobs_attempt_id"], aware(extra["jobs_attempt_started_at"])

    def finish(
        self, ref: AttemptRef, report: AttemptReport, *, now: datetime, effects: Effects
    ) -> AttemptEnd:
        """The common case in one statement: the job runs this attempt, unfinished, and
        `ref.started` says under which policy. Anything else by the ORM."""
        started = ref.started
        if started is None:
            return super().finish(ref, report, now=now, effects=effects)
        decision = decide_end(started, report, now=now, attempts_made=ref.number)
        params = sql.finish_params(changes.ending(decision, report=report, now=now)) | {
            "job_id": str(started.job_id),
            "number": ref.number,
            "running": JobStatus.RUNNING.value,
            "rss": ref.rss_bytes,
            "trace_id": report.trace_id,
            "parent_trace_id": tracing.trace_id_from(started.trace_parent),
        }
        if self.limits():
            # Says whether a job of a limited kind waits for the slot this frees (finish_limited).
            params["limits"] = self.flow.now().limits_json
        with savepoint_if_nested():
            done = self.finish_statement(params)
        if done is None:
            return super().finish(ref, report, now=now, effects=effects)
        job, extra = done
        # SQLite's finish does not probe: a limited kind's slot is handed off unasked.
        if job.kind in self.limits() and extra.pop("waiting", True):
            effects.slot_freed(job)
        columns = {
            "id": extra["id"],
            "worker_hostname": extra["worker_hostname"],
            "worker_pid": extra["worker_pid"],
            "started_at": aware(extra["started_at"]),
            "rss_before_bytes": extra["rss_before_bytes"],
            "rss_after_bytes": ref.rss_bytes,
            "retry_delay_seconds": extra["retry_delay_seconds"],
            "trace_id": extra["trace_id"],
        }
        row = Attempt(
            job=job, number=ref.number, **columns | changes.closed(report, decision, now=now)
        )
        row._state.adding = False
        effects.send(events.attempt_finished, job=job, attempt=row, decision=decision)
        if decision is not None:
            log_decision(job, ref.number, report.outcome, decision, job.last_error)
        if job.is_terminal:
            effects.send(events.job_completed, job=job)
        log_finished(job, ref.number, report)
        return AttemptEnd.after(job, ref.number, report.outcome, decision)

    def finish_statement(self, params: dict[str, Any]) -> tuple[Job, dict[str, Any]] | None:
        """Run the finish; the job after it and the attempt's columns read back, or None."""
        name = "finish_limited" if "limits" in params else "finish"
        done = pg_statement.run(sql.queries(self.dialect)[name], params)
        if done is None:
            return None
        job, other = done
        # The attempt's columns came back beside the job's, prefixed.
        return job, {name[2:]: value for name, value in other.items() if name.startswith("a_")}
