"""Staff API for pauses: list, pause, resume (jobs.pauses; thin views, the API's error shape).

GET /api/pauses/ (jobs.view_pause), POST /api/pauses/ {scope, name, reason}
(jobs.add_pause; 201 when paused now, 200 when it was already),
POST /api/pauses/resume/ {scope, name} (jobs.delete_pause; 404 when not paused).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import pauses
from jobs.api.staff import StaffActionPermission, StrictSerializer
from jobs.models import Pause
from jobs.reasons import PauseScope


class StaffPausePermission(StaffActionPermission):
    """Staff with the Django permission of the action (view / add / delete pause)."""

    needed: ClassVar[Mapping[str, str]] = {
        "list": "jobs.view_pause",
        "create": "jobs.add_pause",
        "resume": "jobs.delete_pause",
    }
    otherwise = "jobs.change_pause"


class PauseTargetSerializer(StrictSerializer):
    scope = serializers.ChoiceField(choices=[s.value for s in PauseScope])
    name = serializers.CharField(max_length=100)


class PauseRequestSerializer(PauseTargetSerializer):
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class PauseSerializer(serializers.ModelSerializer):
    paused_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Pause
        fields: ClassVar[list[str]] = ["scope", "name", "paused_at", "paused_by", "reason"]


class PauseViewSet(viewsets.GenericViewSet):
    """Pause and resume kinds and queues (staff): paused work stays queued in the database."""

    permission_classes: ClassVar[list[Any]] = [StaffPausePermission]
    serializer_class = PauseSerializer
    pagination_class = None

    def get_queryset(self) -> Any:
        return Pause.objects.order_by("paused_at", "id")

    def list(self, request: Request) -> Response:
        return Response(PauseSerializer(pauses.pauses_active(), many=True).data)

    @extend_schema(request=PauseRequestSerializer, responses={201: PauseSerializer})
    def create(self, request: Request) -> Response:
        body = PauseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row, created = pauses.pause(**body.validated_data, actor=request.user, via="API")
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(PauseSerializer(row).data, status=code)

    @extend_schema(request=PauseTargetSerializer, responses=PauseSerializer)
    @action(detail=False, methods=["post"])
    def resume(self, request: Request) -> Response:
        body = PauseTargetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = pauses.resume(**body.validated_data, actor=request.user, via="API")
        return Response(PauseSerializer(row).data)
