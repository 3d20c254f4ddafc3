"""A request body declared larger than the limit is refused before any byte of it is read.

Django reads a whole body into memory on first access (so does DRF's JSON
parser, since DRF 3.16) and refuses one past DATA_UPLOAD_MAX_MEMORY_SIZE by
raising RequestDataTooBig: a 400 HTML page and an ERROR traceback in the
log. Below that size, a client that declares a Content-Length and sends
nothing holds a gunicorn thread until the worker timeout. This middleware
looks only at the declared Content-Length:

- under /api/: above JOBS_MAX_REQUEST_BYTES, 413 in the API's error shape;
- elsewhere (the admin's forms): above DATA_UPLOAD_MAX_MEMORY_SIZE, 413 as
  plain text.

A RequestDataTooBig that a view raises all the same (a multipart body whose
fields outgrow the limit while it is read) gets the same 413, logged by
django.request as a WARNING line, without a traceback.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse

from jobs import events
from jobs.models import Job
from jobs.reasons import RejectReason

API_PREFIX = "/api/"


def body_limit(request: HttpRequest) -> int | None:
    """The most bytes a body of this request may have (None: no limit)."""
    if request.path.startswith(API_PREFIX):
        return int(settings.JOBS_MAX_REQUEST_BYTES)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return None if limit is None else int(limit)


def too_large(request: HttpRequest, *, declared: int | None, limit: int) -> HttpResponse:
    """413 for `request`: the API's error shape under /api/, plain text elsewhere."""
    detail = (
        f"Request body is {declared} bytes; the limit is {limit} bytes."
        if declared is not None
        else f"Request body exceeds the limit of {limit} bytes."
    )
    response: HttpResponse
    if not request.path.startswith(API_PREFIX):
        response = HttpResponse(detail, status=413, content_type="text/plain; charset=utf-8")
    else:
        if request.method == "POST" and request.path == reverse("jobs-api:job-list"):
            # A refused submission, as when the parser refuses it (jobs.api.errors).
            events.job_rejected.send(sender=Job, kind="", queue="", reason=RejectReason.TOO_LARGE)
        response = JsonResponse(
            {"detail": detail, "errors": [{"field": "body", "reason": detail}]}, status=413
        )
    # Answered before the middleware that would set it (CommonMiddleware).
    response["Content-Length"] = str(len(response.content))
    return response


class DeclaredBodyLimitMiddleware:
    """413 at once for a declared Content-Length over `body_limit`; 413 for RequestDataTooBig."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = str(request.META.get("CONTENT_LENGTH") or "").strip()
        limit = body_limit(request)
        if limit is not None and declared.isdigit() and int(declared) > limit:
            return too_large(request, declared=int(declared), limit=limit)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, RequestDataTooBig):
            return None
        limit = body_limit(request)
        return too_large(request, declared=None, limit=limit or 0)
