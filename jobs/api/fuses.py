"""Staff API for fuses: list, trip, reset (jobs.services.fuse_ops; thin views, the API's error
shape).

GET /api/fuses/ (jobs.view_fuse), POST /api/fuses/trip/ {kind, destination, reason}
and POST /api/fuses/reset/ {kind, destination, reason} (jobs.change_fuse). Both answer
the fuse after the change; 400 for a kind without a fuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import services
from jobs.api.staff import StaffActionPermission, StrictSerializer
from jobs.fuse_model import Fuse
from jobs.fuse_rules import WHOLE_KIND


class StaffFusePermission(StaffActionPermission):
    """Staff with the Django permission of the action (view fuse; change fuse to act)."""

    needed: ClassVar[Mapping[str, str]] = {"list": "jobs.view_fuse"}
    otherwise = "jobs.change_fuse"


class FuseRequestSerializer(StrictSerializer):
    kind = serializers.CharField(max_length=100)
    destination = serializers.CharField(max_length=255, required=False, default=WHOLE_KIND)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class FuseSerializer(serializers.ModelSerializer):
    changed_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Fuse
        fields: ClassVar[list[str]] = [
            "kind",
            "destination",
            "state",
            "opened_at",
            "probe_due_at",
            "cooldown_seconds",
            "attempts",
            "failures",
            "trips",
            "changed_by",
            "reason",
            "updated_at",
        ]


class FuseViewSet(viewsets.GenericViewSet):
    """The fuses (staff): trip one before its failures do, reset one when its dependency is
    back (its held jobs start at the scheduler's next tick)."""

    permission_classes: ClassVar[list[Any]] = [StaffFusePermission]
    serializer_class = FuseSerializer
    pagination_class = None

    def get_queryset(self) -> Any:
        return Fuse.objects.order_by("kind", "destination")

    def list(self, request: Request) -> Response:
        return Response(FuseSerializer(services.fuses_list(), many=True).data)

    @extend_schema(request=FuseRequestSerializer, responses=FuseSerializer)
    @action(detail=False, methods=["post"])
    def trip(self, request: Request) -> Response:
        body = FuseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.fuse_trip(**body.validated_data, actor=request.user, via="API")
        return Response(FuseSerializer(row).data)

    @extend_schema(request=FuseRequestSerializer, responses=FuseSerializer)
    @action(detail=False, methods=["post"])
    def reset(self, request: Request) -> Response:
        body = FuseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = services.fuse_reset(**body.validated_data, actor=request.user, via="API")
        return Response(FuseSerializer(row).data)
