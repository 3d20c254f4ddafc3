"""Admin: jobs with their attempts; cancel and requeue actions call the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages

from jobs import services
from jobs.errors import InvalidTransition
from jobs.models import Attempt, Job


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = [
        "number",
        "outcome",
        "worker_hostname",
        "worker_pid",
        "started_at",
        "finished_at",
        "error_type",
        "error_message",
        "rss_before_bytes",
        "rss_after_bytes",
        "retry_delay_seconds",
    ]
    readonly_fields = fields

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "kind",
        "queue",
        "status",
        "attempts_made",
        "max_attempts",
        "dead_reason",
        "created_at",
        "finished_at",
    ]
    list_filter = ["status", "kind", "queue", "dead_reason"]
    search_fields = ["id", "idempotency_key"]
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [AttemptInline]
    actions = ["cancel_jobs", "requeue_jobs"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def _apply(self, request: Any, queryset: Any, service: Any, verb: str) -> None:
        done = 0
        for job in queryset:
            try:
                service(job_id=job.pk)
                done += 1
            except InvalidTransition as exc:
                self.message_user(request, f"{job.pk}: {exc}", level=messages.WARNING)
        self.message_user(request, f"{verb} {done} job(s).")

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request: Any, queryset: Any) -> None:
        self._apply(request, queryset, services.job_cancel, "Cancelled")

    @admin.action(description="Requeue selected dead jobs")
    def requeue_jobs(self, request: Any, queryset: Any) -> None:
        self._apply(request, queryset, services.job_requeue, "Requeued")
