"""Admin for fuses: the list of fuses with their state, and the actions trip and reset.

Every change goes through jobs.services.fuse_ops, so it is in the History
(LogEntry, naming the admin's user) and takes effect as the API's and the
command's do. A fuse row is created by its kind's first counted attempt, or
by "Add" (a kind with a fuse, a destination host or "*"), which trips it.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from jobs import services
from jobs.admin.toggle_form import ToggleForm
from jobs.errors import JobsError
from jobs.fuse_model import Fuse
from jobs.services.fuse_ops import fuse_config


class FuseForm(ToggleForm):
    """Trips the fuse of a kind that has one (refuses any other kind with one readable line)."""

    class Meta:
        model = Fuse
        fields = ("kind", "destination", "reason")

    exists_message = "That fuse exists: trip it from the list."

    def check(self, data: dict[str, Any]) -> None:
        fuse_config(str(data.get("kind", "")))


@admin.register(Fuse)
class FuseAdmin(admin.ModelAdmin):
    form = FuseForm
    list_display = (
        "kind",
        "destination",
        "state",
        "opened_at",
        "probe_due_at",
        "cooldown_seconds",
        "trips",
        "changed_by",
        "reason",
    )
    list_filter = ("state", "kind")
    fields = ("kind", "destination", "reason")
    actions = ["trip_action", "reset_action"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Fuse, form: Any, change: bool) -> None:
        row = services.fuse_trip(
            kind=obj.kind,
            destination=obj.destination,
            actor=request.user,
            reason=obj.reason,
            via="admin",
        )
        obj.pk = row.pk

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return None  # the service logged "Tripped via admin" on the row

    @admin.action(description="Trip selected (no attempt starts until the cool-down's probe)")
    def trip_action(self, request: HttpRequest, queryset: QuerySet[Fuse]) -> None:
        _act(request, list(queryset), trip=True)

    @admin.action(description="Reset selected (held jobs start at the next tick)")
    def reset_action(self, request: HttpRequest, queryset: QuerySet[Fuse]) -> None:
        _act(request, list(queryset), trip=False)


def _act(request: HttpRequest, rows: list[Fuse], *, trip: bool) -> None:
    change = services.fuse_trip if trip else services.fuse_reset
    done = []
    for row in rows:
        try:
            change(kind=row.kind, destination=row.destination, actor=request.user, via="admin")
        except JobsError as exc:
            messages.warning(request, str(exc))
            continue
        done.append(f"{row.kind} {row.destination}")
    if done:
        verb = "Tripped" if trip else "Reset"
        messages.info(request, f"{verb}: {', '.join(done)}.")
