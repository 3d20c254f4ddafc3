"""The API under property-based fuzzing: a few hundred generated requests, no server error.

Issue 8, item 5, "the kind": schemathesis over /api/schema/ plus
hand-written strategies for strings, numbers and depth (tests/integration/
fuzz.py), against real gunicorn + PostgreSQL. Derandomized here, so the
suite sends the same requests every run; `python -m bench.fuzz_api` sends
10,000 fresh ones on demand (docs/benchmarks.md).
"""

from __future__ import annotations

import pytest

from tests.integration.fuzz import Tally, fuzz_queries, fuzz_schema, fuzz_submissions
from tests.integration.harness import Platform

pytestmark = pytest.mark.integration

BODIES = 120
QUERIES = 60
SCHEMA_CASES_PER_MODE = 50


@pytest.mark.timeout(180)
def test_fuzz_api_gives_no_server_error(api_platform: Platform) -> None:
    # given the three generators, derandomized
    tally = Tally()

    # when each sends its requests to the live server
    fuzz_submissions(
        api_platform.base_url, api_platform.session, examples=BODIES, tally=tally, seed=None
    )
    fuzz_queries(
        api_platform.base_url, api_platform.session, examples=QUERIES, tally=tally, seed=None
    )
    fuzz_schema(
        api_platform.base_url,
        api_platform.token,
        examples=SCHEMA_CASES_PER_MODE,
        tally=tally,
        seed=None,
    )

    print(tally.summary())  # shown with `pytest -rP`
    # then no response was a 5xx, and every 4xx was in the API's error shape
    failures = "\n".join(map(repr, (tally.server_errors + tally.bad_shapes)[:10]))
    assert not tally.server_errors, f"{tally.summary()}\n{failures}"
    assert not tally.bad_shapes, f"{tally.summary()}\n{failures}"
    # and the run was the size it claims, with some requests accepted and stored
    assert tally.requests >= 250, tally.summary()
    assert tally.statuses[202] > 0, tally.summary()
