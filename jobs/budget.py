"""The retry budget per kind: a window counter in Redis, shared by every worker.

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

- `record_first(kind, now)`: attempt 1 of a job started; counted in this
  process (jobs.first_tally) and written as pipelined HINCRBY + EXPIRE once
  the oldest count has waited JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS, or at
  a worker child's exit (0: one round trip per first attempt). Until then
  the window's limit is lower, never higher. Fire-and-forget: a failure is logged at
  DEBUG and forgotten.
- `reserve(kind, now, due)`: the retry decision's one round trip (a Lua
  script, atomic across workers). The retry is counted in the window of its
  due time when that window has room, else in the next window with room,
  at a random time in it (spreading deferred retries), as long as that is
  at most JOBS_RETRY_BUDGET_MAX_DEFERRAL seconds after `due`. A due time
  within GUARD seconds of its window's end counts in both windows: the
  attempt may start in the next one (scheduler tick, queue wait).

- `admit(kind, due, now)`: a retry starting in another window than the
  ones its reservation counted (it waited in a busy queue) is counted again
  where it starts, or held (jobs.services.attempt_start): attempts are judged by
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
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobs.broker_transport import redis_client
from jobs.first_tally import FirstTally

logger = logging.getLogger(__name__)

# The last seconds of a window where a due retry may start in the next one.
GUARD_FRACTION = 1 / 12

# KEYS: none (the keys are built from ARGV[1], a prefix with the kind in a hash
# tag, so one kind's windows live on one cluster slot).
# ARGV: prefix, due, window, ratio, floor, last (latest acceptable slot),
#       guard, spread (0..1), ttl (seconds), now, and up to two windows whose
#       count of retries is released first ("" for none; see `admit`).
# Returns {granted 0/1, slot - due (string seconds), first_exhaustion 0/1 (2: not the
# first), used, limit}
# where used/limit are those of the window of `due` before this retry.
_RESERVE = """
local prefix = ARGV[1]
local due = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local ratio = tonumber(ARGV[4])
local floor_ = tonumber(ARGV[5])
local last = tonumber(ARGV[6])
local guard = tonumber(ARGV[7])
local spread = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local now = tonumber(ARGV[10])
local function counts(k)
  local v = redis.call('HMGET', prefix .. k, 'f', 'r')
  return tonumber(v[1] or 0), tonumber(v[2] or 0)
end
local function room(k)
  local f, r = counts(k)
  return r + 1 <= ratio * f + floor_
end
local function take(k)
  redis.call('HINCRBY', prefix .. k, 'r', 1)
  redis.call('EXPIRE', prefix .. k, ttl)
end
local function release(k)
  if k and tonumber(redis.call('HGET', prefix .. k, 'r') or 0) > 0 then
    redis.call('HINCRBY', prefix .. k, 'r', -1)
  end
end
release(tonumber(ARGV[11]))
release(tonumber(ARGV[12]))
local k0 = math.floor(due / w)
local f0, r0 = counts(k0)
local t = due
local exhausted = 0
while t <= last do
  local k = math.floor(t / w)
  local edge = (k + 1) * w - t < guard
  if room(k) and ((not edge) or room(k + 1)) then
    take(k)
    if edge then take(k + 1) end
    return {1, string.format('%.17g', t - due), exhausted, r0, tostring(ratio * f0 + floor_)}
  end
  if exhausted == 0 then
    local mark = prefix .. math.floor(now / w)
    if redis.call('HSETNX', mark, 'x', 1) == 1 then
      exhausted = 1
      redis.call('EXPIRE', mark, ttl)
    else
      exhausted = 2
    end
  end
  local start = (k + 1) * w
  t = start + spread * (w - guard)
  if t > last and start <= last then t = last end
end
return {0, '0', exhausted, r0, tostring(ratio * f0 + floor_)}
"""


@dataclass(frozen=True)
class BudgetConfig:
    """The budget's settings: window, max_deferral and timeout in seconds; ratio and floor in retries."""

    window: float
    ratio: float
    floor: int
    max_deferral: float
    key_prefix: str
    # Seconds a first attempt's count may wait in its process (jobs.first_tally); 0: none.
    first_flush: float = 0.0

    @classmethod
    def from_settings(cls) -> BudgetConfig:
        return cls(
            window=settings.JOBS_RETRY_BUDGET_WINDOW,
            ratio=settings.JOBS_RETRY_BUDGET_RATIO,
            floor=settings.JOBS_RETRY_BUDGET_FLOOR,
            max_deferral=settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL,
            key_prefix=settings.JOBS_RETRY_BUDGET_KEY_PREFIX,
            first_flush=settings.JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS,
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
    """The Redis client of the budget (JOBS_RETRY_BUDGET_REDIS_URL, by default the broker's)."""
    url = settings.JOBS_RETRY_BUDGET_REDIS_URL or settings.CELERY_BROKER_URL
    return _client(url, settings.JOBS_RETRY_BUDGET_REDIS_TIMEOUT)


@functools.cache
def _script(client: redis.Redis) -> Any:
    return client.register_script(_RESERVE)


def record_first(
    kind: str,
    *,
    now: float,
    config: BudgetConfig | None = None,
    client: redis.Redis | None = None,
    tally: FirstTally | None = None,
) -> bool:
    """Count a first attempt of `kind` started at `now` (epoch seconds). Returns False if Redis failed.

    With `config.first_flush` > 0 the count waits in `tally` (default: this
    process's) and the pending counts are written together once the oldest
    has waited that long (True meanwhile); else at once. One pipelined round
    trip (HINCRBY, EXPIRE per window hash). Never raises.
    """
    config = config or BudgetConfig.from_settings()
    key = config.key(kind, int(now // config.window))
    if config.first_flush <= 0:
        return _write_firsts({key: 1}, config=config, client=client)
    tally = tally or first_tally()
    if not tally.add(key, at=time.monotonic(), flush_after=config.first_flush):
        return True
    return _write_firsts(tally.take(), config=config, client=client)


def flush_firsts(
    *,
    config: BudgetConfig | None = None,
    client: redis.Redis | None = None,
    tally: FirstTally | None = None,
) -> bool:
    """Write the first attempts still counted in `tally` (default: this process's). Never raises.

    True when there were none or they were written; False if Redis failed
    (they are forgotten: the budget's limit stays lower, never higher).
    """
    counts = (tally or first_tally()).take()
    if not counts:
        return True
    return _write_firsts(counts, config=config or BudgetConfig.from_settings(), client=client)


def first_tally() -> FirstTally:
    """This process's FirstTally (a forked child gets its own)."""
    return _tally(os.getpid())


@functools.cache
def _tally(pid: int) -> FirstTally:
    return FirstTally(pid=pid)


def _write_firsts(
    counts: dict[str, int], *, config: BudgetConfig, client: redis.Redis | None
) -> bool:
    try:
        pipe = (client or budget_client()).pipeline(transaction=False)
        for key, count in counts.items():
            pipe.hincrby(key, "f", count)
            pipe.expire(key, config.ttl)
        pipe.execute()
    except redis.RedisError as exc:
        logger.debug("retry budget: %s first attempts not counted: %s", sum(counts.values()), exc)
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
    (`admit`), uncounted in the same script first. First attempts still
    waiting in a process's tally (jobs.first_tally) are not in the limit
    yet: it is lower for at most JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS,
    never higher. Never raises.
    """
    config = config or BudgetConfig.from_settings()
    guard = config.window * GUARD_FRACTION
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
    except redis.RedisError as exc:
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


def window_counts(
    kinds: list[str], *, now: float, config: BudgetConfig | None = None
) -> dict[str, tuple[int, float]]:
    """{kind: (retries counted, limit)} in the window holding `now`, in one pipeline.

    For the jobs_retry_budget_used / _limit gauges. Raises redis.RedisError.
    """
    config = config or BudgetConfig.from_settings()
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
    (jobs.services.attempt_sql) to start such retries in one statement.
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
