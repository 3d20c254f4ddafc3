"""Which store holds the shared state that is not a message, chosen once by settings.

Shared state: the retry budget's counters (jobs.budget), cancellation
requests (jobs.cancellation) and the workers' reports (jobs.worker_reports).
DESIGN.md ("Brokers and hosts"): it lives in PostgreSQL or an explicitly
configured store, never implicitly on the broker. JOBS_STATE_STORE names it:

- `postgres`: the database every process already has; each hot decision is
  one statement, judged by the database's `now()`;
- `redis`: the broker's Redis (the embedded SQLite of `make demo`); with a
  broker that is not Redis, only when set explicitly, in the Redis REDIS_URL
  names (a store of its own: "or an explicitly configured store").

Empty (the default) picks `postgres` when the database is PostgreSQL, else
`redis`. jobs.checks refuses a store that cannot work (jobs.E030).
docs/state-store.md has the layout of each.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections

from jobs.reasons import StateStore

REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+socket"})


def configured() -> StateStore:
    """The store this process uses (StateStore). Raises ValueError for an unknown name."""
    name = settings.JOBS_STATE_STORE
    if not name:
        vendor = connections["default"].vendor
        return StateStore.POSTGRES if vendor == "postgresql" else StateStore.REDIS
    return StateStore(name)


def uses_postgres() -> bool:
    """Whether shared state is kept in the database (JOBS_STATE_STORE resolves to postgres)."""
    return configured() == StateStore.POSTGRES


def problem() -> str | None:
    """One readable line saying why the configured store cannot work, or None."""
    try:
        store = configured()
    except ValueError:
        return (
            f"JOBS_STATE_STORE is {settings.JOBS_STATE_STORE!r}; it must be one of "
            f"{', '.join(s.value for s in StateStore)} (or empty: postgres on PostgreSQL, "
            "else redis)"
        )
    if store == StateStore.POSTGRES and connections["default"].vendor != "postgresql":
        return (
            "JOBS_STATE_STORE is postgres but the database is "
            f"{connections['default'].vendor}; use a PostgreSQL DATABASE_URL or "
            "JOBS_STATE_STORE=redis"
        )
    if store == StateStore.REDIS:
        scheme = urlsplit(settings.CELERY_BROKER_URL).scheme
        if scheme not in REDIS_SCHEMES and settings.JOBS_STATE_STORE != StateStore.REDIS:
            return (
                f"the broker is {scheme}://, not Redis, and the database is not PostgreSQL: "
                "shared state has no store; use a PostgreSQL DATABASE_URL, or set "
                "JOBS_STATE_STORE=redis with REDIS_URL naming a Redis of its own"
            )
        if scheme not in REDIS_SCHEMES and urlsplit(settings.REDIS_URL).scheme not in REDIS_SCHEMES:
            return (
                f"JOBS_STATE_STORE is redis and the broker is {scheme}://, but REDIS_URL "
                f"({urlsplit(settings.REDIS_URL).scheme}://) names no Redis to keep the state in"
            )
    return None
