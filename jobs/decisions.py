"""The one retry-or-dead decision, for every way an attempt can end.

A returned error, a soft or hard time limit, a lost child and an expired
lease all end in `decide()`; the services apply its `Decision` to the job
row and send it with the attempt-finished event, so telemetry, Celery task
states and logs report it and never re-derive it (DESIGN.md "Retries": "One
decision"). After the `Retry(...).should_retry()` of Sentry's taskworker.

Rules, in order:

1. a lost worker: dead with reason `poison` once `poison_after` attempts of
   the job were lost, dead `exhausted` when no attempt is left, otherwise
   queued again at once (`requeue`: the loss was the worker's, not
   necessarily the job's, so no backoff);
2. an attempt stopped by the memory guard (`memory_limit`): dead with
   reason `memory_limit`, unless the kind's policy sets `retry_memory_limit`
   (then it goes on like any retryable failure, rules 3-4). Not retried by
   default because a job's memory need follows from its input: the same
   payload would most likely be stopped again, after holding a child's
   memory once more, and the dead-letter reason says what to fix (the
   input, or the kind's limit), where `exhausted` would hide it;
   a failure that may not be retried (a permanent error, a cancellation,
   an outcome outside RETRYABLE_OUTCOMES): dead `error`;
3. no attempt left: dead `exhausted`;
4. otherwise `retry` after the policy's backoff (full jitter, raised to a
   server's Retry-After), if the kind's retry budget (jobs.budget) has a
   slot for it then; when it is spent, the retry is deferred to the budget's
   next free slot (`budget_deferred`), or, with none within the maximum
   deferral, dead `budget`. A budget that could not be asked (Redis away)
   allows the retry with its backoff and the decision says so
   (`budget_fallback`).

A retry's decision also says why the job will wait (`waiting`, a
jobs.waiting reason with its detail), which the services store on the job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from jobs.budget import Reservation
from jobs.models import AttemptOutcome, DeadReason
from jobs.policy import Policy
from jobs.waiting import Waiting, for_retry

RETRYABLE_OUTCOMES = frozenset(
    {
        AttemptOutcome.ERROR,
        AttemptOutcome.SOFT_TIMEOUT,
        AttemptOutcome.HARD_TIMEOUT,
        AttemptOutcome.WORKER_LOST,
    }
)


class Action(StrEnum):
    """What follows a failed attempt."""

    RETRY = "retry"  # retrying; the scheduler publishes it after `delay_seconds`
    REQUEUE = "requeue"  # queued again now (worker lost); no backoff
    DEAD = "dead"  # terminal; `dead_reason` says why


@dataclass(frozen=True)
class Decision:
    """The verdict on one failed attempt.

    `delay_seconds` is the wait before the next attempt (0 for `requeue` and
    `dead`); `budget_deferred` is True when the kind's retry budget raised it;
    `budget_fallback` when the budget could not be asked (the retry kept its
    backoff); `budget_first_exhaustion` when this decision was the first of
    its budget window to find the budget spent (logged once per window).
    A job dead by the budget has `dead_reason` "budget". `waiting` says
    why a retried job waits (None for `requeue` and `dead`).
    """

    action: Action
    dead_reason: str = ""
    delay_seconds: float = 0.0
    budget_deferred: bool = False
    budget_fallback: bool = False
    budget_first_exhaustion: bool = False
    waiting: Waiting | None = None

    @property
    def budget_exhausted(self) -> bool:
        """True when the retry budget refused the retry its backoff asked for (deferred or dead)."""
        return self.budget_deferred or self.dead_reason == DeadReason.BUDGET

    @property
    def retries(self) -> bool:
        """True when the job gets another attempt (retry or requeue)."""
        return self.action != Action.DEAD


def decide(
    *,
    policy: Policy,
    outcome: AttemptOutcome,
    retryable: bool,
    attempts_made: int,
    max_attempts: int,
    worker_losses: int = 0,
    poison_after: int = 3,
    retry_after: float | None = None,
    budget: Callable[[float], Reservation] | None = None,
    kind: str = "",
) -> Decision:
    """Decide what follows an attempt that ended with `outcome` (anything but succeeded).

    `attempts_made` counts the job's attempts including this one;
    `worker_losses` its lost attempts including this one when it was lost.
    `retryable` is the runner's classification (ignored for a lost worker);
    `retry_after` the least delay in seconds the failure asked for.
    `budget` is called only when a retry would otherwise follow, with the
    backoff's delay in seconds, and returns the kind's retry budget's
    Reservation (jobs.budget.reserve). `kind` names the job's kind in the
    waiting detail. Never raises.
    """
    if outcome == AttemptOutcome.WORKER_LOST:
        if worker_losses >= poison_after:
            return Decision(Action.DEAD, dead_reason=DeadReason.POISON)
        if attempts_made >= max_attempts:
            return Decision(Action.DEAD, dead_reason=DeadReason.EXHAUSTED)
        return Decision(Action.REQUEUE)
    if outcome == AttemptOutcome.MEMORY_LIMIT:
        if not policy.retry_memory_limit:
            return Decision(Action.DEAD, dead_reason=DeadReason.MEMORY_LIMIT)
    elif not retryable or outcome not in RETRYABLE_OUTCOMES:
        return Decision(Action.DEAD, dead_reason=DeadReason.ERROR)
    if attempts_made >= max_attempts:
        return Decision(Action.DEAD, dead_reason=DeadReason.EXHAUSTED)
    delay = policy.retry_delay(attempts_made, retry_after=retry_after)
    why = for_retry(kind=kind, delay=delay, retry_after=retry_after)
    if budget is None:
        return Decision(Action.RETRY, delay_seconds=delay, waiting=why)
    slot = budget(delay)
    if slot.fallback:
        return Decision(Action.RETRY, delay_seconds=delay, budget_fallback=True, waiting=why)
    if not slot.granted:
        return Decision(
            Action.DEAD,
            dead_reason=DeadReason.BUDGET,
            budget_first_exhaustion=slot.first_exhaustion,
        )
    # Past the budget a retry waits for a free slot instead of adding to the storm.
    return Decision(
        Action.RETRY,
        delay_seconds=delay + slot.added_seconds,
        budget_deferred=slot.deferred,
        budget_first_exhaustion=slot.first_exhaustion,
        waiting=for_retry(
            kind=kind,
            delay=delay + slot.added_seconds,
            retry_after=retry_after,
            budget_added=slot.added_seconds,
        ),
    )
