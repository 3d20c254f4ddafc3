"""The start statement with and without issue 24's start-time checks, for bench.attempt_cpu.

`python -m bench.attempt_cpu START_CHECKS=on,off` alternates blocks of
attempts between the engine as shipped and the same engine whose start
statement lacks the flow-control conditions an unlimited kind still pays
for: the pause subquery (`not_paused` in jobs/engine/sql/shared.sql) and the
fuse's lease condition (`_lease ... IS NOT NULL`), with the backend's limit
and rate lookups answering "none". Measurement only: never imported by the
platform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PAUSE_CHECK_START = "AND (\n          SELECT count(*) FROM jobs_pause"
LEASE_CHECK = (
    "AND %(now)s + make_interval(secs => (%(leases)s::jsonb ->> kind)::float8) IS NOT NULL"
)


def without_checks(start: str) -> str:
    """`start`'s text without the pause subquery and the fuse's lease condition.

    Raises AssertionError when the statement no longer holds them as written
    here (the SQL changed: update this module).
    """
    begin = start.index(PAUSE_CHECK_START)
    end = start.index(") = 0", begin) + len(") = 0")
    plain = start[:begin] + start[end:]
    assert plain.count(LEASE_CHECK) == 1, "the start's lease condition changed"
    return plain.replace(LEASE_CHECK, "")


def switch() -> Callable[[bool], None]:
    """A function turning the checks on (as shipped) or off in this process (after
    django.setup())."""
    # Why here: the engine's modules need Django set up.
    from jobs.engine.backends import postgres  # noqa: PLC0415

    shipped_queries = postgres.sql.queries
    backend = postgres.PostgresBackend
    shipped = (backend.limits, backend.rates)

    def plain_queries(dialect: str, *, fused: bool = False) -> dict[str, str]:
        found = dict(shipped_queries(dialect, fused=fused))
        found["start"] = without_checks(found["start"])
        return found

    def none(self: Any) -> dict[str, Any]:
        return {}

    def turn(on: bool) -> None:
        postgres.sql.queries = shipped_queries if on else plain_queries  # type: ignore[assignment]
        backend.limits, backend.rates = shipped if on else (none, none)  # type: ignore[method-assign]

    return turn
