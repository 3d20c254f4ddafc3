"""The API's JSON parser: bodies over JOBS_MAX_REQUEST_BYTES get 413, hostile JSON 400."""

from __future__ import annotations

import json
import threading
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.parsers import JSONParser

from jobs.jsonsafe import json_problem


def _loads(text: str) -> Any:
    """json.loads(text), with nesting judged against the whole recursion limit.

    json's C scanner counts the caller's stack against sys.getrecursionlimit(),
    so the same document parses in a shallow test and fails under gunicorn's,
    middleware's and DRF's frames. On RecursionError the parse is retried once
    on a fresh thread (an empty stack): documents up to the interpreter's
    limit (1000 levels by default) reach jobs.jsonsafe, which names the field
    that is too deep; only deeper ones still raise RecursionError.
    Raises what json.loads raises.
    """
    try:
        return json.loads(text)
    except RecursionError:
        pass
    outcome: dict[str, Any] = {}

    def parse() -> None:
        try:
            outcome["body"] = json.loads(text)
        except BaseException as exc:  # re-raised in the request's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=parse, name="json-deep-parse")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["body"]


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """JSONParser that reads at most JOBS_MAX_REQUEST_BYTES (+1 to detect more).

    Raises RequestTooLarge (413) for a larger body, ParseError (400,
    field "body") for malformed JSON, non-UTF-8 bytes, numbers Python
    refuses to convert or nesting deeper than the interpreter's recursion
    limit, and ValidationError (400 naming the field) for JSON that no later
    layer could store or hash (jobs.jsonsafe): a lone surrogate in a string
    or field name, NaN or an infinite number, NUL, or objects and arrays
    nested deeper than settings.JOBS_JSON_MAX_DEPTH below a top-level field.
    """

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: dict | None = None
    ) -> Any:
        limit = settings.JOBS_MAX_REQUEST_BYTES
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"Request body is {declared} bytes; the limit is {limit} bytes.")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        try:
            body = _loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"Malformed JSON body: not UTF-8 ({exc.reason} at byte {exc.start})."
            ) from exc
        except json.JSONDecodeError as exc:
            raise ParseError(
                f"Malformed JSON body: {exc.msg} at line {exc.lineno} column {exc.colno}."
            ) from exc
        except RecursionError as exc:
            raise ParseError(
                "Malformed JSON body: nested too deeply (objects and arrays may nest at most "
                f"{settings.JOBS_JSON_MAX_DEPTH} levels below a top-level field)."
            ) from exc
        except ValueError as exc:  # e.g. an integer past Python's 4300-digit limit
            raise ParseError(f"Malformed JSON body: {exc}.") from exc
        # Refused here, before DRF's fields and the renderer see it: both
        # recurse, and the renderer cannot encode a lone surrogate.
        problem = json_problem(body, path="", max_depth=settings.JOBS_JSON_MAX_DEPTH, depth=0)
        if problem is not None:
            raise ValidationError({problem.path: [problem.reason]})
        return body
