"""A JSON parser that refuses bodies over settings.JOBS_MAX_REQUEST_BYTES with 413."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """JSONParser that reads at most JOBS_MAX_REQUEST_BYTES (+1 to detect more).

    Raises RequestTooLarge (413) for a larger body, ParseError (400) for
    malformed JSON, non-UTF-8 bytes, numbers Python refuses to convert or
    nesting deeper than the interpreter's recursion limit.
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
            return json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ParseError(
                f"Malformed JSON body: not UTF-8 ({exc.reason} at byte {exc.start})."
            ) from exc
        except json.JSONDecodeError as exc:
            raise ParseError(
                f"Malformed JSON body: {exc.msg} at line {exc.lineno} column {exc.colno}."
            ) from exc
        except RecursionError as exc:
            raise ParseError("Malformed JSON body: nested too deeply.") from exc
        except ValueError as exc:  # e.g. an integer past Python's 4300-digit limit
            raise ParseError(f"Malformed JSON body: {exc}.") from exc
