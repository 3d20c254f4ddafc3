"""How long an orchestrator must wait for a worker's warm shutdown (docs/scaling.md, docs/shutdown.md).

On SIGTERM a worker takes nothing new and lets each running attempt end,
bounded by its kind's hard time limit; then it records the outcome and
closes its pool and broker connection (3.2 s measured, docs/shutdown.md).
A SIGKILL before that turns the attempt into `worker_lost`, run again after
its lease. So Kubernetes' `terminationGracePeriodSeconds` (compose's
`stop_grace_period`) must be at least the largest hard limit + a margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobs.kinds.registry import kind_names, policy_for

# Seconds after the largest hard limit: the kill and the outcome's write (DB deadline
# and reconnects), the pool's and broker's close (3.2 s measured), and the kubelet's own lag.
MARGIN_SECONDS = 30.0


@dataclass(frozen=True)
class ShutdownGrace:
    """The grace a worker needs: `kind`'s hard limit (the largest) + `margin`, in whole seconds."""

    kind: str
    hard_time_limit: float
    margin: float

    @property
    def seconds(self) -> int:
        return math.ceil(self.hard_time_limit + self.margin)

    def describe(self) -> str:
        return (
            f"{self.seconds} s: {self.kind}'s hard time limit {self.hard_time_limit:g} s "
            f"(the largest of the registered kinds) + {self.margin:g} s margin"
        )


def required_grace(*, margin: float = MARGIN_SECONDS) -> ShutdownGrace:
    """The grace for every kind registered in this process, with JOBS_KIND_OVERRIDES applied.

    Raises ValueError when no kind is registered.
    """
    limits = {name: policy_for(name).hard_time_limit for name in kind_names()}
    if not limits:
        raise ValueError("no job kind is registered")
    kind = max(limits, key=lambda name: (limits[name], name))
    return ShutdownGrace(kind=kind, hard_time_limit=limits[kind], margin=margin)
