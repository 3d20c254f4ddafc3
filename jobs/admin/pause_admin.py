"""Admin for pauses: the list of paused kinds and queues, pause (add), resume (delete, action).

Every change goes through jobs.pauses, so it is in the History (LogEntry) and
takes effect as the API's and the command's do. The job list's actions
"Pause the kinds / queues of the selected jobs" call `pause_selected`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from jobs import pauses
from jobs.admin.toggle_form import ToggleForm
from jobs.errors import JobsError
from jobs.models import Pause
from jobs.reasons import PauseScope


class PauseForm(ToggleForm):
    """Refuses an unknown kind or queue, and what is paused already, with one readable line."""

    class Meta:
        model = Pause
        fields = ("scope", "name", "reason")

    exists_message = "That kind or queue is paused already."

    def check(self, data: dict[str, Any]) -> None:
        scope = pauses.pause_scope(str(data.get("scope", "")))
        pauses.pause_name_check(scope=scope, name=str(data.get("name", "")))


@admin.register(Pause)
class PauseAdmin(admin.ModelAdmin):
    form = PauseForm
    list_display = ("scope", "name", "paused_at", "paused_by", "reason")
    fields = ("scope", "name", "reason")
    actions = ["resume_action"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Pause, form: Any, change: bool) -> None:
        # The form checked the input; the admin logs the addition itself (log_addition).
        row, _ = pauses.pause(scope=obj.scope, name=obj.name, reason=obj.reason, via="admin")
        if row.paused_by_id is None:
            Pause.objects.filter(pk=row.pk).update(paused_by=request.user)
        obj.pk, obj.paused_at, obj.paused_by_id = row.pk, row.paused_at, request.user.pk

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return super().log_addition(request, obj, "Paused via admin.")

    def delete_model(self, request: HttpRequest, obj: Pause) -> None:
        _resume(request, [obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        _resume(request, list(queryset))

    @admin.action(description="Resume selected (their held jobs start at the next tick)")
    def resume_action(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        done = _resume(request, list(queryset), actor=request.user)
        if done:
            messages.info(request, f"Resumed: {', '.join(done)}.")


def _resume(request: HttpRequest, rows: list[Pause], *, actor: Any = None) -> list[str]:
    """Resume each row; returns "scope name" of those resumed (a refusal is a warning)."""
    # The admin's own delete logs the deletion; the action logs through the service.
    done = []
    for row in rows:
        try:
            pauses.resume(scope=row.scope, name=row.name, actor=actor, via="admin")
        except JobsError as exc:
            messages.warning(request, str(exc))
            continue
        done.append(f"{row.scope} {row.name}")
    return done


def pause_selected(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: Any, *, scope: PauseScope
) -> None:
    """Pause each distinct kind (or queue) of the selected jobs, by the admin's user."""
    field = "kind" if scope == PauseScope.KIND else "queue"
    names = sorted(set(queryset.values_list(field, flat=True)))
    done = []
    for name in names:
        try:
            _, created = pauses.pause(scope=scope, name=name, actor=request.user, via="admin")
        except JobsError as exc:
            modeladmin.message_user(request, str(exc), messages.ERROR)
            continue
        done.append(f"{name}{'' if created else ' (already paused)'}")
    if done:
        modeladmin.message_user(request, f"Paused {scope.value}: {', '.join(done)}.")
