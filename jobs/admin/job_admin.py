"""JobAdmin: the job list, the read-only job page with its action buttons, and the overview.

Thin: reads go through jobs.selectors / jobs.overview / .listing, changes
through jobs.admin.actions (the lifecycle services).

Permissions: the admin site admits staff only (others go to the login
page). Viewing needs jobs.view_job (or change); every action, on the list or
the job page, needs jobs.change_job; the overview needs jobs.view_job.
Nobody adds, edits or deletes a job or an attempt here: "change" means
"may act on jobs", and the job page never has a form to save.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from jobs import selectors, services, waiting_now
from jobs.admin import actions, display, listing, overview_page, pause_admin, timeline
from jobs.errors import InvalidTransition
from jobs.models import Job, JobStatus
from jobs.reasons import PauseScope
from observability import tracing

# Attempts listed on the job page; older ones are counted, not shown.
ATTEMPTS_SHOWN = 200


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # Readable at 1280 px and up, Django's navigation sidebar open or not
    # (tests/e2e/test_admin_layout.py): six columns, each second fact on a
    # second line (the queue under the kind, the dead or waiting reason under
    # the status, the end-to-end time under the age), and the error in the
    # width that is left.
    list_display = ["short_id", "kind_queue", "status_badge", "attempts", "age", "error"]
    list_display_links = ["short_id"]
    list_filter = [
        "status",
        listing.KindFilter,
        listing.QueueFilter,
        "dead_reason",
        ("created_at", admin.DateFieldListFilter),
    ]
    # The search box appears when search_fields is set; get_search_results does the work.
    search_fields = ["id"]
    search_help_text = (
        "Id (or its first 8+ hex digits), idempotency key, kind, or text of the last error."
    )
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    # Sorting by other columns would sort the whole table; created_at has an index.
    sortable_by = ["age"]
    list_per_page = 50
    list_max_show_all = 200
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = listing.EstimatedCountPaginator
    actions = [
        "retry_now_action",
        "cancel_action",
        "requeue_action",
        "pause_kind_action",
        "pause_queue_action",
    ]
    change_list_template = "admin/jobs/job/change_list.html"
    change_form_template = "admin/jobs/job/change_form.html"
    # The change view is read-only (has_change_permission(obj) is False); show little.
    fields = ["kind"]

    # --- permissions --------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # With an object: editing a job, which nobody may do (no form, no Save).
        # Without: acting on jobs (the actions), for holders of jobs.change_job.
        return obj is None and super().has_change_permission(request)

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        # The index shows "View", never "Add"/"Change" links, for everybody.
        perms = super().get_model_perms(request)
        return {**perms, "add": False, "change": False, "delete": False}

    # --- list ----------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type:
        return listing.JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        return listing.search_jobs(queryset, search_term), False

    @admin.display(description="id")
    def short_id(self, job: Job) -> str:
        return display.short_id(job.pk)

    @admin.display(description="kind · queue")
    def kind_queue(self, job: Job) -> str:
        return format_html(
            '{}<div class="job-why">{}</div>',
            display.breakable(job.kind),
            display.breakable(job.queue),
        )

    @admin.display(description="status")
    def status_badge(self, job: Job) -> str:
        badge = format_html(
            '<span class="job-status job-status-{}" style="background:{}">{}</span>',
            job.status,
            display.STATUS_COLOURS.get(job.status, "#555"),
            job.status,
        )
        if job.dead_reason:
            return format_html('{}<div class="job-why">{}</div>', badge, job.dead_reason)
        if job.status == JobStatus.RUNNING and job.progress_done is not None:
            return format_html(
                '{}<div class="job-why job-progress">{}</div>', badge, display.progress_text(job)
            )
        if job.waiting_reason:
            # The short reason in the cell; hovering shows the detail.
            return format_html(
                '{}<div class="job-why job-waiting" title="{}">{}</div>',
                badge,
                job.waiting_detail,
                job.get_waiting_reason_display(),
            )
        return badge

    @admin.display(description="attempts")
    def attempts(self, job: Job) -> str:
        return f"{job.attempts_made} / {job.max_attempts}"

    @admin.display(description="age · end\u2011to\u2011end", ordering="created_at")
    def age(self, job: Job) -> str:
        # Since created; under it, created to finished (waits between attempts included).
        took = timeline.end_to_end(job)
        age = display.age(job.created_at, timezone.now())
        if took is None:
            return age
        return format_html(
            '{}<div class="job-why" title="end-to-end: created to finished">{}</div>',
            age,
            display.seconds(took),
        )

    @admin.display(description="last error")
    def error(self, job: Job) -> str:
        text = getattr(job, "error_head", None) or ""
        head = display.first_line(text)
        if not head:
            return ""
        # The cell shows the start of the first line; hovering shows the stored head.
        if job.status == JobStatus.SUCCEEDED:
            return format_html(
                '<span class="job-recovered" title="{}">recovered: {}</span>', text, head
            )
        return format_html('<span title="{}">{}</span>', text, head)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"title": "Jobs", **(extra_context or {})})

    # --- actions (thin: jobs.admin.actions does the work) ---------------------

    def _act(self, request: HttpRequest, queryset: Any, action: str) -> None:
        outcome = actions.run_on_selection(action=action, queryset=queryset, user=request.user)
        level = messages.WARNING if outcome.refused or not outcome.done else messages.SUCCESS
        if outcome.background_jobs and not outcome.refused:
            level = messages.SUCCESS
        self.message_user(request, outcome.summary(), level=level)

    @admin.action(description="Retry now (dead or retrying → queued)", permissions=["change"])
    def retry_now_action(self, request: HttpRequest, queryset: Any) -> None:
        self._act(request, queryset, "retry_now")

    @admin.action(description="Pause the kinds of the selected jobs", permissions=["pause"])
    def pause_kind_action(self, request: HttpRequest, queryset: Any) -> None:
        pause_admin.pause_selected(self, request, queryset, scope=PauseScope.KIND)

    @admin.action(description="Pause the queues of the selected jobs", permissions=["pause"])
    def pause_queue_action(self, request: HttpRequest, queryset: Any) -> None:
        pause_admin.pause_selected(self, request, queryset, scope=PauseScope.QUEUE)

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("jobs.add_pause"))

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_action(self, request: HttpRequest, queryset: Any) -> None:
        self._act(request, queryset, "cancel")

    @admin.action(
        description="Requeue selected dead jobs (attempts left, at least one)",
        permissions=["change"],
    )
    def requeue_action(self, request: HttpRequest, queryset: Any) -> None:
        self._act(request, queryset, "requeue")

    # --- job page --------------------------------------------------------------

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "POST":
            # There is nothing to save on a job; actions have their own URL.
            return HttpResponseNotAllowed(["GET"])
        return super().changeform_view(request, object_id, form_url, extra_context)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context.update(self._job_page_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _job_page_context(self, request: HttpRequest, job: Job) -> dict[str, Any]:
        now_waiting = waiting_now.job_waiting(job) if not job.is_terminal else None
        attempts = selectors.job_attempts(job_id=job.pk, limit=ATTEMPTS_SHOWN)
        error, recovered = display.shown_error(job)
        trace_id = tracing.trace_id_from(job.trace_parent) or ""
        can_act = self.has_change_permission(request)
        buttons = [
            {
                "name": spec.name,
                "label": spec.label,
                "help": spec.help,
                "url": reverse("admin:jobs_job_act", args=[job.pk, spec.name]),
            }
            for spec in actions.actions_for(job)
        ]
        budget_after = services.requeue_max_attempts(
            attempts_made=job.attempts_made, max_attempts=job.max_attempts
        )
        return {
            "job": job,
            "title": f"Job {display.short_id(job.pk)} · {job.kind}",
            "status_colour": display.STATUS_COLOURS.get(job.status, "#555"),
            "moments": timeline.moments(job, attempts),
            "end_to_end": display.seconds(timeline.end_to_end(job)),
            "waiting_until": display.until(job.next_attempt_at, timezone.now()),
            # Why a queued job does not start (a pause, no worker, backpressure): jobs.waiting_now.
            "waiting_now": now_waiting,
            "estimated_start": display.until(
                now_waiting.estimated_start if now_waiting else None, timezone.now()
            ),
            "progress": display.progress_text(job),
            "payload_json": display.pretty_json(job.payload),
            "result_json": display.pretty_json(job.result) if job.result is not None else "",
            "shown_error": error,
            "error_recovered": recovered,
            "attempt_rows": display.attempt_rows(attempts, created_at=job.created_at),
            "attempts_hidden": max(0, job.attempts_made - len(attempts)),
            "trace_id": trace_id,
            "trace_url": display.trace_url(trace_id),
            "can_act": can_act,
            "action_buttons": buttons if can_act else [],
            "requeue_budget": (
                f"max attempts {job.max_attempts} → {budget_after}"
                if budget_after != job.max_attempts
                else f"max attempts stays {job.max_attempts}"
            ),
            "overview_url": reverse("admin:jobs_job_overview"),
        }

    def action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """POST: apply one action to one job from its page, then show the page again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if action not in actions.ACTIONS:
            raise Http404("No such action.")
        if not self.has_change_permission(request):
            raise PermissionDenied
        try:
            job = actions.run_one(action=action, job_id=object_id, user=request.user)
        except (Job.DoesNotExist, ValidationError, ValueError):  # gone, or not a UUID
            raise Http404("No such job.") from None
        except InvalidTransition as exc:
            self.message_user(request, f"Not done: {exc}.", level=messages.WARNING)
        else:
            self.message_user(
                request,
                f"{actions.ACTIONS[action].label}: the job is {job.status}, "
                f"{job.attempts_made} of {job.max_attempts} attempts made.",
                level=messages.SUCCESS,
            )
        return redirect("admin:jobs_job_change", object_id)

    # --- overview ----------------------------------------------------------------

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """The overview page; needs the view permission."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Jobs overview",
            **overview_page.context(),
        }
        return TemplateResponse(request, "admin/jobs/job/overview.html", context)

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view
        return [
            path("overview/", wrap(self.overview_view), name="jobs_job_overview"),
            path(
                "<path:object_id>/act/<str:action>/",
                wrap(self.action_view),
                name="jobs_job_act",
            ),
            *super().get_urls(),
        ]
