"""The fuse's state machine, pure: a circuit breaker per kind (and destination host).

No database, no clock: every function takes the state and `now` (epoch
seconds, the database's clock in the callers) and returns the next state.
The row changes are jobs.engine.fusing's; docs/flow-control.md ("Fuse").

- closed: attempts start. Each attempt's end that says something about the
  dependency is counted: the window is the last `window_attempts` counted
  ends (a count-based sliding window, as resilience4j's), emptied when
  `window` seconds passed since it began; when it holds at least
  `min_attempts` ends and failures / ends >= `failure_ratio`, the fuse
  trips: open, cool-down `cooldown`. Counting the last ends, not every end
  of a period, lets a dependency that fails after a busy calm trip the fuse
  within a few failures: a thousand successes just before do not outvote them.
- open: no attempt starts until `probe_due` (opened + cool-down). The first
  start after it becomes the probe: half-open.
- half-open: only the probe runs. Its success closes the fuse (window
  emptied, cool-down back to `cooldown`); its failure re-opens it with the
  cool-down doubled, at most `cooldown_max`; an end that says nothing (a
  lost worker) re-opens it with the probe due at once. A probe that never
  ends (its job lost) is replaced once `probe_lease` seconds have passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from jobs.reasons import FuseState

# A fuse per kind and per destination: the destination of a fuse without `fuse_key`.
WHOLE_KIND = "*"
# The most ends a window keeps: its bits fit a signed 64-bit column (jobs_fuse.history).
MAX_WINDOW_ATTEMPTS = 62


@dataclass(frozen=True)
class FuseRules:
    """When a fuse trips and how long it stays open (a kind's policy, overrides applied)."""

    failure_ratio: float = 0.5
    min_attempts: int = 10
    window: float = 60.0
    window_attempts: int = 20
    cooldown: float = 30.0
    cooldown_max: float = 600.0


@dataclass(frozen=True)
class FuseSnapshot:
    """One fuse's state. Times are epoch seconds (None: not set); `probe_job` is the probe's
    job id as text ("" : none); `trips` counts closed -> open. `history`: the window's
    ends as bits, the latest lowest, 1 a failure; `attempts` and `failures` count them."""

    state: FuseState = FuseState.CLOSED
    window_started: float | None = None
    attempts: int = 0
    failures: int = 0
    history: int = 0
    opened_at: float | None = None
    probe_due: float | None = None
    cooldown: float = 0.0
    probe_job: str = ""
    probe_started: float | None = None
    trips: int = 0


def admit(
    s: FuseSnapshot, rules: FuseRules, *, now: float, job_id: str, probe_lease: float
) -> tuple[bool, FuseSnapshot]:
    """Whether job `job_id` may start an attempt now, and the state after: closed admits
    everything; open admits the first start once the cool-down is over (it becomes the
    probe: half-open); half-open admits the probe's own job again (a redelivery) and a new
    probe once the old one's `probe_lease` ran out."""
    if s.state == FuseState.CLOSED:
        return True, s
    if s.state == FuseState.OPEN:
        if s.probe_due is not None and now < s.probe_due:
            return False, s
        return True, _probe(s, job_id, now)
    if s.probe_job == job_id:
        return True, s
    if s.probe_started is None or now >= s.probe_started + probe_lease:
        return True, _probe(s, job_id, now)
    return False, s


def _probe(s: FuseSnapshot, job_id: str, now: float) -> FuseSnapshot:
    return replace(s, state=FuseState.HALF_OPEN, probe_job=job_id, probe_started=now)


def record_end(
    s: FuseSnapshot, rules: FuseRules, *, now: float, job_id: str, failed: bool | None
) -> FuseSnapshot:
    """The state after an attempt of job `job_id` ended: `failed` True (the dependency
    failed), False (it answered) or None (the end says nothing about it: not counted).

    While open or half-open, only the probe's end counts; ends of attempts that started
    before the trip change nothing."""
    if s.state != FuseState.CLOSED:
        if s.state != FuseState.HALF_OPEN or job_id != s.probe_job:
            return s
        if failed is False:
            return close(s, rules)
        cooldown = min(rules.cooldown_max, 2 * s.cooldown) if failed else s.cooldown
        return _open(s, now=now, cooldown=cooldown, due=now + cooldown if failed else now)
    if failed is None:
        return s
    if s.window_started is None or now - s.window_started >= rules.window:
        s = replace(s, window_started=now, attempts=0, failures=0, history=0)
    history = ((s.history << 1) | (1 if failed else 0)) & ((1 << rules.window_attempts) - 1)
    s = replace(
        s,
        history=history,
        attempts=min(s.attempts + 1, rules.window_attempts),
        failures=history.bit_count(),
    )
    if tripped(s, rules):
        return trip(s, rules, now=now)
    return s


def tripped(s: FuseSnapshot, rules: FuseRules) -> bool:
    """Whether a closed fuse's window crosses the threshold."""
    return s.attempts >= rules.min_attempts and s.failures >= rules.failure_ratio * s.attempts


def trip(s: FuseSnapshot, rules: FuseRules, *, now: float) -> FuseSnapshot:
    """Open the fuse now for `rules.cooldown` (by the counts, or by an operator); a trip
    counts only when the fuse was closed."""
    trips = s.trips + (1 if s.state == FuseState.CLOSED else 0)
    opened = _open(s, now=now, cooldown=rules.cooldown, due=now + rules.cooldown)
    return replace(opened, trips=trips, opened_at=now)


def _open(s: FuseSnapshot, *, now: float, cooldown: float, due: float) -> FuseSnapshot:
    return replace(
        s,
        state=FuseState.OPEN,
        opened_at=s.opened_at if s.state != FuseState.CLOSED else now,
        probe_due=due,
        cooldown=cooldown,
        probe_job="",
        probe_started=None,
        window_started=None,
        attempts=0,
        failures=0,
        history=0,
    )


def close(s: FuseSnapshot, rules: FuseRules) -> FuseSnapshot:
    """Closed, its window empty (the probe succeeded, or an operator reset it)."""
    return FuseSnapshot(state=FuseState.CLOSED, cooldown=rules.cooldown, trips=s.trips)


def check_fields(
    *,
    fuse: Any,
    fuse_key: Any,
    failure_ratio: Any,
    min_attempts: Any,
    window: Any,
    cooldown: Any,
    cooldown_max: Any,
    window_attempts: Any = 20,
) -> None:
    """Raise ValueError, naming the field and value, unless a policy's fuse fields are valid:
    `fuse` a bool; `fuse_key` None or a dotted payload path; `fuse_failure_ratio` in (0, 1];
    `fuse_min_attempts` a whole number >= 1; `fuse_window_attempts` a whole number from
    `fuse_min_attempts` to MAX_WINDOW_ATTEMPTS; the times finite numbers > 0 with
    `fuse_cooldown` <= `fuse_cooldown_max`. (jobs.policy.Policy calls it.)"""
    if not isinstance(fuse, bool):
        raise ValueError(f"fuse must be true or false, not {fuse!r}")
    if fuse_key is not None and (
        not isinstance(fuse_key, str) or not all(part.strip() for part in fuse_key.split("."))
    ):
        raise ValueError(f"fuse_key must be a dotted payload path like 'url', not {fuse_key!r}")
    if not _number(failure_ratio) or not 0 < failure_ratio <= 1:
        raise ValueError(f"fuse_failure_ratio must be a number in (0, 1], not {failure_ratio!r}")
    if isinstance(min_attempts, bool) or not isinstance(min_attempts, int) or min_attempts < 1:
        raise ValueError(
            f"fuse_min_attempts must be a whole number of at least 1, not {min_attempts!r}"
        )
    if (
        isinstance(window_attempts, bool)
        or not isinstance(window_attempts, int)
        or not min_attempts <= window_attempts <= MAX_WINDOW_ATTEMPTS
    ):
        raise ValueError(
            f"fuse_window_attempts must be a whole number from fuse_min_attempts ({min_attempts})"
            f" to {MAX_WINDOW_ATTEMPTS}, not {window_attempts!r}"
        )
    for name, value in (
        ("fuse_window", window),
        ("fuse_cooldown", cooldown),
        ("fuse_cooldown_max", cooldown_max),
    ):
        if not _number(value) or value <= 0:
            raise ValueError(f"{name} must be a number of seconds above 0, not {value!r}")
    if cooldown > cooldown_max:
        raise ValueError(f"fuse_cooldown {cooldown} s is above fuse_cooldown_max {cooldown_max} s")


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
