"""Request guards: NUL in query parameters refused; a lost database connection answers 503.

RefuseNulInQueryMiddleware: refuse NUL in query parameters before any view
puts one in a database query.

PostgreSQL text cannot hold NUL (U+0000): psycopg raises DataError for a
parameter that contains one, so `GET /api/jobs/?kind=%00` (or an admin
search for `%00`) was a 500. No parameter of ours has a use for NUL, so a
request whose query string decodes to one gets 400 naming the parameter:
in the API's error shape under /api/, as plain text elsewhere. (Lone
surrogates cannot arrive this way: Django decodes percent-escapes that
are not UTF-8 to U+FFFD.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from jobs.db import close_connections, is_unavailable
from jobs.jsonsafe import printable

logger = logging.getLogger(__name__)

REASON = "NUL characters (\\u0000) are not allowed."


class RefuseNulInQueryMiddleware:
    """Answer 400 to a request with NUL in a query parameter's name or value."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The raw query string is percent-encoded; decode only when it could hold a NUL.
        if "%00" in request.META.get("QUERY_STRING", ""):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in v for v in values):
                    return _refusal(request, printable(name))
        return self.get_response(request)


def _refusal(request: HttpRequest, name: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"detail": "Invalid query parameter.", "errors": [{"field": name, "reason": REASON}]},
            status=400,
        )
    return HttpResponseBadRequest(f"Query parameter {name}: {REASON}", content_type="text/plain")


# --- a lost database connection --------------------------------------------------
# Django opens a fresh connection at the start of the next request (health
# checks are on: config/settings/base.py, CONN_HEALTH_CHECKS), but a request
# whose connection is dropped mid-way (a managed PostgreSQL's maintenance,
# `pg_terminate_backend`) fails with OperationalError or InterfaceError.
# That is the server's temporary state, not a bug: the client is told to
# retry (`Retry-After: 1`), in the API's error shape under /api/. Nothing was
# accepted: a submission's transaction rolled back with the connection.

RETRY_AFTER_SECONDS = 1


class DatabaseUnavailableMiddleware:
    """Turns a view's lost-connection error into 503 + Retry-After (JSON under /api/)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_unavailable(exception):
            return None
        close_connections()
        logger.warning(
            "database unavailable for %s %s: %s", request.method, request.path, exception
        )
        detail = "The database is unavailable for a moment; retry the request."
        if request.path.startswith("/api/"):
            response: HttpResponse = JsonResponse(
                {"detail": detail, "errors": [{"field": "body", "reason": detail}]}, status=503
            )
        else:
            response = HttpResponse(detail, status=503, content_type="text/plain")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
