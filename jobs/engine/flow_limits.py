"""The flow limits of the registered kinds, cached per process until the registry or the
overrides change: concurrency limits (jobs.concurrency_gate) and rates (jobs.rate_gate),
each also as the JSON its PostgreSQL function takes."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.conf import settings

from jobs import concurrency_gate, rate_gate
from jobs.kinds import registry


class Limits(NamedTuple):
    """The flow limits of the registered kinds, and each as its SQL function's JSON."""

    limits: dict[str, concurrency_gate.KindLimit]
    limits_json: str
    rates: dict[str, rate_gate.KindRate]
    rates_json: str


class FlowLimits:
    """One backend's cache of Limits (computed again when the registry or the overrides
    change; settings overrides in tests replace the overrides object)."""

    def __init__(self) -> None:
        self._cached: tuple[Any, Limits] = (None, Limits({}, "{}", {}, "{}"))

    def now(self) -> Limits:
        """The limits in force now."""
        key = (len(registry._KINDS), id(settings.JOBS_KIND_OVERRIDES))
        if self._cached[0] != key:
            found = concurrency_gate.limits()
            rates = rate_gate.rates()
            limits = Limits(
                found, concurrency_gate.limits_json(found), rates, rate_gate.rates_json(rates)
            )
            self._cached = (key, limits)
        return self._cached[1]
