"""Thin views: validate the request, call one service or selector, translate errors."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from jobs import client, selectors
from jobs.api.errors import LengthRequired
from jobs.api.filters import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, ORDERINGS, JobListQuery
from jobs.api.serializers import (
    JobAcceptedSerializer,
    JobListSerializer,
    JobSerializer,
    JobSubmitSerializer,
)
from jobs.models import Job, JobStatus


class JobPagination(PageNumberPagination):
    """`page` and `page_size` (1 to MAX_PAGE_SIZE; JobListQuery refuses others with 400)."""

    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE


class JobViewSet(viewsets.GenericViewSet):
    """Submit, list, inspect, cancel and requeue jobs: the caller's own, or every job for
    staff with the permissions (jobs.ownership)."""

    serializer_class = JobSerializer
    pagination_class = JobPagination
    lookup_value_regex = (
        "[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
    )

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular building the schema
            return Job.objects.none()
        query = JobListQuery(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        return selectors.job_list(
            user=self.request.user,
            status=params.get("status"),
            kind=params.get("kind"),
            queue=params.get("queue"),
            ordering=params["ordering"],
        )

    def _get_job(self, pk: str) -> Job:
        # Another user's job is "no job with that id" (jobs.ownership).
        return client.get(pk, user=self.request.user)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={202: JobAcceptedSerializer, 200: JobAcceptedSerializer},
        parameters=[
            OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)
        ],
    )
    def create(self, request: Request) -> Response:
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            # WSGI gives Django no body without a Content-Length.
            raise LengthRequired()
        serializer = JobSubmitSerializer(
            data=request.data, context={"header_key": request.headers.get("Idempotency-Key")}
        )
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key = data.get("idempotency_key") or None
        result = client.submit_result(
            data["kind"],
            data["payload"],
            queue=data.get("queue"),
            priority=data.get("priority"),
            idempotency_key=key,
            run_after=data.get("run_after"),
            submitter=request.user,
        )
        url = reverse("jobs-api:job-detail", kwargs={"pk": result.job.pk}, request=request)
        body = {"id": str(result.job.pk), "status": result.job.status, "url": url}
        # A repeated idempotency key answers 200 with the job it made first.
        code = status.HTTP_202_ACCEPTED if result.created else status.HTTP_200_OK
        return Response(body, status=code, headers={"Location": url})

    @extend_schema(
        responses=JobListSerializer(many=True),
        parameters=[
            OpenApiParameter("status", str, enum=[s.value for s in JobStatus]),
            OpenApiParameter("kind", str),
            OpenApiParameter("queue", str),
            OpenApiParameter("ordering", str, enum=ORDERINGS, default="-created_at"),
            OpenApiParameter(
                "page_size", int, description=f"1 to {MAX_PAGE_SIZE}; {DEFAULT_PAGE_SIZE} if absent"
            ),
        ],
        description="Unknown query parameters are refused with 400, like unknown body fields.",
    )
    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(
            JobListSerializer(page, many=True, context={"request": request}).data
        )

    def retrieve(self, request: Request, pk: str) -> Response:
        context = {"request": request, "live_waiting": True}
        return Response(JobSerializer(self._get_job(pk), context=context).data)

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        client.cancel(pk, user=request.user, via="API")
        return Response(JobSerializer(self._get_job(pk), context={"request": request}).data)

    @extend_schema(
        request=None,
        responses=JobSerializer,
        description="Queue a dead job again with the attempts it has left, and at least one: "
        "a job that used all its attempts gets exactly one more (max_attempts + 1); if that "
        "fails it is dead again. 409 unless the job is dead.",
    )
    @action(detail=True, methods=["post"])
    def requeue(self, request: Request, pk: str) -> Response:
        client.requeue(pk, user=request.user, via="API")
        return Response(JobSerializer(self._get_job(pk), context={"request": request}).data)
