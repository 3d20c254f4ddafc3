"""One error shape for every API error.

    {"detail": "<summary>", "errors": [{"field": "payload.url", "reason": "..."}]}

`field` is a dotted path into the request ("body" for the body as a whole).
Field names and reasons echo client input, so they pass through
`jobs.jsonsafe.printable` first: a lone surrogate, NUL or bidi control in a
field name is shown as a `\\uXXXX` escape, and the renderer never fails on it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from jobs import events
from jobs.errors import (
    ActionNotPermitted,
    IdempotencyConflict,
    InvalidSubmission,
    InvalidTransition,
    JobNotFound,
    JobsError,
    QueueFull,
)
from jobs.jsonsafe import printable
from jobs.kinds import kind_names
from jobs.models import Job
from jobs.reasons import RejectReason


class LengthRequired(exceptions.APIException):
    """411: a chunked body without Content-Length (Django's WSGI request cannot read it)."""

    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = (
        "Send the body with a Content-Length header; chunked request bodies are not supported."
    )
    default_code = "length_required"


def error_response(
    *,
    status_code: int,
    detail: str,
    errors: list[dict[str, str]],
    headers: dict[str, str] | None = None,
) -> Response:
    """A Response in the API's error shape."""
    return Response({"detail": detail, "errors": errors}, status=status_code, headers=headers)


def _field_errors(detail: Any, prefix: str = "") -> list[dict[str, str]]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = (
                prefix
                if key in ("non_field_errors", "detail")
                else (f"{prefix}.{key}" if prefix else str(key))
            )
            out.extend(_field_errors(value, name or "body"))
        return out
    if isinstance(detail, list):
        out = []
        for item in detail:
            out.extend(_field_errors(item, prefix))
        return out
    return [{"field": prefix or "body", "reason": str(detail)}]


def domain_error_response(exc: JobsError) -> Response:
    """Translate a service error into its HTTP answer."""
    if isinstance(exc, InvalidSubmission):
        errors = [{"field": f, "reason": r} for f, reasons in exc.errors.items() for r in reasons]
        return error_response(status_code=400, detail="Invalid job submission.", errors=errors)
    if isinstance(exc, QueueFull):
        return error_response(
            status_code=503,
            detail=str(exc),
            errors=[{"field": "queue", "reason": str(exc)}],
            headers={"Retry-After": str(exc.retry_after)},
        )
    if isinstance(exc, JobNotFound | ActionNotPermitted):
        return error_response(
            status_code=404 if isinstance(exc, JobNotFound) else 403,
            detail=str(exc),
            errors=[{"field": exc.field or "path", "reason": str(exc)}],
        )
    if isinstance(exc, IdempotencyConflict | InvalidTransition):
        return error_response(
            status_code=409,
            detail=str(exc),
            errors=[{"field": exc.field or "body", "reason": str(exc)}],
        )
    return error_response(
        status_code=400,
        detail=str(exc),
        errors=[{"field": exc.field or "body", "reason": str(exc)}],
    )


# The part of the request each generic error is about.
_FIELD_BY_STATUS = {
    status.HTTP_403_FORBIDDEN: "Authorization",
    status.HTTP_404_NOT_FOUND: "path",
    status.HTTP_405_METHOD_NOT_ALLOWED: "method",
    status.HTTP_411_LENGTH_REQUIRED: "Content-Length",
    status.HTTP_415_UNSUPPORTED_MEDIA_TYPE: "Content-Type",
    # A rate limit of the token or the client's address (jobs.api.throttling).
    status.HTTP_429_TOO_MANY_REQUESTS: "client",
}


def _rejection_reason(exc: Exception, status_code: int) -> RejectReason:
    if isinstance(exc, QueueFull):
        return RejectReason.QUEUE_FULL
    if isinstance(exc, IdempotencyConflict):
        return RejectReason.CONFLICT
    if status_code == status.HTTP_413_REQUEST_ENTITY_TOO_LARGE:
        return RejectReason.TOO_LARGE
    if status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
        return RejectReason.UNAUTHENTICATED
    return RejectReason.INVALID


def _record_rejection(exc: Exception, context: dict, status_code: int) -> None:
    view, request = context.get("view"), context.get("request")
    if getattr(view, "action", None) != "create" or request is None:
        return
    # Only registered kind names become label values: never arbitrary input.
    data = getattr(request, "_full_data", None)
    data = data if isinstance(data, dict) else {}
    kind = data.get("kind") if data.get("kind") in kind_names() else ""
    queue = data.get("queue") if data.get("queue") in settings.JOBS_QUEUES else ""
    events.job_rejected.send(
        sender=Job, kind=kind, queue=queue, reason=_rejection_reason(exc, status_code)
    )


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF exception handler producing the shape above; counts rejected submissions."""
    response = _shaped_response(exc, context)
    if response is not None and isinstance(response.data, dict):
        response.data = _printable_shape(response.data)
    return response


def _printable_shape(data: dict[str, Any]) -> dict[str, Any]:
    errors = data.get("errors")
    if not isinstance(errors, list):
        return data
    return {
        **data,
        "detail": printable(str(data.get("detail", ""))),
        "errors": [
            {"field": printable(str(e.get("field"))), "reason": printable(str(e.get("reason")))}
            for e in errors
            if isinstance(e, dict)
        ],
    }


def _shaped_response(exc: Exception, context: dict) -> Response | None:
    response = (
        domain_error_response(exc)
        if isinstance(exc, JobsError)
        else drf_exception_handler(exc, context)
    )
    if response is None:
        return None
    _record_rejection(exc, context, response.status_code)
    if isinstance(exc, JobsError):
        return response
    if isinstance(exc, exceptions.Throttled) and not response.has_header("Retry-After"):
        response["Retry-After"] = "1"  # DRF leaves it out when no throttle gave a wait
    if isinstance(exc, exceptions.ValidationError):
        errors = _field_errors(exc.detail)
        response.data = {"detail": "Invalid request.", "errors": errors}
    elif isinstance(exc, exceptions.ParseError):
        response.data = {
            "detail": str(exc.detail),
            "errors": [{"field": "body", "reason": str(exc.detail)}],
        }
    elif (
        isinstance(exc, exceptions.APIException)
        and response.status_code == status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    ):
        response.data = {
            "detail": str(exc.detail),
            "errors": [{"field": "body", "reason": str(exc.detail)}],
        }
    elif isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.data = {
            "detail": str(exc.detail),
            "errors": [{"field": "Authorization", "reason": str(exc.detail)}],
        }
    elif isinstance(response.data, dict) and "detail" in response.data:
        field = _FIELD_BY_STATUS.get(response.status_code, "body")
        detail = str(response.data["detail"])
        response.data = {"detail": detail, "errors": [{"field": field, "reason": detail}]}
    return response
