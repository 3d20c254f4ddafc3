"""Django tasks of the example app: plain `@task` functions, run as platform jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.utils.text import slugify

if TYPE_CHECKING:
    from django_tasks import task
else:
    try:  # Django 6.x
        from django.tasks import task
    except ImportError:  # Django 5.2: the django-tasks backport
        from django_tasks import task


@task(policy={"max_attempts": 5, "soft_time_limit": 10, "hard_time_limit": 15})
def send_welcome(user_id: int) -> int:
    """Mail a welcome to user `user_id`; SMTP errors are retried with backoff by the platform."""
    user = get_user_model().objects.get(pk=user_id)
    return send_mail(
        subject="Welcome",
        message=f"Hello {user.get_username()}!",
        from_email=None,
        recipient_list=[user.email or "nobody@example.com"],
    )


@task(takes_context=True)
def slugify_titles(context: Any, titles: list[str]) -> dict[str, Any]:
    """Turn titles into slugs, reporting progress; says which attempt did it."""
    slugs = []
    for done, title in enumerate(titles, 1):
        slugs.append(slugify(title))
        context.job.progress(done, len(titles), f"{done} of {len(titles)} titles")
    return {"slugs": slugs, "attempt": context.attempt}
