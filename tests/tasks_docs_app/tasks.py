"""The task definitions and signal receiver of Django's "Django's Tasks framework" topic guide.

Copied as the documentation writes them; only the import line picks the
backport on Django 5.2. The receiver also appends what it saw to the file
named by TASKS_DOCS_SIGNAL_LOG, so the test sees the signals the worker sent.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

from django.core.mail import send_mail
from django.dispatch import receiver

if TYPE_CHECKING:
    from django_tasks import task
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import task
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:  # Django 5.2: the backport
        from django_tasks import task
        from django_tasks.signals import task_enqueued, task_finished, task_started

logger = logging.getLogger(__name__)


@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(priority=2, queue_name="emails")
def email_users_prioritised(emails: list[str], subject: str, message: str) -> int:
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True)
def email_users_with_context(
    context: Any, emails: list[str], subject: str, message: str
) -> dict[str, Any]:
    logger.debug(
        f"Attempt {context.attempt} to send user email. Task result id: {context.task_result.id}."
    )
    sent = send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)
    return {"sent": sent, "attempt": context.attempt, "id": context.task_result.id}


@receiver(task_enqueued)
@receiver(task_started)
@receiver(task_finished)
def log_task_signal(sender: Any, task_result: Any, **kwargs: Any) -> None:
    logger.info("Task %s is %s", task_result.id, task_result.status)
    path = os.environ.get("TASKS_DOCS_SIGNAL_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps([os.getpid(), task_result.id, str(task_result.status)]) + "\n")
