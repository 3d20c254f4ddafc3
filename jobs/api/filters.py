"""Query parameters of GET /api/jobs/: validated like a body, unknown names refused with 400."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import serializers

from jobs.models import JobStatus

# Sort keys the list accepts; "-" sorts descending. Ties are broken by id.
ORDERING_FIELDS = ("created_at", "started_at", "finished_at")
ORDERINGS = [f for name in ORDERING_FIELDS for f in (name, f"-{name}")]
MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
# DRF's own: `format` picks a renderer (?format=json).
PASSTHROUGH = frozenset({"format"})


class JobListQuery(serializers.Serializer):
    """GET /api/jobs/ query. Raises ValidationError naming each bad or unknown parameter."""

    status = serializers.ChoiceField(choices=JobStatus.values, required=False)
    kind = serializers.CharField(max_length=100, required=False)
    queue = serializers.CharField(max_length=100, required=False)
    ordering = serializers.ChoiceField(choices=ORDERINGS, required=False, default="-created_at")
    page = serializers.IntegerField(min_value=1, required=False)
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, required=False)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        names = set(data.keys())
        unknown = sorted(names - set(self.fields) - PASSTHROUGH)
        repeated = sorted(n for n in names & set(self.fields) if len(data.getlist(n)) > 1)
        errors = {n: ["Unknown query parameter."] for n in unknown}
        errors |= {n: ["Give this parameter once."] for n in repeated}
        if errors:
            raise serializers.ValidationError(errors)
        values = {n: data.get(n) for n in names if n in self.fields and data.get(n) != ""}
        return super().to_internal_value(values)

    def validate_queue(self, value: str) -> str:
        if value not in settings.JOBS_QUEUES:
            raise serializers.ValidationError(
                f"unknown queue {value!r}; known: {', '.join(settings.JOBS_QUEUES)}"
            )
        return value
