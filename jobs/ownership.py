"""Who may see and act on which job: the one rule the API (and any Python API) applies.

A job belongs to its submitter (`Job.created_by`). With
JOBS_JOB_VISIBILITY "owner" (the default) a user sees, and cancels,
requeues or retries, only the jobs they submitted; an active staff user
with `jobs.view_job` sees every job, and one with `jobs.change_job` acts on
every job, as in the admin. With "shared" every authenticated user sees and
acts on every job (one namespace for a deployment whose users are one team).
A job the user may not see does not exist for them: callers answer as for a
missing id (404 in the API), never "forbidden", so no response confirms
that another user's job id exists. Idempotency keys stay per submitter in
both modes (jobs.services.submission).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet, TextChoices

from jobs.models import Job

VIEW_ALL_PERMISSION = "jobs.view_job"
CHANGE_ALL_PERMISSION = "jobs.change_job"


class Visibility(TextChoices):
    """Values of JOBS_JOB_VISIBILITY."""

    OWNER = "owner"
    SHARED = "shared"


def _authenticated(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_active", False))


def _shared() -> bool:
    return settings.JOBS_JOB_VISIBILITY == Visibility.SHARED


def _staff_with(user: Any, permission: str) -> bool:
    return _authenticated(user) and user.is_staff and user.has_perm(permission)


def sees_all_jobs(user: Any) -> bool:
    """Whether `user` sees every job, not only their own."""
    return _authenticated(user) and (_shared() or _staff_with(user, VIEW_ALL_PERMISSION))


def acts_on_all_jobs(user: Any) -> bool:
    """Whether `user` may cancel, requeue or retry every job they see, not only their own."""
    return _authenticated(user) and (_shared() or _staff_with(user, CHANGE_ALL_PERMISSION))


def visible_jobs(queryset: QuerySet[Job], *, user: Any) -> QuerySet[Job]:
    """`queryset` narrowed to the jobs `user` may see (none for an anonymous user)."""
    if not _authenticated(user):
        return queryset.none()
    if sees_all_jobs(user):
        return queryset
    return queryset.filter(Q(created_by_id=user.pk))


def is_owner(job: Job, *, user: Any) -> bool:
    """Whether `user` submitted `job` (a job without a submitter belongs to nobody)."""
    return _authenticated(user) and job.created_by_id is not None and job.created_by_id == user.pk


def may_act_on(job: Job, *, user: Any) -> bool:
    """Whether `user` may cancel, requeue or retry `job` (one they can see)."""
    return is_owner(job, user=user) or acts_on_all_jobs(user)
