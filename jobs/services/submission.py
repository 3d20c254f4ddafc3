"""Submitting a job: validated, recorded, then published when it commits (the outbox).

The publish itself is jobs.services.publishing's."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import sql
from rest_framework.exceptions import ValidationError

from jobs import clock, engine, events, fuse_gate, selectors
from jobs.engine.values import SubmitResult
from jobs.errors import IdempotencyConflict, InvalidSubmission, QueueFull
from jobs.jsonsafe import json_problem
from jobs.kinds import UnknownKind, get_kind, policy_for
from jobs.models import Job
from jobs.services.publishing import job_publish, publish_one
from observability import tracing

logger = logging.getLogger(__name__)


def _canonical(value: Any) -> Any:
    # 1 and 1.0 are the same request: a default of 0 and an explicit 0.0 must match.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def _storable(value: Any, path: str) -> None:
    """Raise InvalidSubmission naming the first part of `value` no layer below can hold.

    Depth, lone surrogates, NUL and non-finite numbers (jobs.jsonsafe): each
    would otherwise end in a RecursionError, a DataError from the jsonb column
    or an encoding error, that is, a 500.
    """
    problem = json_problem(value, path=path, max_depth=settings.JOBS_JSON_MAX_DEPTH)
    if problem is not None:
        raise InvalidSubmission({problem.path: [problem.reason]})


def request_fingerprint(*, kind: str, queue: str, payload: Any, priority: int | None = None) -> str:
    """SHA-256 hex of the canonical JSON of (kind, queue, payload); integral floats count as ints.

    Recursive: `payload` must already be within settings.JOBS_JSON_MAX_DEPTH
    (job_submit checks it with `_storable` first).
    """
    canonical = json.dumps(
        {"kind": kind, "queue": queue, "priority": priority, "payload": _canonical(payload)},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _flatten_errors(detail: Any, prefix: str) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" else f"{prefix}.{key}"
            for k, v in _flatten_errors(value, name).items():
                out.setdefault(k, []).extend(v)
        return out
    if isinstance(detail, list) and detail and all(isinstance(d, str) for d in detail):
        return {prefix: [str(d) for d in detail]}
    if isinstance(detail, list):
        out = {}
        for i, item in enumerate(detail):
            for k, v in _flatten_errors(item, f"{prefix}.{i}").items():
                out.setdefault(k, []).extend(v)
        return out
    return {prefix: [str(detail)]}


def job_submit(
    *,
    kind: str,
    payload: Any,
    queue: str | None = None,
    priority: int | None = None,
    idempotency_key: str | None = None,
    user: Any = None,
    run_after: datetime | None = None,
) -> SubmitResult:
    """Validate and durably record a job, then publish it when the transaction commits.

    `priority` is Celery's Redis message priority (0 first, 9 last; None
    for none). `run_after` (an aware datetime) is the earliest start: when
    it is later than now the job is recorded `delayed` with nothing
    published, and the scheduler queues it when due (jobs.services.sweeps);
    an earlier or equal one starts at once. Returns SubmitResult(job,
    created). Raises InvalidSubmission
    (unknown kind; bad payload, queue or priority; a payload or key that
    cannot be stored: nested deeper than settings.JOBS_JSON_MAX_DEPTH, a
    lone surrogate, NUL or a non-finite number), IdempotencyConflict (key
    reused by the same submitter, `user` or none, for another request of
    this kind) or QueueFull (backpressure). Nothing is
    written when it raises.
    """
    try:
        job_kind = get_kind(kind)
    except UnknownKind as exc:
        raise InvalidSubmission({"kind": [str(exc)]}) from None
    # Before validation too: the kind's serializer recurses into the payload.
    _storable(payload, "payload")
    _storable(idempotency_key or "", "idempotency_key")
    try:
        validated = job_kind.validate_payload(payload)
    except ValidationError as exc:
        raise InvalidSubmission(_flatten_errors(exc.detail, "payload")) from None
    # And after: a field may have turned a string into a value jsonb refuses.
    _storable(validated, "payload")
    queue = queue or job_kind.queue
    if queue not in settings.JOBS_QUEUES:
        raise InvalidSubmission(
            {"queue": [f"unknown queue {queue!r}; known: {', '.join(settings.JOBS_QUEUES)}"]}
        )
    if priority is not None and not (isinstance(priority, int) and 0 <= priority <= 9):
        raise InvalidSubmission({"priority": ["Must be an integer from 0 (first) to 9 (last)."]})
    if run_after is not None and (not isinstance(run_after, datetime) or run_after.tzinfo is None):
        raise InvalidSubmission({"run_after": ["Must be a date and time with a time zone."]})
    fingerprint = request_fingerprint(kind=kind, queue=queue, payload=validated, priority=priority)

    submitter = user if getattr(user, "is_authenticated", False) else None
    if idempotency_key:
        existing = _same_key(kind=kind, key=idempotency_key, submitter=submitter)
        if existing is not None:
            return _idempotent_match(existing, fingerprint)

    limit = selectors.queue_max_ready(queue=queue)
    if selectors.queue_ready_count(queue=queue, limit=limit) >= limit:
        raise QueueFull(
            f"queue {queue!r} holds its maximum of {limit} ready jobs",
            retry_after=settings.JOBS_BACKPRESSURE_RETRY_AFTER,
        )

    policy = policy_for(kind)
    now = clock.now()
    delayed = run_after is not None and run_after > now
    # A kind whose fuse is open, or whose rate holds older jobs: recorded held, nothing
    # published (the leader releases it: at once when the fuse closes, at its reserved start).
    held_by = None if delayed else fuse_gate.holding_new(kind, validated, policy)
    held_until = None
    if not delayed and held_by is None and policy.rate is not None:
        rated = engine.current().held_at_submit(kind, validated, now=now)
        if rated is not None:
            held_by, held_until = rated
    unpublished = delayed or held_by is not None
    job = engine.current().submitted(
        delayed=delayed,
        run_after=run_after,
        held_by=held_by,
        held_until=held_until,
        kind=kind,
        queue=queue,
        priority=priority,
        payload=validated,
        max_attempts=policy.max_attempts,
        idempotency_key=idempotency_key or None,
        request_fingerprint=fingerprint,
        enqueued_at=now,
        created_by=submitter,
        trace_parent=tracing.current_traceparent(),
    )
    try:
        if connection.vendor == "postgresql":
            # One statement, its own transaction (a savepoint inside a caller's):
            # no BEGIN/COMMIT round trips, and the database's clock comes back
            # with it for the message's stamp, so the publish needs no SELECT.
            in_caller_transaction = connection.in_atomic_block
            with transaction.atomic() if in_caller_transaction else nullcontext():
                stamped_at = _insert_returning_clock(job)

            def committed() -> None:
                if not unpublished:
                    publish_one(job, stamped_at=stamped_at, deferred_stamp=True)
                events.job_submitted.send(sender=Job, job=job)

            if in_caller_transaction:
                transaction.on_commit(committed)
            else:
                # Committed already. Not through on_commit, which asks the
                # connection for its autocommit state: after a connection lost
                # while stamping the publish, that would reconnect and turn a
                # job that is taken into an error.
                committed()
        else:
            with transaction.atomic():
                job.save(force_insert=True)
                if not unpublished:
                    transaction.on_commit(lambda: job_publish(job_id=job.id))
                transaction.on_commit(lambda: events.job_submitted.send(sender=Job, job=job))
    except IntegrityError:
        # Lost a race with a concurrent submission of the same key.
        existing = (
            _same_key(kind=kind, key=idempotency_key, submitter=submitter)
            if idempotency_key
            else None
        )
        if existing is not None:
            return _idempotent_match(existing, fingerprint)
        raise
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "job submitted job_id=%s kind=%s queue=%s trace_id=%s",
            job.id,
            kind,
            queue,
            tracing.trace_id_from(job.trace_parent),
        )
    return SubmitResult(job=job, created=True)


def _insert_returning_clock(job: Job) -> datetime:
    """INSERT `job` (PostgreSQL) and return the database's clock at that statement.

    The statement is the one Model.save() would send (same fields and
    pre_save values: auto_now_add, defaults), with RETURNING
    statement_timestamp() added. The returned time is earlier than the
    publish that follows, which is all the message's stamp must be
    (jobs.services.lost_messages). Raises IntegrityError (a duplicate
    idempotency key) and the database's other errors.
    """
    query = sql.InsertQuery(Job)
    query.insert_values(Job._meta.local_concrete_fields, [job])
    ((statement, params),) = query.get_compiler(using=job._state.db or "default").as_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"{statement} RETURNING statement_timestamp()", params)
        row = cursor.fetchone()
    job._state.adding = False
    job._state.db = "default"
    return row[0]


def _same_key(*, kind: str, key: str, submitter: Any) -> Job | None:
    """The job `submitter` (None: no submitter) already submitted with this kind and key.

    Keys are scoped per submitter and kind (README "Security model"): another
    user's job with the same key is never returned, so no answer names it.
    One of the two partial unique indexes of jobs.models.Job answers it.
    """
    jobs = Job.objects.filter(kind=kind, idempotency_key=key)
    if submitter is None:
        return jobs.filter(created_by__isnull=True).first()
    return jobs.filter(created_by=submitter).first()


def _idempotent_match(existing: Job, fingerprint: str) -> SubmitResult:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"idempotency key already used for job {existing.id} with a different request"
        )
    return SubmitResult(job=existing, created=False)
