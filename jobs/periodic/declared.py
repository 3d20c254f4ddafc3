"""Schedules declared in code: the platform's defaults and settings JOBS_SCHEDULES, synced to rows.

An entry is `{name: spec}`; a spec names its target with `kind` (and
`payload`) or `task` (a Django `@task`'s dotted path, with `args` and
`kwargs`), its timing with `cron` (and `timezone`, default UTC) or `every`
(whole seconds), and optionally `queue`, `missed` ("skip" or "catch_up"),
`overlap` ("skip" or "allow"), `jitter` (seconds) and `enabled`. A settings
entry with the name of a default is merged over it (`{"jobs.prune":
{"enabled": false}}` turns a default off). The leader writes them to
Schedule rows (source `code`, read-only in the admin) when it takes the
lease; a code row no longer declared is disabled, never deleted (its ticks
stay in its history).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from jobs.periodic.models import MissedPolicy, OverlapPolicy, Schedule, ScheduleSource
from jobs.periodic.timing import InvalidTiming, Timing

logger = logging.getLogger(__name__)

# The platform's own schedules, declared by the modules that own them (e.g. the
# prune command's kind adds `"jobs.prune": {"kind": "jobs.prune", "cron": "17 3 * * *"}`).
# Shipped with the platform; JOBS_SCHEDULES may move or disable them
# (e.g. '{"jobs.prune": {"enabled": false}}').
DEFAULT_SCHEDULES: dict[str, dict[str, Any]] = {
    # Retention (jobs.retention, docs/retention.md): hourly, never two at once,
    # a missed hour skipped (the next run prunes what it would have).
    "jobs.prune": {
        "kind": "jobs.prune",
        "payload": {},
        "cron": "17 * * * *",
        "missed": "skip",
        "overlap": "skip",
    },
}

SPEC_KEYS = frozenset(
    {
        "kind",
        "task",
        "payload",
        "args",
        "kwargs",
        "cron",
        "timezone",
        "every",
        "queue",
        "missed",
        "overlap",
        "jitter",
        "enabled",
    }
)


class InvalidSchedule(ValueError):
    """A declared schedule that cannot be used (one readable line naming it)."""


def declared_schedules() -> dict[str, dict[str, Any]]:
    """DEFAULT_SCHEDULES with settings.JOBS_SCHEDULES merged over them, entry by entry."""
    merged = {name: dict(spec) for name, spec in DEFAULT_SCHEDULES.items()}
    for name, spec in (settings.JOBS_SCHEDULES or {}).items():
        merged[name] = {**merged.get(name, {}), **dict(spec)}
    return merged


def schedule_fields(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The Schedule fields of a declared spec. Raises InvalidSchedule (kind unchecked here)."""
    if not isinstance(spec, Mapping):
        raise InvalidSchedule(f"schedule {name!r}: must be a mapping")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise InvalidSchedule(f"schedule {name!r}: unknown keys {sorted(unknown)}")
    if ("kind" in spec) == ("task" in spec):
        raise InvalidSchedule(f"schedule {name!r}: give exactly one of 'kind' and 'task'")
    if "task" in spec:
        kind = spec["task"]
        payload: Any = {"args": list(spec.get("args", [])), "kwargs": dict(spec.get("kwargs", {}))}
    else:
        kind, payload = spec["kind"], spec.get("payload", {})
    every = spec.get("every")
    timing = Timing(
        cron=spec.get("cron", ""),
        interval_seconds=every,
        timezone=spec.get("timezone", "UTC"),
    )
    try:
        timing.validate()
    except InvalidTiming as exc:
        raise InvalidSchedule(f"schedule {name!r}: {exc}") from None
    missed = spec.get("missed", MissedPolicy.CATCH_UP)
    overlap = spec.get("overlap", OverlapPolicy.SKIP)
    if missed not in MissedPolicy.values:
        raise InvalidSchedule(f"schedule {name!r}: missed must be one of {MissedPolicy.values}")
    if overlap not in OverlapPolicy.values:
        raise InvalidSchedule(f"schedule {name!r}: overlap must be one of {OverlapPolicy.values}")
    jitter = spec.get("jitter", 0)
    if not isinstance(jitter, int) or jitter < 0:
        raise InvalidSchedule(f"schedule {name!r}: jitter must be whole seconds >= 0")
    return {
        "kind": kind,
        "payload": payload,
        "queue": spec.get("queue", ""),
        "cron": timing.cron,
        "interval_seconds": timing.interval_seconds,
        "timezone": timing.timezone,
        "missed_policy": missed,
        "overlap_policy": overlap,
        "jitter_seconds": jitter,
        "enabled": bool(spec.get("enabled", True)),
    }


# Fields whose change moves the next tick (recomputed from now at the next pass).
TIMING_FIELDS = ("cron", "interval_seconds", "timezone", "enabled", "jitter_seconds")


def schedules_sync() -> int:
    """Write the declared schedules to rows (create, update, disable the undeclared); returns
    how many rows changed. Raises InvalidSchedule (nothing written) and the database's errors."""
    wanted = {name: schedule_fields(name, spec) for name, spec in declared_schedules().items()}
    changed = 0
    with transaction.atomic():
        rows = {s.name: s for s in Schedule.objects.select_for_update().filter(name__in=wanted)}
        for name, fields in wanted.items():
            row = rows.get(name)
            if row is None:
                Schedule.objects.create(name=name, source=ScheduleSource.CODE, **fields)
                changed += 1
                continue
            diff = {k: v for k, v in fields.items() if getattr(row, k) != v}
            if row.source != ScheduleSource.CODE:
                logger.warning("schedule %s is declared in code: the admin's row is replaced", name)
                diff["source"] = ScheduleSource.CODE
            if not diff:
                continue
            if any(k in TIMING_FIELDS for k in diff):
                diff.update(next_tick_at=None, next_run_at=None)
            Schedule.objects.filter(pk=row.pk).update(**diff)
            changed += 1
        changed += (
            Schedule.objects.filter(source=ScheduleSource.CODE, enabled=True)
            .exclude(name__in=wanted)
            .update(enabled=False, next_tick_at=None, next_run_at=None)
        )
    return changed
