"""`admin.bulk_action`: an admin action over a large selection, run as a job of its own.

The admin changes at most JOBS_ADMIN_ACTION_INLINE jobs inside a request;
a larger selection is split into jobs of this kind (JOBS_ADMIN_ACTION_BATCH
ids each), submitted by the admin user. Each runs the same lifecycle service
per id with that user as the actor, so every job's History names the person
who asked, and the bulk job's own page shows how it went.

The actor is the user who submitted the bulk job (`Job.created_by`), never
a payload field, and must still be an active staff user with the change
permission when it runs: a token holder without it cannot use this kind to
act on other jobs.
"""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework import serializers

from jobs import selectors, services
from jobs.errors import InvalidTransition
from jobs.kinds.base import AttemptContext, Kind, PermanentError
from jobs.kinds.registry import register
from jobs.models import Job
from jobs.policy import Policy

BULK_ACTIONS = ("cancel", "requeue", "retry_now")
MAX_IDS = 1000


class JobIdField(serializers.CharField):
    """A job id, kept as its canonical string (the payload is stored as JSON)."""

    def to_internal_value(self, data: Any) -> str:
        try:
            return str(uuid.UUID(str(data)))
        except ValueError:
            raise serializers.ValidationError("Not a job id (UUID).") from None


class BulkPayload(serializers.Serializer):
    action = serializers.ChoiceField(choices=BULK_ACTIONS)
    job_ids = serializers.ListField(child=JobIdField(), min_length=1, max_length=MAX_IDS)


@register
class BulkAction(Kind):
    name = "admin.bulk_action"
    payload_serializer = BulkPayload
    # Re-running is safe: a job already moved is skipped (InvalidTransition).
    policy = Policy(max_attempts=3, soft_time_limit=120, hard_time_limit=180)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        actor = selectors.job_creator(job_id=ctx.job_id)
        if actor is None or not (
            actor.is_active and actor.is_staff and actor.has_perm("jobs.change_job")
        ):
            raise PermanentError(
                "admin.bulk_action must be submitted by an active staff user with jobs.change_job"
            )
        service = {
            "cancel": services.job_cancel,
            "requeue": services.job_requeue,
            "retry_now": services.job_retry_now,
        }[payload["action"]]
        done, skipped, missing = 0, 0, 0
        total = len(payload["job_ids"])
        for index, job_id in enumerate(payload["job_ids"]):
            ctx.raise_if_cancelled()
            ctx.progress(index, total, f"{payload['action']}: {index} of {total} jobs")
            try:
                service(job_id=job_id, actor=actor, via=f"admin (bulk job {ctx.job_id})")
                done += 1
            except InvalidTransition:
                skipped += 1
            except Job.DoesNotExist:
                missing += 1
        ctx.progress(total, total, f"{payload['action']}: {total} of {total} jobs")
        return {"action": payload["action"], "done": done, "skipped": skipped, "missing": missing}
