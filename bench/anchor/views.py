"""P2's hand-written baseline: validate, insert a row in the project's own table, publish on commit."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.anchor.models import Submission
from bench.anchor.tasks import noop


class SubmitSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=100)
    payload = serializers.JSONField()


class Submit(APIView):
    """POST {kind, payload} (token auth): 202 {"id"}; the task is published when the row commits."""

    def post(self, request: Request) -> Response:
        serializer = SubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            row = Submission.objects.create(**serializer.validated_data)
            # Celery 5.4+'s DjangoTask: transaction.on_commit(delay); celery-types lacks it.
            noop.delay_on_commit(row.pk)  # type: ignore[attr-defined]
        return Response({"id": row.pk}, status=status.HTTP_202_ACCEPTED)


def healthz(request: HttpRequest) -> HttpResponse:
    """200 once the web serves (no database)."""
    return HttpResponse("ok")
