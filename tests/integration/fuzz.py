"""Property-based fuzzing of the live API: no request may get a server error.

Three sources of requests, all Hypothesis strategies, all sent to a real
gunicorn over HTTP:

- schemathesis, reading `/api/schema/` from the server: every operation,
  with data that fits the schema and data that breaks it;
- hand-written bodies for POST /api/jobs/, built as JSON *text*, so they
  can hold what `json.dumps` never writes: lone surrogate escapes, NUL,
  bidirectional controls, characters outside the BMP (escaped as pairs or
  sent as UTF-8, or as CESU-8 bytes a strict decoder refuses), numbers
  such as 1e400, -0.0, NaN, Infinity and integers of thousands of digits,
  objects and arrays nested up to 3,000 deep, hostile keys, header names,
  header values and Idempotency-Key headers;
- hand-written query strings for GET /api/jobs/ (NUL, surrogates as
  CESU-8 bytes, strange numbers, unknown parameters).

Every response must be below 500, and every 4xx must be the API's error
shape (except gunicorn's own 414/431 for a request line or header over
its limits, counted apart). Failures are collected in a `Tally` (not
raised at once), so one run reports every server error and the number of
requests sent.

The strategies are in tests/integration/fuzz_strategies.py. Used by
tests/integration/test_fuzz_api.py (a few hundred requests, in the
default suite) and bench/fuzz_api.py (10,000 and more, on demand).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import requests
from hypothesis import HealthCheck, Phase, given, settings
from requests import Response

from tests.integration.fuzz_strategies import list_query, submission

HTTP_TIMEOUT = 30

# gunicorn answers these itself, with an HTML page, when a request line or
# header is over its limits (limit_request_line 4094 bytes, ...): the
# application never sees the request, so its error shape cannot apply.
GUNICORN_LIMITS = frozenset({414, 431})


@dataclass
class Tally:
    """What a fuzzing run sent and got back."""

    requests: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    # (source, what was sent, status, start of the response): one per failure.
    server_errors: list[tuple[str, str, int, str]] = field(default_factory=list)
    bad_shapes: list[tuple[str, str, int, str]] = field(default_factory=list)
    # Refused by gunicorn before the application saw them (its own HTML page).
    gunicorn_limits: int = 0

    def record(self, source: str, sent: str, response: Response) -> None:
        """Count `response`; keep it when it is a 5xx or a 4xx not in the error shape."""
        self.requests += 1
        self.by_source[source] += 1
        self.statuses[response.status_code] += 1
        failure = (source, sent[:600], response.status_code, response.text[:300])
        if response.status_code >= 500:
            self.server_errors.append(failure)
        elif response.status_code in GUNICORN_LIMITS and not _error_shape(response):
            self.gunicorn_limits += 1
        elif response.status_code >= 400 and not _error_shape(response):
            self.bad_shapes.append(failure)

    def summary(self) -> str:
        """One paragraph: requests by source, statuses, failures."""
        sources = ", ".join(f"{k} {v}" for k, v in sorted(self.by_source.items()))
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"{self.requests} requests ({sources}); statuses {statuses}; "
            f"server errors {len(self.server_errors)}; 4xx outside the error shape "
            f"{len(self.bad_shapes)}; refused by gunicorn's limits {self.gunicorn_limits}"
        )


def _error_shape(response: Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return (
        isinstance(body, dict)
        and isinstance(body.get("detail"), str)
        and isinstance(body.get("errors"), list)
        and all(isinstance(e, dict) and {"field", "reason"} <= set(e) for e in body["errors"])
    )


def _settings(examples: int, seed: int | None) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        # Generation only: no shrinking (a failure is recorded, not raised)
        # and no example database (nothing to replay, nothing written).
        phases=[Phase.generate],
        database=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
    )


def fuzz_submissions(
    base_url: str, session: requests.Session, *, examples: int, tally: Tally, seed: int | None
) -> None:
    """POST `examples` hand-written bodies; GET every job accepted (its stored payload renders).

    `seed` None runs Hypothesis derandomized (the same requests every
    run); an int seeds a fresh random run.
    """

    @_settings(examples, seed)
    @given(sample=submission())
    def run(sample: tuple[bytes, dict[str, bytes]]) -> None:
        body, headers = sample
        sent = f"POST /api/jobs/ {headers!r} {body[:500]!r}"
        try:
            response = session.post(
                f"{base_url}/api/jobs/",
                data=body,
                headers={"Content-Type": "application/json", **headers},
                timeout=HTTP_TIMEOUT,
            )
        except (ValueError, requests.exceptions.InvalidHeader):
            return  # the client refused to send it: not a request
        tally.record("bodies", sent, response)
        if response.status_code in (200, 202):
            job_url = response.json()["url"]
            tally.record(
                "bodies", f"GET {job_url} after {sent}", session.get(job_url, timeout=HTTP_TIMEOUT)
            )

    _seeded(run, seed)()


def fuzz_queries(
    base_url: str, session: requests.Session, *, examples: int, tally: Tally, seed: int | None
) -> None:
    """GET /api/jobs/ with `examples` hand-written query strings."""

    @_settings(examples, seed)
    @given(query=list_query())
    def run(query: str) -> None:
        sent = f"GET /api/jobs/?{query}"
        tally.record(
            "queries", sent, session.get(f"{base_url}/api/jobs/?{query}", timeout=HTTP_TIMEOUT)
        )

    _seeded(run, seed)()


def fuzz_schema(
    base_url: str,
    token: str,
    *,
    examples: int,
    tally: Tally,
    seed: int | None,
    headers: dict[str, str] | None = None,
) -> None:
    """Schemathesis over `/api/schema/`: `examples` cases per mode (positive, negative).

    `headers` go with every request (e.g. what a reverse proxy would add).
    """
    import schemathesis  # noqa: PLC0415 - import cost: schemathesis only for the fuzz tests
    from schemathesis import GenerationMode  # noqa: PLC0415 - import cost: schemathesis only for the fuzz tests

    schema = schemathesis.openapi.from_url(
        f"{base_url}/api/schema/", timeout=HTTP_TIMEOUT, headers=headers or {}
    )
    with requests.Session() as session:
        session.headers.update(headers or {})
        session.headers["Authorization"] = f"Token {token}"
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run = _schema_run(
                schema.as_strategy(generation_mode=mode),
                source=f"schemathesis-{mode.value}",
                base_url=base_url,
                session=session,
                examples=examples,
                tally=tally,
                seed=seed,
            )
            run()


def _schema_run(
    strategy: Any,
    *,
    source: str,
    base_url: str,
    session: requests.Session,
    examples: int,
    tally: Tally,
    seed: int | None,
) -> Any:
    @_settings(examples, seed)
    @given(case=strategy)
    def run(case: Any) -> None:
        sent = f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}"
        try:
            response = case.call(base_url=base_url, session=session, timeout=HTTP_TIMEOUT)
        except (ValueError, requests.exceptions.InvalidHeader, UnicodeEncodeError):
            return  # the client refused to send it: not a request
        tally.record(source, sent, response)

    return _seeded(run, seed)


def _seeded(run: Any, seed: int | None) -> Any:
    from hypothesis import seed as hypothesis_seed  # noqa: PLC0415 - import cost: hypothesis only for the fuzz tests

    return run if seed is None else hypothesis_seed(seed)(run)


def fresh_seed() -> int:
    """A seed for a random run, printed by callers so a run can be repeated."""
    return random.SystemRandom().randrange(2**32)
