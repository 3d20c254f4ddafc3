"""Request and response shapes of the jobs API."""

from __future__ import annotations

from rest_framework import serializers

from jobs.models import Attempt, Job


class JobSubmitSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=100)
    payload = serializers.JSONField(help_text="An object matching the kind's payload schema.")
    queue = serializers.CharField(max_length=100, required=False, allow_blank=False)
    idempotency_key = serializers.CharField(max_length=255, required=False, allow_blank=False)


class AttemptSerializer(serializers.ModelSerializer):
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
        ]


class JobSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="jobs-api:job-detail", lookup_field="pk")
    attempts = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "kind",
            "queue",
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
            "result",
            "last_error",
            "dead_reason",
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
