"""Signal receivers of the jobs app (connected in JobsConfig.ready)."""

from __future__ import annotations

from typing import Any

from celery import signals as celery_signals
from django.conf import settings
from django.db.models.signals import pre_delete
from django.dispatch import receiver

from jobs import budget_pg, state_store
from jobs.models import Job


@receiver(pre_delete, sender=settings.AUTH_USER_MODEL, dispatch_uid="jobs.release_keys")
def release_idempotency_keys(sender: Any, instance: Any, **kwargs: Any) -> None:
    """Clear the idempotency keys of a user's jobs before the user is deleted.

    Deleting a user sets their jobs' `created_by` to NULL, which would move
    their keys into the namespace of jobs without a submitter and could
    collide there (jobs.models.Job.Meta.constraints). Nobody can resubmit as
    a deleted user, so their keys have nothing left to deduplicate.
    """
    Job.objects.filter(created_by_id=instance.pk, idempotency_key__isnull=False).update(
        idempotency_key=None
    )


@celery_signals.worker_process_shutdown.connect(dispatch_uid="jobs.budget_flush")
def flush_retry_budget_counts(**_: Any) -> None:
    """Write a worker child's first-attempt counts not yet written (PostgreSQL state store)."""
    if state_store.uses_postgres():
        budget_pg.flush()
