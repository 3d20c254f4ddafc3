"""Which kinds have a fuse, how a job's destination is named, and what counts as a failure.

Reads only; the row changes are the engine's (jobs.engine.fusing). A kind's
policy turns its fuse on with `fuse: true` (JOBS_KIND_OVERRIDES may);
`fuse_key` names a dotted payload path to a URL whose host (lower-case,
with its port when one is given) is the destination: one fuse per host.
Without `fuse_key` the kind has one fuse, destination "*".

A kind with a fuse takes the start's one-statement fast path only while
none of its fuses is open or half-open (its lease negated in the statement's
map: jobs.engine.backends.postgres, `_lease_fused` in postgres.sql); else the
general path judges it against its destination's Fuse row. While no kind has
a fuse the start statement is the one of old.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import Q

from jobs import waiting
from jobs.fuse_rules import WHOLE_KIND, FuseRules
from jobs.kinds import registry
from jobs.models import AttemptOutcome, DeadReason, Fuse, JobStatus
from jobs.policy import Policy
from jobs.reasons import FuseState, WaitingReason

# Attempt outcomes that may mean the dependency is down (when the failure was retryable).
DEPENDENCY_OUTCOMES = frozenset(
    {AttemptOutcome.ERROR, AttemptOutcome.SOFT_TIMEOUT, AttemptOutcome.HARD_TIMEOUT}
)


@dataclass(frozen=True)
class FuseConfig:
    """The fuse of `kind`: its rules and the payload path of the destination URL (() : none)."""

    kind: str
    rules: FuseRules
    path: tuple[str, ...] = ()

    def destination(self, payload: Any) -> str:
        """The destination of a job with `payload`: the URL's host[:port], "*" without a
        path, "?" when the path holds no URL with a host."""
        if not self.path:
            return WHOLE_KIND
        value = payload
        for part in self.path:
            value = value.get(part) if isinstance(value, dict) else None
        if not isinstance(value, str):
            return "?"
        try:
            parts = urlsplit(value)
            host, port = parts.hostname, parts.port
        except ValueError:
            return "?"
        if not host:
            return "?"
        return f"{host}:{port}" if port else host


def config_of(name: str, policy: Policy) -> FuseConfig | None:
    """The fuse of kind `name` under `policy` (overrides applied), None when it has none."""
    if not policy.fuse:
        return None
    rules = FuseRules(
        failure_ratio=float(policy.fuse_failure_ratio),
        min_attempts=policy.fuse_min_attempts,
        window=float(policy.fuse_window),
        window_attempts=policy.fuse_window_attempts,
        cooldown=float(policy.fuse_cooldown),
        cooldown_max=float(policy.fuse_cooldown_max),
    )
    path = tuple(policy.fuse_key.split(".")) if policy.fuse_key else ()
    return FuseConfig(name, rules, path)


def holding_new(kind: str, payload: Any, policy: Policy) -> waiting.Waiting | None:
    """Why a job of `kind` with `payload` submitted now waits unpublished: its fuse is open
    or half-open (the leader releases it as it releases jobs held at their start); None
    when the kind has no fuse (no read) or the fuse of its destination is closed (one
    indexed read of the Fuse row). So an outage's new jobs send no message each to be
    dropped at a worker, where other kinds' messages wait behind them."""
    config = config_of(kind, policy)
    if config is None:
        return None
    destination = config.destination(payload)
    found = (
        Fuse.objects.filter(kind=kind, destination=destination)
        .exclude(state=FuseState.CLOSED)
        .values_list("probe_due_at")
        .first()
    )
    if found is None:
        return None
    return waiting.for_fuse(kind=kind, destination=destination, probe_due=found[0])


def configs() -> dict[str, FuseConfig]:
    """{kind: its fuse} of every registered kind whose policy (overrides applied) sets
    `fuse`. A kind with an invalid override is left out (the system check says why)."""
    found: dict[str, FuseConfig] = {}
    for name in registry.kind_names():
        try:
            policy = registry.policy_for(name)
        except ValueError:
            continue
        config = config_of(name, policy)
        if config is not None:
            found[name] = config
    return found


class ConfigCache:
    """configs(), computed again only when the registry or the overrides change (a backend
    holds one: no module-global state)."""

    def __init__(self) -> None:
        self._cached: tuple[Any, dict[str, FuseConfig]] = (None, {})

    def get(self) -> dict[str, FuseConfig]:
        """{kind: FuseConfig} now."""
        key = (len(registry._KINDS), id(settings.JOBS_KIND_OVERRIDES))
        if self._cached[0] != key:
            self._cached = (key, configs())
        return self._cached[1]


def probe_lease(kind: str) -> float:
    """Seconds a probe attempt of `kind` may run before another may replace it: its lease
    (hard time limit + JOBS_LEASE_GRACE), at least 60 s."""
    try:
        policy = registry.policy_for(kind)
    except (LookupError, ValueError):
        return 60.0
    return max(60.0, float(policy.hard_time_limit) + float(settings.JOBS_LEASE_GRACE))


def failed(outcome: str, dead_reason: str) -> bool | None:
    """What an attempt's end says about its dependency: True (it failed: a retryable error
    or a time limit), False (it answered: a success, or an error the kind called permanent,
    such as a 4xx caused by the payload), None (nothing: a lost worker, a cancel, memory)."""
    if outcome == AttemptOutcome.SUCCEEDED:
        return False
    if outcome not in DEPENDENCY_OUTCOMES:
        return None
    return dead_reason != DeadReason.ERROR


def held_q() -> Q:
    """Queued jobs held by an open fuse (partial index jobs_job_fuse_held_idx)."""
    return Q(status=JobStatus.QUEUED, waiting_reason=WaitingReason.FUSE_OPEN)
