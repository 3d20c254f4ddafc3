"""Submitting a job and publishing its messages (the transactional outbox)."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from jobs import events, selectors
from jobs.errors import IdempotencyConflict, InvalidSubmission, QueueFull
from jobs.kinds import UnknownKind, get_kind, policy_for
from jobs.models import Job, JobStatus
from jobs.services.records import SubmitResult
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


def _nul_path(value: Any, path: str) -> str | None:
    """Dotted path of the first string (or key) holding a NUL character, else None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key):
                return path
            found = _nul_path(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{path}.{index}")
            if found:
                return found
    return None


def request_fingerprint(*, kind: str, queue: str, payload: Any, priority: int | None = None) -> str:
    """SHA-256 hex of the canonical JSON of (kind, queue, payload); integral floats count as ints."""
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
) -> SubmitResult:
    """Validate and durably record a job, then publish it when the transaction commits.

    `priority` is Celery's Redis message priority (0 first, 9 last; None
    for none). Returns SubmitResult(job, created). Raises InvalidSubmission
    (unknown kind, bad payload, queue or priority), IdempotencyConflict (key reused with another
    request) or QueueFull (backpressure). Nothing is written when it raises.
    """
    try:
        job_kind = get_kind(kind)
    except UnknownKind as exc:
        raise InvalidSubmission({"kind": [str(exc)]}) from None
    try:
        validated = job_kind.validate_payload(payload)
    except ValidationError as exc:
        raise InvalidSubmission(_flatten_errors(exc.detail, "payload")) from None
    nul_at = _nul_path(validated, "payload") or _nul_path(idempotency_key or "", "idempotency_key")
    if nul_at:
        raise InvalidSubmission({nul_at: ["NUL characters (\\u0000) are not allowed."]})
    queue = queue or job_kind.queue
    if queue not in settings.JOBS_QUEUES:
        raise InvalidSubmission(
            {"queue": [f"unknown queue {queue!r}; known: {', '.join(settings.JOBS_QUEUES)}"]}
        )
    if priority is not None and not (isinstance(priority, int) and 0 <= priority <= 9):
        raise InvalidSubmission({"priority": ["Must be an integer from 0 (first) to 9 (last)."]})
    fingerprint = request_fingerprint(kind=kind, queue=queue, payload=validated, priority=priority)

    if idempotency_key:
        existing = Job.objects.filter(kind=kind, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _idempotent_match(existing, fingerprint)

    limit = selectors.queue_max_ready(queue=queue)
    if selectors.queue_ready_count(queue=queue) >= limit:
        raise QueueFull(
            f"queue {queue!r} holds its maximum of {limit} ready jobs",
            retry_after=settings.JOBS_BACKPRESSURE_RETRY_AFTER,
        )

    policy = policy_for(kind)
    now = timezone.now()
    try:
        with transaction.atomic():
            job = Job.objects.create(
                kind=kind,
                queue=queue,
                priority=priority,
                payload=validated,
                status=JobStatus.QUEUED,
                max_attempts=policy.max_attempts,
                idempotency_key=idempotency_key or None,
                request_fingerprint=fingerprint,
                enqueued_at=now,
                created_by=user if getattr(user, "is_authenticated", False) else None,
                trace_parent=tracing.current_traceparent(),
            )
            transaction.on_commit(lambda: job_publish(job_id=job.id))
            transaction.on_commit(lambda: events.job_submitted.send(sender=Job, job=job))
    except IntegrityError:
        # Lost a race with a concurrent submission of the same key.
        existing = Job.objects.filter(kind=kind, idempotency_key=idempotency_key).first()
        if idempotency_key and existing is not None:
            return _idempotent_match(existing, fingerprint)
        raise
    logger.info(
        "job submitted job_id=%s kind=%s queue=%s trace_id=%s",
        job.id,
        kind,
        queue,
        tracing.trace_id_from(job.trace_parent),
    )
    return SubmitResult(job=job, created=True)


def _idempotent_match(existing: Job, fingerprint: str) -> SubmitResult:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"idempotency key already used for job {existing.id} with a different request"
        )
    return SubmitResult(job=existing, created=False)


def job_publish(*, job_id: uuid.UUID) -> bool:
    """Publish the message that starts the job's next attempt; record `published_at`.

    Returns False (and logs) when the job is not waiting for a publish or the
    broker refused; the outbox sweep tries again later. Never raises for a
    broker outage.
    """
    from jobs.tasks import run_attempt_task

    job = (
        Job.objects.filter(id=job_id, status=JobStatus.QUEUED)
        .only("kind", "queue", "priority", "attempts_made", "trace_parent")
        .first()
    )
    if job is None:
        return False
    attempt = job.attempts_made + 1
    policy = policy_for(job.kind)
    try:
        # In the submitting request's trace, whoever publishes (API or scheduler).
        with tracing.in_trace(job.trace_parent):
            run_attempt_task.apply_async(
                args=[str(job.id), attempt],
                queue=job.queue,
                priority=job.priority,
                task_id=f"{job.id}:{attempt}",
                soft_time_limit=policy.soft_time_limit,
                time_limit=policy.hard_time_limit,
                retry=False,
            )
    except Exception as exc:  # kombu/redis raise many types for one outage
        logger.warning(
            "publish failed job_id=%s attempt=%s: %s: %s", job.id, attempt, type(exc).__name__, exc
        )
        return False
    # Only stamp the attempt we published: a later attempt waiting for its own
    # publish must keep published_at NULL so the sweep still sees it.
    Job.objects.filter(id=job.id, published_at__isnull=True).filter(
        Q(status=JobStatus.QUEUED, attempts_made=attempt - 1)
        | (Q(attempts_made=attempt) & ~Q(status=JobStatus.QUEUED))
    ).update(published_at=timezone.now())
    return True
