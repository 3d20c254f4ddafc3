"""System checks: configuration that would silently run attempts twice or never."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register()
def check_visibility_timeout(app_configs: Any, **kwargs: Any) -> list[Error]:
    """The Redis visibility timeout must exceed every kind's hard time limit (kombu issue 337)."""
    from jobs.kinds import kind_names, policy_for

    errors = []
    for name in kind_names():
        hard = policy_for(name).hard_time_limit
        if hard >= settings.JOBS_VISIBILITY_TIMEOUT:
            errors.append(
                Error(
                    f"kind {name!r} has hard_time_limit {hard}s >= JOBS_VISIBILITY_TIMEOUT "
                    f"{settings.JOBS_VISIBILITY_TIMEOUT}s: a slow attempt would be redelivered while running",
                    id="jobs.E001",
                )
            )
    return errors
