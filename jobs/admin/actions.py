"""Admin actions over jobs: retry now, cancel, requeue, each through the lifecycle services.

Bounded per request: up to JOBS_ADMIN_ACTION_INLINE eligible jobs are
changed in the request (one short transaction each); a larger selection,
up to JOBS_ADMIN_ACTION_MAX, is split into background jobs of kind
`admin.bulk_action` (jobs.kinds.bulk) of JOBS_ADMIN_ACTION_BATCH ids, run
by the workers with the same user as the actor. Every changed job gets a
LogEntry in its History (jobs.services.audit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from jobs import services
from jobs.errors import InvalidTransition, JobsError
from jobs.kinds import bulk
from jobs.models import Job, JobStatus


@dataclass(frozen=True)
class ActionSpec:
    """One admin action: the service it calls and the statuses it applies to."""

    name: str
    label: str
    statuses: tuple[str, ...]
    service: Callable[..., Job]
    help: str


ACTIONS: dict[str, ActionSpec] = {
    "retry_now": ActionSpec(
        "retry_now",
        "Retry now",
        (JobStatus.RETRYING, JobStatus.DEAD),
        services.job_retry_now,
        "Run the next attempt now: a retrying job skips the rest of its backoff; a dead job "
        "is requeued (as below).",
    ),
    "requeue": ActionSpec(
        "requeue",
        "Requeue",
        (JobStatus.DEAD,),
        services.job_requeue,
        "Queue this dead job again with the attempts it has left, and at least one: a job that "
        "used all its attempts gets exactly one more (max attempts +1); if that fails it is dead "
        "again. The poison count starts again.",
    ),
    "cancel": ActionSpec(
        "cancel",
        "Cancel",
        (JobStatus.QUEUED, JobStatus.DELAYED, JobStatus.RUNNING, JobStatus.RETRYING),
        services.job_cancel,
        "Stop the job: a queued, delayed or retrying job never runs again; a running attempt is asked "
        "to stop and aborted if it ignores that.",
    ),
}


@dataclass
class ActionOutcome:
    """What one admin action did: jobs changed now, skipped, and background jobs submitted."""

    action: str
    done: int = 0
    skipped: int = 0
    background_jobs: list[str] = field(default_factory=list)
    background_ids: int = 0
    refused: str = ""

    def summary(self) -> str:
        spec = ACTIONS[self.action]
        if self.refused:
            return self.refused
        parts = []
        if self.done:
            parts.append(f"{spec.label}: {self.done} job(s) changed.")
        if self.background_jobs:
            parts.append(
                f"{spec.label}: {self.background_ids} job(s) handed to "
                f"{len(self.background_jobs)} background job(s) of kind admin.bulk_action."
            )
        if self.skipped:
            parts.append(
                f"{self.skipped} selected job(s) skipped: their status does not allow "
                f"{spec.label.lower()} ({', '.join(spec.statuses)} only)."
            )
        return " ".join(parts) or f"{spec.label}: nothing to do."


def actions_for(job: Job) -> list[ActionSpec]:
    """The actions the job's current status allows (the job page's buttons)."""
    return [spec for spec in ACTIONS.values() if job.status in spec.statuses]


def run_one(*, action: str, job_id: Any, user: Any) -> Job:
    """Apply `action` to one job as `user`. Raises Job.DoesNotExist or InvalidTransition."""
    return ACTIONS[action].service(job_id=job_id, actor=user, via="admin")


def run_on_selection(*, action: str, queryset: QuerySet[Job], user: Any) -> ActionOutcome:
    """Apply `action` to the eligible jobs of `queryset` as `user` (module docstring).

    Selections over JOBS_ADMIN_ACTION_MAX eligible jobs are refused whole
    (narrow the filter). Never raises for a job's status; a full queue for
    the background jobs is reported in `refused`.
    """
    spec = ACTIONS[action]
    outcome = ActionOutcome(action=action)
    limit = settings.JOBS_ADMIN_ACTION_MAX
    ids = list(
        queryset.filter(status__in=spec.statuses)
        .order_by()
        .values_list("id", flat=True)[: limit + 1]
    )
    if len(ids) > limit:
        outcome.refused = (
            f"{spec.label}: more than {limit} eligible jobs selected; narrow the filter "
            "(JOBS_ADMIN_ACTION_MAX)."
        )
        return outcome
    selected = queryset.count() if len(ids) <= settings.JOBS_ADMIN_ACTION_INLINE else None
    if len(ids) <= settings.JOBS_ADMIN_ACTION_INLINE:
        for job_id in ids:
            try:
                spec.service(job_id=job_id, actor=user, via="admin")
                outcome.done += 1
            except (InvalidTransition, Job.DoesNotExist):  # moved on since the page was drawn
                outcome.skipped += 1
        outcome.skipped += (selected or 0) - len(ids)
        return outcome
    batch = min(settings.JOBS_ADMIN_ACTION_BATCH, bulk.MAX_IDS)
    for start in range(0, len(ids), batch):
        chunk = [str(i) for i in ids[start : start + batch]]
        try:
            result = services.job_submit(
                kind="admin.bulk_action",
                payload={"action": action, "job_ids": chunk},
                user=user,
            )
        except JobsError as exc:
            outcome.refused = (
                f"{spec.label}: {outcome.background_ids} job(s) handed to background jobs, "
                f"then the submission failed: {exc}"
            )
            return outcome
        outcome.background_jobs.append(str(result.job.pk))
        outcome.background_ids += len(chunk)
    return outcome
