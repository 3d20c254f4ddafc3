"""System checks of the security settings (config/settings/security.py).

A process refuses to start on any of these (config.startup), rather than
run with a rule nobody chose:

- jobs.E010: JOBS_JOB_VISIBILITY is neither "owner" nor "shared".
- jobs.E011: an API rate (JOBS_API_RATE_PER_TOKEN, JOBS_API_RATE_PER_ADDRESS,
  JOBS_API_AUTH_FAILURE_RATE) is not "N/s", "N/m", "N/h", "N/d" (N >= 1) or "off".
- jobs.E012: JOBS_TRUSTED_PROXY_COUNT is negative, or a login-lockout setting
  (JOBS_ADMIN_LOGIN_FAILURE_LIMIT, JOBS_ADMIN_LOGIN_COOLOFF_SECONDS) is below 1.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from jobs.ownership import Visibility

RATE = re.compile(r"^[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)$")
RATE_SETTINGS = {
    "token": "JOBS_API_RATE_PER_TOKEN",
    "address": "JOBS_API_RATE_PER_ADDRESS",
    "auth_failure": "JOBS_API_AUTH_FAILURE_RATE",
}


@register()
def check_job_visibility(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_JOB_VISIBILITY names one of jobs.ownership.Visibility."""
    value = settings.JOBS_JOB_VISIBILITY
    if value in Visibility.values:
        return []
    return [
        Error(
            f"JOBS_JOB_VISIBILITY is {value!r}; it must be one of {', '.join(Visibility.values)}",
            hint="owner: each user sees their own jobs (staff with permissions see all); "
            "shared: every authenticated user sees and acts on every job",
            id="jobs.E010",
        )
    ]


@register()
def check_api_rates(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Each throttle rate parses the way DRF will parse it, or is off (None)."""
    framework: Any = settings.REST_FRAMEWORK
    rates = framework.get("DEFAULT_THROTTLE_RATES", {})
    messages: list[CheckMessage] = []
    for scope, name in RATE_SETTINGS.items():
        rate = rates.get(scope)
        if rate is not None and not RATE.match(str(rate)):
            messages.append(
                Error(
                    f"{name} is {rate!r}; it must be a number of requests per period, "
                    "e.g. 50/s, 600/m, 1000/h, or off",
                    id="jobs.E011",
                )
            )
    return messages


@register()
def check_proxies_and_lockout(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """A proxy count of 0 or more; a lockout after at least one failure, for at least 1 s."""
    messages: list[CheckMessage] = []
    if settings.JOBS_TRUSTED_PROXY_COUNT < 0:
        messages.append(
            Error(
                f"JOBS_TRUSTED_PROXY_COUNT is {settings.JOBS_TRUSTED_PROXY_COUNT}; it counts the "
                "reverse proxies in front of gunicorn (0 or more)",
                id="jobs.E012",
            )
        )
    if settings.AXES_FAILURE_LIMIT < 1 or settings.AXES_COOLOFF_TIME.total_seconds() < 1:
        messages.append(
            Error(
                "JOBS_ADMIN_LOGIN_FAILURE_LIMIT and JOBS_ADMIN_LOGIN_COOLOFF_SECONDS must be "
                "1 or more",
                id="jobs.E012",
            )
        )
    return messages
