"""Submitting a job and publishing its messages (the transactional outbox)."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import QuerySet, sql
from django.db.models.functions import Now
from rest_framework.exceptions import ValidationError

from config.celery_app import app
from jobs import broker, clock, engine, events, fuse_gate, selectors, task_names
from jobs.db import close_connections, is_unavailable
from jobs.engine.values import SubmitResult
from jobs.errors import IdempotencyConflict, InvalidSubmission, QueueFull
from jobs.jsonsafe import json_problem
from jobs.kinds import UnknownKind, get_kind, policy_for
from jobs.models import Job, JobStatus
from jobs.services.publish_stamps import defer_stamp, write_stamps
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
                    _publish(job, stamped_at=stamped_at, deferred_stamp=True)
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


def job_publish(*, job_id: uuid.UUID) -> bool:
    """Publish the message that starts the job's next attempt; record `published_at`.

    Both stamps come from the database's clock (one clock for every
    publisher): the message carries the time read just before the publish
    (header broker.PUBLISHED_AT_HEADER) and `published_at` is the time just
    after it, so a job whose `published_at` is earlier than a message's
    header was pushed before that message (jobs.services.lost_messages).

    Returns False (and logs) when the job is not waiting for a publish or the
    broker refused; the outbox sweep tries again later. Never raises for a
    broker outage. Returns True when the message was published but the
    database connection was lost before `published_at` was written: the
    sweep publishes again and the second delivery is dropped at the
    attempt's start, so the caller must not report a failure.
    """
    job = _waiting_for_publish([job_id]).first()
    if job is None:
        return False
    return _publish(job, stamped_at=job.stamped_at)


def jobs_publish(*, job_ids: Sequence[uuid.UUID | str]) -> int:
    """job_publish for many jobs: one read, one publish each (in `job_ids` order), one stamp.

    The rows and the database's time are read in one query; the messages
    are published one by one with that time as their header; `published_at`
    is then written for all of them in one UPDATE (jobs.services.
    publish_stamps.write_stamps), so each is still stamped after its
    publish. Jobs no longer queued are skipped; so is a job whose message
    cannot be built (its kind unregistered or its limits invalid: logged
    with the traceback, the row left for an operator). Stops at the first
    publish the broker refuses: the rest stay unpublished for the outbox
    sweep. Whatever was published is stamped, even when something raises
    midway. Returns how many were published. Never raises for a broker
    outage or a database connection lost before the stamp (as job_publish).
    Used by the scheduler, which publishes due retries and the outbox in
    batches of up to 500: per job it was a read, a publish and a committed
    UPDATE.
    """
    if not job_ids:
        return 0
    ordered = [uuid.UUID(str(job_id)) for job_id in job_ids]
    rows = {job.id: job for job in _waiting_for_publish(ordered)}
    published: list[tuple[uuid.UUID, int]] = []
    try:
        for job_id in ordered:
            job = rows.get(job_id)
            if job is None:
                continue
            try:
                sent = _send(job, stamped_at=job.stamped_at)
            except (UnknownKind, ValueError):
                logger.exception("publish skipped job_id=%s kind=%s", job.id, job.kind)
                continue
            if not sent:
                break
            published.append((job.id, job.attempts_made + 1))
    finally:
        # Unstamped, a published row would be published again by every sweep.
        _stamp(published)
    return len(published)


def _waiting_for_publish(job_ids: Sequence[uuid.UUID]) -> QuerySet[Job]:
    """The queued jobs among `job_ids`, with what a publish needs and `stamped_at` (the database's now)."""
    return (
        Job.objects.filter(id__in=job_ids, status=JobStatus.QUEUED)
        .only("kind", "queue", "priority", "attempts_made", "trace_parent")
        .annotate(stamped_at=Now())
    )


def _publish(job: Job, *, stamped_at: datetime, deferred_stamp: bool = False) -> bool:
    """job_publish once the job (queued; kind, queue, priority, attempts_made,
    trace_parent loaded) and the database's time before the publish are known.

    `deferred_stamp`: `published_at` is written later by this process's
    stamp writer (jobs.services.publish_stamps) when batching is on, so the
    submitting request does not wait for it.
    """
    if not _send(job, stamped_at=stamped_at):
        return False
    attempt = job.attempts_made + 1
    if deferred_stamp and settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS > 0:
        try:
            defer_stamp(job.id, attempt)
            return True
        except RuntimeError as exc:  # no writer thread could start: stamp it here
            logger.warning("stamping in the request job_id=%s: %s", job.id, exc)
    _stamp([(job.id, attempt)])
    return True


def _send(job: Job, *, stamped_at: datetime) -> bool:
    """Publish the message of the job's next attempt, headed with `stamped_at`.

    Returns False (logged, the outbox count forgotten) when the broker is
    known unreachable or refuses; never raises for a broker outage.
    """
    attempt = job.attempts_made + 1
    policy = policy_for(job.kind)
    if broker.recently_unreachable():
        # The broker just failed a call: leave the job to the outbox sweep
        # rather than wait for the socket timeout again.
        logger.info("publish deferred to the outbox sweep job_id=%s: broker unreachable", job.id)
        selectors.forget_outbox_count(job.queue)
        return False
    try:
        # In the submitting request's trace, whoever publishes (API or scheduler).
        with tracing.in_trace(job.trace_parent):
            app.tasks[task_names.RUN_ATTEMPT].apply_async(
                args=[str(job.id), attempt],
                queue=job.queue,
                priority=job.priority,
                task_id=f"{job.id}:{attempt}",
                soft_time_limit=policy.soft_time_limit,
                time_limit=policy.hard_time_limit,
                retry=False,
                # RabbitMQ (publisher confirms): no confirm in time is a failed publish.
                confirm_timeout=settings.JOBS_BROKER_CONFIRM_TIMEOUT,
                headers={broker.PUBLISHED_AT_HEADER: stamped_at.isoformat()},
            )
    except Exception as exc:  # kombu/redis raise many types for one outage
        broker.mark_unreachable()
        logger.warning(
            "publish failed job_id=%s attempt=%s: %s: %s", job.id, attempt, type(exc).__name__, exc
        )
        selectors.forget_outbox_count(job.queue)
        return False
    broker.mark_reachable()
    return True


def _stamp(stamps: list[tuple[uuid.UUID, int]]) -> None:
    """Write `published_at` for (job id, attempt) pairs just published; a lost connection is logged."""
    if not stamps:
        return
    try:
        write_stamps(stamps)
    except DatabaseError as exc:
        if not is_unavailable(exc):
            raise
        # The job's row is committed and its message is on the broker: the
        # submission succeeded. Answering it with an error would make a client
        # without an idempotency key submit it again. Without the stamp the
        # outbox sweep publishes it once more, and the attempt's start drops
        # whichever delivery comes second (jobs.engine.Engine.start).
        close_connections()
        (job_id, attempt), others = stamps[0], len(stamps) - 1
        logger.warning(
            "published but not stamped job_id=%s attempt=%s%s (database connection lost: %s: %s);"
            " the outbox sweep will publish again and the duplicate is dropped",
            job_id,
            attempt,
            f" and {others} other jobs" if others else "",
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
        )
