"""Pause and resume per kind and per queue: the service and its reads (docs/flow-control.md).

A pause is one `Pause` row per (scope, name). While it exists no attempt of
the kind (or queue) starts: the start checks it (jobs.engine.pausing), a
delivery that arrives goes back to wait in the database as `queued` with
waiting reason `paused`, and the scheduler leader publishes nothing of it.
The resume deletes the row; the leader publishes the held jobs at its next
tick. Cancel works as ever. Every pause and resume is in the admin History
(a LogEntry on the Pause row) when an actor is given.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import IntegrityError, transaction

from jobs import clock
from jobs.errors import JobsError, PauseNotFound
from jobs.kinds import kind_names
from jobs.models import Pause
from jobs.reasons import PauseScope

logger = logging.getLogger(__name__)


def pause_scope(value: str) -> PauseScope:
    """`value` as a PauseScope; raises JobsError (field "scope") for anything else."""
    try:
        return PauseScope(value)
    except ValueError:
        choices = ", ".join(s.value for s in PauseScope)
        raise JobsError(f"scope must be one of {choices}, not {value!r}", field="scope") from None


def pause_name_check(*, scope: PauseScope, name: str) -> None:
    """Raise JobsError (field "name") unless `name` is a registered kind / a configured queue."""
    known = kind_names() if scope == PauseScope.KIND else list(settings.JOBS_QUEUES)
    if name not in known:
        raise JobsError(
            f"no {scope.value} named {name!r}; known: {', '.join(sorted(known))}", field="name"
        )


def pause(
    *, scope: str, name: str, actor: Any = None, reason: str = "", via: str = "API"
) -> tuple[Pause, bool]:
    """Pause kind or queue `name`; returns (the Pause row, True when it was paused just now).

    Pausing what is paused already changes nothing (False). Raises JobsError
    for an unknown scope or name.
    """
    kind = pause_scope(scope)
    pause_name_check(scope=kind, name=name)
    existing = Pause.objects.filter(scope=kind, name=name).first()
    if existing is not None:
        return existing, False
    user = actor if getattr(actor, "is_authenticated", False) else None
    try:
        with transaction.atomic():
            row = Pause.objects.create(
                scope=kind, name=name, paused_at=clock.now(), paused_by=user, reason=reason[:300]
            )
            _history(row, actor=user, flag=ADDITION, message=f"Paused via {via}: {reason}".strip())
    except IntegrityError:  # paused by someone else a moment ago
        return Pause.objects.get(scope=kind, name=name), False
    logger.warning("paused %s %s via %s: %s", kind.value, name, via, reason or "(no reason)")
    return row, True


def resume(*, scope: str, name: str, actor: Any = None, via: str = "API") -> Pause:
    """Resume kind or queue `name`: its held jobs are published at the leader's next tick.

    Returns the deleted Pause row. Raises JobsError for an unknown scope,
    PauseNotFound when it is not paused.
    """
    kind = pause_scope(scope)
    with transaction.atomic():
        row = Pause.objects.select_for_update().filter(scope=kind, name=name).first()
        if row is None:
            raise PauseNotFound(f"{kind.value} {name!r} is not paused")
        user = actor if getattr(actor, "is_authenticated", False) else None
        _history(row, actor=user, flag=DELETION, message=f"Resumed via {via}.")
        row_id = row.pk
        row.delete()
        row.pk = row_id
    logger.warning("resumed %s %s via %s", kind.value, name, via)
    return row


def pauses_active() -> list[Pause]:
    """Every pause now, oldest first."""
    return list(Pause.objects.select_related("paused_by").order_by("paused_at", "id"))


def pause_for(*, kind: str, queue: str) -> Pause | None:
    """The pause that stops a job of `kind` on `queue` now (the kind's first), or None."""
    rows = {
        (row.scope, row.name): row
        for row in Pause.objects.filter(scope=PauseScope.KIND, name=kind)
        | Pause.objects.filter(scope=PauseScope.QUEUE, name=queue)
    }
    return rows.get((PauseScope.KIND, kind)) or rows.get((PauseScope.QUEUE, queue))


def _history(row: Pause, *, actor: Any, flag: int, message: str) -> None:
    if actor is None:
        return
    LogEntry.objects.create(
        user_id=actor.pk,
        content_type=ContentType.objects.get_for_model(Pause),
        object_id=str(row.pk),
        object_repr=str(row)[:200],
        action_flag=flag,
        change_message=message[:1000],
    )
