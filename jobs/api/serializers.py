"""Request and response shapes of the jobs API."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs import waiting, waiting_now
from jobs.models import Attempt, Job, JobStatus
from observability.tracing import trace_id_from


def _header_text(value: str) -> str:
    # WSGI hands header values over as latin-1; clients send UTF-8.
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def _check_key(value: str, field: str) -> str:
    if len(value) > 255:
        raise serializers.ValidationError(
            {field: ["Ensure this value has at most 255 characters."]}
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise serializers.ValidationError({field: ["Control characters are not allowed."]})
    return value


def refuse_unknown_fields(serializer: serializers.Serializer) -> None:
    """Raise ValidationError (400, one "Unknown field." per name) for body fields the
    serializer does not declare: a typo must not pass silently."""
    data = serializer.initial_data
    unknown = sorted(set(data) - set(serializer.fields)) if isinstance(data, dict) else []
    if unknown:
        raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})


class JobSubmitSerializer(serializers.Serializer):
    """POST /api/jobs/ body. Unknown fields are refused, not dropped: a typo must not pass silently.

    The idempotency key may come in the body or the `Idempotency-Key` header
    (context["header_key"]); when both are given they must be equal.
    """

    kind = serializers.CharField(max_length=100)
    payload = serializers.JSONField(help_text="An object matching the kind's payload schema.")
    queue = serializers.CharField(max_length=100, required=False, allow_blank=False)
    priority = serializers.IntegerField(
        min_value=0,
        max_value=9,
        required=False,
        allow_null=True,
        help_text="Celery's Redis priority: 0 is taken first, 9 last.",
    )
    idempotency_key = serializers.CharField(max_length=255, required=False, allow_blank=False)
    run_after = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Earliest start (ISO 8601 with a time zone); the job waits `delayed` until then.",
    )

    def validate(self, attrs: dict) -> dict:
        refuse_unknown_fields(self)
        body_key = attrs.get("idempotency_key")
        if body_key is not None:
            _check_key(body_key, "idempotency_key")
        header = self.context.get("header_key")
        if header:
            header_key = _check_key(_header_text(header), "Idempotency-Key")
            if body_key is not None and body_key != header_key:
                raise serializers.ValidationError(
                    {
                        "idempotency_key": [
                            "Differs from the Idempotency-Key header; send one or make them equal."
                        ]
                    }
                )
            attrs["idempotency_key"] = header_key
        return attrs


class AttemptSerializer(serializers.ModelSerializer):
    """One attempt. `traceback` is the stored one: its last 20,000 characters."""

    class Meta:
        model = Attempt
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
            "trace_id",
            "traceback",
        ]


class WaitingSerializer(serializers.Serializer):
    """Why a held-back job waits (jobs.waiting); `until` is when it may go on, if known."""

    reason = serializers.ChoiceField(choices=waiting.CHOICES)
    detail = serializers.CharField()
    until = serializers.DateTimeField(allow_null=True)


class ProgressSerializer(serializers.Serializer):
    """The running (or last) attempt's progress report (AttemptContext.progress)."""

    done = serializers.FloatField()
    total = serializers.FloatField(allow_null=True)
    ratio = serializers.FloatField(
        allow_null=True, help_text="done / total in 0..1; null if unknown"
    )
    message = serializers.CharField(allow_blank=True)
    at = serializers.DateTimeField(allow_null=True, help_text="When it was written.")


class JobSerializer(serializers.ModelSerializer):
    """A job with its attempts.

    `last_error` is the error that explains the job's state; a succeeded job
    has none, and the error of an earlier attempt it recovered from is in
    `recovered_error` instead (and in that attempt's row). `trace_id` is the
    trace of the request that submitted the job, which every attempt joins
    (empty unless the submitting process exports traces). `waiting` says why
    a held-back job waits, or is null (on the job's own page also the live
    reasons of a queued job: a pause, no worker, backpressure; jobs.waiting_now),
    and `estimated_start` when it may start, where that can be estimated. `progress` is the running (or last)
    attempt's latest progress report, or null.
    """

    url = serializers.HyperlinkedIdentityField(view_name="jobs-api:job-detail", lookup_field="pk")
    attempts = AttemptSerializer(many=True, read_only=True)
    trace_id = serializers.SerializerMethodField()
    last_error = serializers.SerializerMethodField()
    recovered_error = serializers.SerializerMethodField()
    waiting = serializers.SerializerMethodField()
    estimated_start = serializers.SerializerMethodField(
        help_text="When a waiting job may start, where it can be estimated (its due time, or "
        "the jobs ahead of it at its queue's recent pace); null otherwise."
    )
    progress = serializers.SerializerMethodField()

    @extend_schema_field(ProgressSerializer(allow_null=True))
    def get_progress(self, job: Job) -> dict[str, Any] | None:
        if job.progress_done is None:
            return None
        total = job.progress_total
        return ProgressSerializer(
            {
                "done": job.progress_done,
                "total": total,
                "ratio": max(0.0, min(1.0, job.progress_done / total)) if total else None,
                "message": job.progress_message,
                "at": job.progress_at,
            }
        ).data

    def _waiting_now(self, job: Job) -> waiting_now.WaitingNow | None:
        # Computed once per job and response; live reasons only where the view asks
        # (the job page: context["live_waiting"]), the stored ones everywhere.
        cache = self.context.setdefault("_waiting_now", {})
        if job.pk not in cache:
            cache[job.pk] = waiting_now.job_waiting(
                job, live=bool(self.context.get("live_waiting"))
            )
        return cache[job.pk]

    @extend_schema_field(WaitingSerializer(allow_null=True))
    def get_waiting(self, job: Job) -> dict[str, Any] | None:
        now = self._waiting_now(job)
        if now is None:
            return None
        return WaitingSerializer(
            {"reason": now.reason.value, "detail": now.detail, "until": now.until}
        ).data

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_estimated_start(self, job: Job) -> str | None:
        now = self._waiting_now(job)
        estimate = now.estimated_start if now is not None else None
        if now is None and self.context.get("live_waiting") and job.status == JobStatus.QUEUED:
            # Simply next in its queue: the jobs ahead at the queue's recent pace.
            estimate = waiting_now.estimated_start(job)
        if estimate is None:
            return None
        return serializers.DateTimeField().to_representation(estimate)

    def get_trace_id(self, job: Job) -> str:
        return trace_id_from(job.trace_parent)

    def get_last_error(self, job: Job) -> str:
        return "" if job.status == JobStatus.SUCCEEDED else job.last_error

    def get_recovered_error(self, job: Job) -> str:
        return job.last_error if job.status == JobStatus.SUCCEEDED else ""

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "kind",
            "queue",
            "priority",
            "status",
            "payload",
            "attempts_made",
            "max_attempts",
            "idempotency_key",
            "created_at",
            "enqueued_at",
            "published_at",
            "started_at",
            "finished_at",
            "next_attempt_at",
            "run_after",
            "waiting",
            "estimated_start",
            "progress",
            "result",
            "last_error",
            "recovered_error",
            "dead_reason",
            "trace_id",
            "attempts",
        ]


class JobListSerializer(JobSerializer):
    class Meta(JobSerializer.Meta):
        fields = [
            f for f in JobSerializer.Meta.fields if f not in ("attempts", "payload", "result")
        ]


class JobAcceptedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField()
    url = serializers.URLField()
