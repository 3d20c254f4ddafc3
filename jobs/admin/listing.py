"""The job list's reads: bounded search, estimated counts, list filters without queries.

Everything here keeps the changelist's cost independent of the table size:
filters offer values from the kind registry and settings (no SELECT
DISTINCT), the search only uses indexed predicates, and the count is the
planner's estimate once it is large (jobs.estimates).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.db.models.functions import Substr
from django.utils.functional import cached_property

from jobs import estimates
from jobs.kinds import kind_names

# Columns the list reads: not payload, result or the whole error text.
LIST_FIELDS = (
    "id",
    "kind",
    "queue",
    "status",
    "attempts_made",
    "max_attempts",
    "created_at",
    "finished_at",
    "dead_reason",
    "waiting_reason",
    "waiting_detail",
    "progress_done",
    "progress_total",
    "progress_message",
)
ERROR_HEAD_CHARS = 300
SEARCH_MAX_CHARS = 200
_HEX = re.compile(r"[0-9a-f]{4,32}")


def search_jobs(qs: QuerySet, term: str) -> QuerySet:
    """Jobs matching `term` by id, idempotency key, kind or error text; only indexed predicates.

    - id: a full UUID, or 4+ leading hex digits (the list shows 8): a range
      on the primary key.
    - idempotency key: equal (jobs_job_idem_key_idx).
    - kind: every registered kind whose name contains the term (kind index).
    - error text: `last_error` contains the term, case-insensitively, for
      terms of 3+ characters (trigram index on PostgreSQL; shorter terms
      have no trigrams and would scan).
    """
    term = term.strip()[:SEARCH_MAX_CHARS]
    if not term:
        return qs
    match = Q(idempotency_key=term)
    hexpart = term.replace("-", "").lower()
    if _HEX.fullmatch(hexpart):
        match |= Q(
            id__gte=uuid.UUID(hexpart.ljust(32, "0")), id__lte=uuid.UUID(hexpart.ljust(32, "f"))
        )
    kinds = [k for k in kind_names() if term.lower() in k.lower()]
    if kinds:
        match |= Q(kind__in=kinds)
    if len(term) >= 3:
        match |= Q(last_error__icontains=term)
    return qs.filter(match)


class EstimatedCountPaginator(Paginator):
    """A Paginator whose count is exact when small and the planner's estimate when large."""

    count_exact = True

    @cached_property
    def count(self) -> int:
        result = estimates.bounded_count(self.object_list)  # type: ignore[arg-type]  # a QuerySet here
        self.count_exact = result.exact
        return result.value


class JobChangeList(ChangeList):
    """The changelist reading only the listed columns and the head of the last error."""

    def get_queryset(self, request: Any, exclude_parameters: Any = None) -> QuerySet:
        qs = super().get_queryset(request, exclude_parameters)
        return qs.only(*LIST_FIELDS).annotate(error_head=Substr("last_error", 1, ERROR_HEAD_CHARS))


class KindFilter(admin.SimpleListFilter):
    """Kinds from the registry: no SELECT DISTINCT over the table."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(k, k) for k in kind_names()]

    def queryset(self, request: Any, queryset: QuerySet) -> QuerySet:
        return queryset.filter(kind=self.value()) if self.value() else queryset


class QueueFilter(admin.SimpleListFilter):
    """Queues from JOBS_QUEUES: no SELECT DISTINCT over the table."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(q, q) for q in settings.JOBS_QUEUES]

    def queryset(self, request: Any, queryset: QuerySet) -> QuerySet:
        return queryset.filter(queue=self.value()) if self.value() else queryset
