"""The retry budget per kind: a window counter shared by every worker, in the state store.

The state store (jobs.state_store) is PostgreSQL (jobs.budget_pg: the same
rule, one statement per decision) or Redis (the Lua script of jobs.budget_lua);
every function here takes the configured one unless a Redis `client` is given.

Rule (DESIGN.md "Retries"; after Envoy's retry budget, 20% of active
requests with a floor of 3, and the client-side budgets of Google's SRE
book, ch. 22): in each window of JOBS_RETRY_BUDGET_WINDOW seconds, retries
may not exceed JOBS_RETRY_BUDGET_RATIO x first attempts + JOBS_RETRY_BUDGET_FLOOR.

Windows are aligned on the epoch (window k is [k*W, (k+1)*W) in seconds of
the deciding host's clock), one Redis hash per kind and window, fields:
`f` first attempts started in it, `r` retries due in it, `x` set once the
window's budget was found spent (the once-per-window log line). Each hash
expires after the longest deferral plus two windows, so nothing needs
cleaning.

- `record_first(kind, now)`: attempt 1 of a job started; one pipelined
  HINCRBY + EXPIRE (one round trip, fire-and-forget: a failure is logged at
  DEBUG and forgotten).
- `reserve(kind, now, due)`: the retry decision's one round trip (a Lua
  script, atomic across workers). The retry is counted in the window of its
  due time when that window has room, else in the next window with room,
  at a random time in it (spreading deferred retries), as long as that is
  at most JOBS_RETRY_BUDGET_MAX_DEFERRAL seconds after `due`. A due time
  within GUARD seconds of its window's end counts in both windows: the
  attempt may start in the next one (scheduler tick, queue wait).

- `admit(kind, due, now)`: a retry starting in another window than the
  ones its reservation counted (it waited in a busy queue) is counted again
  where it starts, or held (jobs.engine.backends.orm): attempts are judged by
  when they start.

A window's limit counts only the first attempts already seen in it: a
window in the future has seen none, so a deferral lands in the floor of
the windows ahead. The budget is a guarantee, never an estimate that
traffic might not honour. The price: a retry whose backoff (or
Retry-After) reaches into a window that has not begun competes for that
window's floor plus the first attempts already seen there; with a steady
failure rate near the ratio, such boundary-crossing retries are the first
deferred. Windows are aligned rather than sliding because a sliding
window's future first attempts are unknown: every sliding window holding
a retry due from now on would get the floor only. The cost is bounded by the number of windows a
deferral may cross (MAX_DEFERRAL / W + 2 hash reads), whatever the number
of attempts in the window.

If Redis cannot be reached within JOBS_RETRY_BUDGET_REDIS_TIMEOUT seconds
the answer is `fallback`: the caller keeps the normal backoff.
"""

from __future__ import annotations

import functools
import logging
import random
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobs import budget_pg, state_store
from jobs.broker_transport import redis_client
from jobs.budget_lua import RESERVE_SCRIPT

logger = logging.getLogger(__name__)

# The last seconds of a window where a due retry may start in the next one.
GUARD_FRACTION = 1 / 12


@dataclass(frozen=True)
class BudgetConfig:
    """The budget's settings: window, max_deferral and timeout in seconds; ratio and floor in retries."""

    window: float
    ratio: float
    floor: int
    max_deferral: float
    key_prefix: str

    @classmethod
    def from_settings(cls) -> BudgetConfig:
        return cls(
            window=settings.JOBS_RETRY_BUDGET_WINDOW,
            ratio=settings.JOBS_RETRY_BUDGET_RATIO,
            floor=settings.JOBS_RETRY_BUDGET_FLOOR,
            max_deferral=settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL,
            key_prefix=settings.JOBS_RETRY_BUDGET_KEY_PREFIX,
        )

    @property
    def ttl(self) -> int:
        """Seconds a window's hash is kept: the longest deferral plus two windows."""
        return int(self.max_deferral + 2 * self.window) + 1

    def key(self, kind: str, window_index: int) -> str:
        """The hash of `kind` for window `window_index`."""
        return f"{self.key_prefix}{{{kind}}}:{window_index}"


@dataclass(frozen=True)
class Reservation:
    """The budget's answer for one retry.

    `granted`: a slot was found; `due` (epoch seconds) is when the retry may
    start (the asked due time, or later when deferred). `deferred` says the
    slot is later than asked. `fallback`: Redis could not be asked, nothing
    was counted, the retry keeps its due time. `first_exhaustion`: this is
    the first retry of the window found over budget (log it once).
    `used`/`limit`: retries counted and allowed in the asked window before it.
    `asked` is the due time asked for.
    """

    granted: bool
    due: float
    asked: float
    deferred: bool = False
    fallback: bool = False
    first_exhaustion: bool = False
    used: int = 0
    limit: float = 0.0

    @property
    def added_seconds(self) -> float:
        """Seconds the budget added to the asked due time (0 unless deferred)."""
        return self.due - self.asked if self.deferred else 0.0


@functools.cache
def _client(url: str, timeout: float) -> redis.Redis:
    # One pool per process and URL. Short timeouts: a decision never stalls a
    # worker for long when Redis is away; it falls back instead.
    return redis_client(
        url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        protocol=2,
        # No reconnect-and-retry loop (redis-py's default retries 3 times).
        retry=Retry(NoBackoff(), 0),
    )


def budget_client() -> redis.Redis:
    """The Redis client of the budget (JOBS_RETRY_BUDGET_REDIS_URL, by default the broker's,
    or REDIS_URL's when the broker is not Redis)."""
    default = (
        settings.CELERY_BROKER_URL if settings.JOBS_BROKER_KIND == "redis" else settings.REDIS_URL
    )
    url = settings.JOBS_RETRY_BUDGET_REDIS_URL or default
    return _client(url, settings.JOBS_RETRY_BUDGET_REDIS_TIMEOUT)


@functools.cache
def _script(client: redis.Redis) -> Any:
    return client.register_script(RESERVE_SCRIPT)


def record_first(
    kind: str, *, now: float, config: BudgetConfig | None = None, client: redis.Redis | None = None
) -> bool:
    """Count a first attempt of `kind` started at `now` (epoch seconds). Returns False if Redis failed.

    Redis: one pipelined round trip (HINCRBY, EXPIRE). PostgreSQL: counted
    in memory, written at most every JOBS_RETRY_BUDGET_FLUSH_SECONDS
    (jobs.budget_pg). Never raises.
    """
    config = config or BudgetConfig.from_settings()
    if client is None and state_store.uses_postgres():
        budget_pg.record_first(kind, now=now, width=config.window)
        return True
    key = config.key(kind, int(now // config.window))
    try:
        pipe = (client or budget_client()).pipeline(transaction=False)
        pipe.hincrby(key, "f", 1)
        pipe.expire(key, config.ttl)
        pipe.execute()
    except (redis.RedisError, ValueError) as exc:  # ValueError: a URL that is not Redis's
        logger.debug("retry budget: first attempt of %s not counted: %s", kind, exc)
        return False
    return True


def reserve(
    kind: str,
    *,
    now: float,
    due: float,
    config: BudgetConfig | None = None,
    client: redis.Redis | None = None,
    spread: float | None = None,
    release: tuple[int, ...] = (),
) -> Reservation:
    """Reserve a slot for one retry of `kind` wanted at `due` (epoch seconds; `now` <= `due`).

    One round trip (an atomic Lua script). Returns a Reservation; when Redis
    cannot be reached or fails, `fallback=True` with the asked due time.
    `spread` (0..1, random by default) places a deferred retry in its window.
    `release`: up to two window indices where this retry was counted before
    (`admit`), uncounted in the same script first. Never raises.
    """
    config = config or BudgetConfig.from_settings()
    guard = config.window * GUARD_FRACTION
    if client is None and state_store.uses_postgres():
        return _reserve_pg(kind, due=due, config=config, spread=spread, release=release)
    try:
        client = client or budget_client()
        granted, slot, exhausted, used, limit = _script(client)(
            args=[
                config.key(kind, 0)[:-1],  # the prefix, ending with ":"
                repr(due),
                repr(config.window),
                repr(config.ratio),
                config.floor,
                repr(due + config.max_deferral),
                repr(guard),
                repr(random.random() if spread is None else spread),
                config.ttl,
                repr(now),
                *[str(k) for k in release[:2]],
                *[""] * (2 - len(release[:2])),
            ]
        )
    except (redis.RedisError, ValueError) as exc:  # ValueError: a URL that is not Redis's
        logger.debug("retry budget: no answer for %s, retry allowed: %s", kind, exc)
        return Reservation(granted=True, due=due, asked=due, fallback=True)
    added = float(slot)
    return Reservation(
        granted=bool(granted),
        due=due + added,
        asked=due,
        deferred=bool(granted) and added > 0,
        first_exhaustion=int(exhausted) == 1,
        used=int(used),
        limit=float(limit),
    )


def _reserve_pg(
    kind: str,
    *,
    due: float,
    config: BudgetConfig,
    spread: float | None,
    release: tuple[int, ...],
) -> Reservation:
    answer = budget_pg.reserve(
        kind,
        due=due,
        width=config.window,
        ratio=config.ratio,
        floor=config.floor,
        max_deferral=config.max_deferral,
        guard=config.window * GUARD_FRACTION,
        spread=random.random() if spread is None else spread,
        ttl=config.ttl,
        release=release,
    )
    if answer is None:
        return Reservation(granted=True, due=due, asked=due, fallback=True)
    granted, added, exhausted, used, limit = answer
    return Reservation(
        granted=granted,
        due=due + added,
        asked=due,
        deferred=granted and added > 0,
        first_exhaustion=exhausted == 1,
        used=used,
        limit=limit,
    )


def window_counts(
    kinds: list[str], *, now: float, config: BudgetConfig | None = None
) -> dict[str, tuple[int, float]]:
    """{kind: (retries counted, limit)} in the window holding `now`, in one pipeline.

    For the jobs_retry_budget_used / _limit gauges. Raises redis.RedisError
    (PostgreSQL store: DatabaseError; the window is that of the database's now()).
    """
    config = config or BudgetConfig.from_settings()
    if state_store.uses_postgres():
        return budget_pg.window_counts(
            kinds, width=config.window, ratio=config.ratio, floor=config.floor
        )
    index = int(now // config.window)
    pipe = budget_client().pipeline(transaction=False)
    for kind in kinds:
        pipe.hmget(config.key(kind, index), "f", "r")
    answers = pipe.execute()
    return {
        kind: (int(r or 0), config.ratio * int(f or 0) + config.floor)
        for kind, (f, r) in zip(kinds, answers, strict=True)
    }


# How far inside the bounds admitted_due_range keeps its answer: the database
# compares its own epoch arithmetic (microseconds on PostgreSQL, milliseconds
# on SQLite) with these floats.
ADMITTED_MARGIN_SECONDS = 0.01


def admitted_due_range(now: float, config: BudgetConfig | None = None) -> tuple[float, float]:
    """The due times (epoch seconds, inclusive) of retries that `admit` lets start at `now` unasked.

    `admit` returns None (counted where it starts, no round trip) exactly
    when `due` lies in (k·W − guard, (k + 1)·W), k = ⌊now / W⌋, W the window
    and guard = W · GUARD_FRACTION: the due time is in now's window, or in
    the previous window's last `guard` seconds (counted in both). The range
    returned is that interval narrowed by ADMITTED_MARGIN_SECONDS at each
    end, so a due time inside it is one `admit` would pass; one outside it
    must go through `admit`. Used by the attempt fast path
    (jobs.engine.backends.postgres) to start such retries in one statement.
    """
    config = config or BudgetConfig.from_settings()
    start = int(now // config.window) * config.window
    guard = config.window * GUARD_FRACTION
    return (
        start - guard + ADMITTED_MARGIN_SECONDS,
        start + config.window - ADMITTED_MARGIN_SECONDS,
    )


def admit(
    kind: str,
    *,
    due: float,
    now: float,
    config: BudgetConfig | None = None,
    client: redis.Redis | None = None,
) -> Reservation | None:
    """Check, as retry attempt of `kind` reserved for `due` starts at `now`, that it was counted there.

    A retry waits in the queue after its due time (a busy worker): it may
    start in a later window than the one its reservation counted it in, and
    the rule is judged by when attempts start. None (no round trip) when
    `now` is in a window the reservation counted. Otherwise one round trip
    moves the count to `now`'s window (`reserve(due=now)` releasing the old
    one): granted at `now` (start it), deferred (do not start it: wait for
    the returned slot) or not granted (dead "budget"). Never raises;
    `fallback` when Redis did not answer (start it).
    """
    config = config or BudgetConfig.from_settings()
    guard = config.window * GUARD_FRACTION
    due_index = int(due // config.window)
    counted = [due_index]
    if (due_index + 1) * config.window - due < guard:
        counted.append(due_index + 1)
    if int(now // config.window) in counted:
        return None
    return reserve(kind, now=now, due=now, config=config, client=client, release=tuple(counted))
