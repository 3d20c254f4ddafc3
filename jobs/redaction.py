"""Secrets out of error text: URL credentials and query strings, and what a job's payload declares secret.

One rule for every error an attempt produces, applied where the error
becomes text (jobs.runner calls `redact_report` once per attempt): the message, the
formatted traceback (chained exceptions included) and the exception the
Celery task raises from, so the job's `last_error`, the attempt's error and
traceback, the worker's log, Celery's task events (Flower) and span
attributes and events all carry the redacted text only.

* `redact(text, secrets)`: in any URL, `user:password@` becomes `***@`, the
  query string `?***` and the fragment `#***`; a bare `?name=value...` (as
  urllib3 writes "url: /path?token=...") becomes `?***`; and every string
  in `secrets` (4 characters or more, also percent-encoded) becomes `***`.
* `payload_secrets(payload)`: the strings of a payload an error may echo in
  another form: URL passwords, user names and query values (and the Basic
  credentials requests makes of them), and every value of a `headers` map.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

logger = logging.getLogger(__name__)

REDACTED = "***"
# Shorter declared secrets are not replaced (they would blank out ordinary words).
MIN_SECRET_CHARS = 4
_STOP = r"\s'\"<>`"
# Punctuation that ends a sentence or a repr after a URL stays outside it.
_TAIL = rf"(?=[:;,.)\]]*(?:[{_STOP}]|$))"
_URL = re.compile(
    rf"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)"
    rf"(?P<userinfo>[^{_STOP}/?#]*@)?"
    rf"(?P<hostpath>[^{_STOP}?#]*?)"
    rf"(?P<query>\?[^{_STOP}#]*?)?"
    rf"(?P<fragment>#[^{_STOP}]*?)?{_TAIL}"
)
# A query string outside a full URL: "?" then something with "=" up to a space or quote.
_BARE_QUERY = re.compile(rf"\?(?=[^{_STOP}]*=)[^{_STOP}#]+?{_TAIL}")


def _redact_url(match: re.Match[str]) -> str:
    return (
        match["scheme"]
        + (f"{REDACTED}@" if match["userinfo"] else "")
        + match["hostpath"]
        + (f"?{REDACTED}" if match["query"] and len(match["query"]) > 1 else match["query"] or "")
        + (f"#{REDACTED}" if match["fragment"] and len(match["fragment"]) > 1 else "")
    )


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with URL credentials, query strings, fragments and each of `secrets` replaced."""
    if not text:
        return text
    for secret in sorted(_variants(secrets), key=len, reverse=True):
        # Whole tokens only: a short header value must not blank out longer words.
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", REDACTED, text)
    text = _URL.sub(_redact_url, text)
    return _BARE_QUERY.sub(f"?{REDACTED}", text)


def _variants(secrets: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            found.update({secret, quote(secret, safe=""), quote_plus(secret)})
    return found


def payload_secrets(payload: Any) -> frozenset[str]:
    """Strings of `payload` (any JSON) that error text must not show, in any form it may take."""
    found: set[str] = set()
    _collect(payload, found, key="")
    return frozenset(s for s in found if len(s) >= MIN_SECRET_CHARS)


def _collect(value: Any, found: set[str], *, key: str) -> None:
    if isinstance(value, Mapping):
        for name, item in value.items():
            if str(name).lower() == "headers" and isinstance(item, Mapping):
                for header in item.values():
                    if isinstance(header, str):
                        found.update(_header_secrets(header))
            _collect(item, found, key=str(name))
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found, key=key)
    elif isinstance(value, str) and "://" in value:
        found.update(_url_secrets(value))


def _header_secrets(value: str) -> set[str]:
    # "Bearer <token>": the token alone may be echoed too.
    parts = value.split(None, 1)
    return {value, *(parts[1:] if len(parts) == 2 else [])}


@cache
def _url_secrets(url: str) -> frozenset[str]:
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
    except ValueError:
        return frozenset()
    found: set[str] = set()
    for item in (username, password):
        if item:
            found.update({item, unquote(item)})
    if username is not None or password is not None:
        basic = f"{unquote(username or '')}:{unquote(password or '')}"
        found.add(base64.b64encode(basic.encode("latin-1", "replace")).decode())
    for _name, query_value in parse_qsl(parts.query, keep_blank_values=False):
        found.add(query_value)
    if parts.fragment:
        found.add(parts.fragment)
    return frozenset(found)


class RedactedError(Exception):
    """Stand-in for an exception whose text held a secret: same class name, redacted message."""


_stand_in_classes: dict[tuple[str, str], type[RedactedError]] = {}


def _stand_in_class(original: type[BaseException]) -> type[RedactedError]:
    # Named (module and qualified name) as the original, so a formatted
    # traceback reads as before; never pickled (tracebacks travel as text).
    key = (original.__module__, original.__qualname__)
    cls = _stand_in_classes.get(key)
    if cls is None:
        cls = type(
            original.__name__, (RedactedError,), {"__module__": key[0], "__qualname__": key[1]}
        )
        _stand_in_classes[key] = cls
    return cls


def redact_exception(exc: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """A stand-in of `exc` and its chain (cause, context, notes) with every text redacted.

    Each stand-in keeps its original's traceback (frames, not text), so a
    traceback formatted from it shows where it failed, and what it said
    redacted.
    """
    secrets = frozenset(secrets)
    return _stand_in(exc, secrets, {})


def _stand_in(
    exc: BaseException, secrets: frozenset[str], done: dict[int, BaseException]
) -> BaseException:
    if id(exc) in done:
        return done[id(exc)]
    stand_in = _stand_in_class(type(exc))(redact(str(exc), secrets))
    done[id(exc)] = stand_in
    stand_in.__traceback__ = exc.__traceback__
    for note in getattr(exc, "__notes__", ()):
        stand_in.add_note(redact(str(note), secrets))
    if exc.__cause__ is not None:
        stand_in.__cause__ = _stand_in(exc.__cause__, secrets, done)
    if exc.__context__ is not None:
        stand_in.__context__ = _stand_in(exc.__context__, secrets, done)
    stand_in.__suppress_context__ = exc.__suppress_context__
    return stand_in


class _Report(Protocol):
    @property
    def error_message(self) -> str: ...
    @property
    def traceback(self) -> str: ...
    @property
    def exception(self) -> BaseException | None: ...


R = TypeVar("R", bound=_Report)


def secrets_of(kind: Any, payload: dict[str, Any]) -> frozenset[str]:
    """What `kind` (a jobs.kinds.Kind) says error text must not show of `payload` (`secret_values`).

    A kind's hook that raises costs nothing but a log line: the default rule
    (`payload_secrets`) is used instead.
    """
    try:
        return frozenset(kind.secret_values(payload))
    except Exception:
        logger.exception("secret_values of kind %s failed; using the default rule", kind.name)
        return payload_secrets(payload)


def redact_report(report: R, secrets: Iterable[str] = ()) -> R:
    """`report` (a frozen dataclass: jobs.services.AttemptReport) with its message, traceback
    and exception chain redacted; unchanged when it holds no error."""
    if not (report.error_message or report.traceback or report.exception is not None):
        return report
    secrets = frozenset(secrets)
    return dataclasses.replace(  # type: ignore[type-var]
        report,
        error_message=redact(report.error_message, secrets),
        traceback=redact(report.traceback, secrets),
        exception=(
            redact_exception(report.exception, secrets) if report.exception is not None else None
        ),
    )
