"""Cancel, requeue and retry-now on behalf of a user: the ownership rule, then the lifecycle.

The callers that act for a person (the API, a Python API) use these, not
jobs.services.lifecycle directly. A job the user may not see raises
JobNotFound, exactly as a missing id does; one they see but may not change
(a staff user with `jobs.view_job` only, on someone else's job) raises
ActionNotPermitted. The rule itself is jobs.ownership.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from jobs import ownership, selectors
from jobs.errors import ActionNotPermitted, JobNotFound
from jobs.models import Job
from jobs.services.lifecycle import job_cancel, job_requeue, job_retry_now


def _act(
    service: Callable[..., Job], *, user: Any, job_id: uuid.UUID | str, via: str, verb: str
) -> Job:
    job = selectors.job_get_for(user=user, job_id=job_id)
    if job is None:
        raise JobNotFound()
    if not ownership.may_act_on(job, user=user):
        raise ActionNotPermitted(
            f"you may see this job but not {verb} it: it is another user's job and you lack "
            f"the {ownership.CHANGE_ALL_PERMISSION} permission"
        )
    try:
        return service(job_id=job.id, actor=user, via=via)
    except Job.DoesNotExist:  # deleted since it was read
        raise JobNotFound() from None


def job_cancel_for(*, user: Any, job_id: uuid.UUID | str, via: str = "API") -> Job:
    """job_cancel for `user`. Raises JobNotFound, ActionNotPermitted or InvalidTransition."""
    return _act(job_cancel, user=user, job_id=job_id, via=via, verb="cancel")


def job_requeue_for(*, user: Any, job_id: uuid.UUID | str, via: str = "API") -> Job:
    """job_requeue for `user`. Raises JobNotFound, ActionNotPermitted or InvalidTransition."""
    return _act(job_requeue, user=user, job_id=job_id, via=via, verb="requeue")


def job_retry_now_for(*, user: Any, job_id: uuid.UUID | str, via: str = "API") -> Job:
    """job_retry_now for `user`. Raises JobNotFound, ActionNotPermitted or InvalidTransition."""
    return _act(job_retry_now, user=user, job_id=job_id, via=via, verb="retry")
