"""ScheduleAdmin: operators create, edit and disable periodic schedules (History records each).

Schedules declared in code (source `code`, settings JOBS_SCHEDULES) are
read-only here: they are reviewed and versioned with the code, and the
scheduler leader writes them. Saving a change to the timing or `enabled`
clears the next tick, so the leader plans it afresh from now at its next
pass (within one tick). The form refuses an unknown kind, a bad cron
expression, time zone or interval with one line each.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from jobs.kinds import UnknownKind, get_kind
from jobs.models import Job, Schedule, ScheduleSource, ScheduleTick
from jobs.periodic.declared import TIMING_FIELDS
from jobs.periodic.timing import InvalidTiming, Timing


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = [
            "name",
            "kind",
            "payload",
            "queue",
            "cron",
            "timezone",
            "interval_seconds",
            "enabled",
            "missed_policy",
            "overlap_policy",
            "jitter_seconds",
        ]

    def clean_kind(self) -> str:
        kind = self.cleaned_data["kind"]
        try:
            get_kind(kind)
        except UnknownKind as exc:
            raise forms.ValidationError(str(exc)) from None
        return kind

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        timing = Timing(
            cron=data.get("cron") or "",
            interval_seconds=data.get("interval_seconds"),
            timezone=data.get("timezone") or "UTC",
        )
        try:
            timing.validate()
        except InvalidTiming as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


class TickInline(admin.TabularInline):
    model = ScheduleTick
    fields = ("tick_at", "due_at", "created_at", "outcome", "missed", "job_link")
    readonly_fields = ("tick_at", "due_at", "created_at", "outcome", "missed", "job_link")
    can_delete = False
    extra = 0
    max_num = 0
    ordering = ["-tick_at"]
    verbose_name_plural = "ticks (newest first)"

    @admin.display(description="job")
    def job_link(self, tick: ScheduleTick) -> str:
        return _job_link(tick.job_id)

    def get_queryset(self, request: HttpRequest) -> Any:
        # The newest 50 ticks: a schedule's history grows without bound.
        ids = list(
            super().get_queryset(request).order_by("-tick_at").values_list("pk", flat=True)[:50]
        )
        return super().get_queryset(request).filter(pk__in=ids)


def _job_link(job_id: Any) -> str:
    if job_id is None:
        return "-"
    url = reverse("admin:jobs_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, str(job_id)[:8])


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "name",
        "kind",
        "timing",
        "enabled",
        "next_run_at",
        "last_run_at",
        "last_job_status",
        "missed_policy",
        "overlap_policy",
        "source",
    ]
    list_filter = ["enabled", "source", "missed_policy", "overlap_policy"]
    search_fields = ["name", "kind"]
    readonly_fields = [
        "source",
        "next_tick_at",
        "next_run_at",
        "last_tick_at",
        "last_run_at",
        "last_job_status",
    ]
    inlines = [TickInline]

    @admin.display(description="last job")
    def last_job_status(self, schedule: Schedule) -> str:
        if schedule.last_job_id is None:
            return "-"
        status = (
            Job.objects.filter(pk=schedule.last_job_id).values_list("status", flat=True).first()
        )
        if status is None:
            return "(deleted)"
        url = reverse("admin:jobs_job_change", args=[schedule.last_job_id])
        return format_html('<a href="{}">{}</a>', url, status)

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and obj.source == ScheduleSource.CODE:
            return [*ScheduleForm.Meta.fields, *self.readonly_fields]
        return self.readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        if obj is not None and obj.source == ScheduleSource.CODE:
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if obj.source == ScheduleSource.CODE and change:
            return  # read-only: declared in code
        if not change or any(name in TIMING_FIELDS for name in form.changed_data):
            # Planned afresh from now by the leader's next pass (within one tick).
            obj.next_tick_at = None
            obj.next_run_at = None
        super().save_model(request, obj, form, change)
