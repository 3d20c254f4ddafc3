"""System check jobs.E031: schedules declared in code (JOBS_SCHEDULES and the defaults) are valid.

A declared schedule with an unknown kind or task, a bad cron expression,
time zone, interval or policy refuses to start every process, with one
line naming the schedule (config.startup).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from jobs.kinds import UnknownKind, get_kind
from jobs.periodic.declared import InvalidSchedule, declared_schedules, schedule_fields


@register()
def check_declared_schedules(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Every declared schedule converts to a Schedule row and names a registered kind."""
    errors: list[CheckMessage] = []
    try:
        declared = declared_schedules()
    except (TypeError, ValueError, AttributeError) as exc:
        return [Error(f"JOBS_SCHEDULES must map names to objects: {exc}", id="jobs.E031")]
    for name, spec in declared.items():
        try:
            fields = schedule_fields(name, spec)
            get_kind(fields["kind"])
        except InvalidSchedule as exc:
            errors.append(Error(str(exc), id="jobs.E031"))
        except UnknownKind as exc:
            errors.append(Error(f"schedule {name!r}: {exc}", id="jobs.E031"))
    return errors
