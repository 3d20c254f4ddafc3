"""Who did what to a job: admin `LogEntry` rows, so the job's History page shows every action.

Written by the lifecycle services in the same transaction as the change
they describe, whichever door the action came through (admin page, admin
list, a background bulk job or the API).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

from jobs.models import Job


def job_action_record(*, job: Job, actor: Any, message: str) -> LogEntry | None:
    """Add a CHANGE entry to `job`'s admin History, by `actor`, saying `message`.

    `actor` is a django.contrib.auth user; None or an anonymous user records
    nothing (returns None): LogEntry needs a user, and an unauthenticated
    caller cannot reach a lifecycle service anyway. `message` is shown as is
    (at most 1,000 characters are kept).
    """
    if actor is None or not getattr(actor, "is_authenticated", False):
        return None
    return LogEntry.objects.create(
        user_id=actor.pk,
        # get_for_model is cached per process: no query after the first call.
        content_type=ContentType.objects.get_for_model(Job),
        object_id=str(job.pk),
        object_repr=str(job)[:200],
        action_flag=CHANGE,
        change_message=message[:1000],
    )
