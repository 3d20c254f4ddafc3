"""Why a job is waiting: a small vocabulary of reasons, each with a human-readable detail.

A job that is held back (not running, not terminal, and not simply next in
its queue) carries one WaitingReason and a detail sentence on its row
(`Job.waiting_reason`, `Job.waiting_detail`); the API shows them as
`waiting: {reason, detail, until}` with `until` the job's `next_attempt_at`,
and the admin on the job page and the list. The reason is written where the
decision to hold the job is made, and cleared by every transition that moves
the job on (queued again, started, cancelled, requeued, terminal).

Reasons today, all on a `retrying` job:

- `backoff`: the retry waits out the kind's backoff;
- `retry_after`: the retry waits as long as the failure asked (a server's
  `Retry-After`), longer than the backoff;
- `retry_budget`: the kind's retry budget (jobs.budget) moved the retry to a
  later slot, at the decision or when the retry was about to start.

and on a `delayed` job:

- `run_after`: the submitter asked for a later start (`run_after`).

and on a `queued` job held in the database (unpublished):

- `paused`: its kind or queue is paused (jobs.pauses); it starts within a
  scheduler tick of the resume;
- `concurrency_limit`: its kind (or its key's value) runs as many attempts
  as its policy's `concurrency` allows (jobs.concurrency_gate);
- `fuse_open`: its kind's (destination's) fuse is open (jobs.fuse_gate);
- `rate_limit`: its kind (or its key's value) started as many attempts as
  its policy's `rate` allows; it has a reserved start time (jobs.rate_gate).

The reasons computed when a job is shown, never stored (backpressure, no
worker consuming the queue) are jobs.waiting_now's. The vocabulary is
jobs.reasons.WaitingReason (also the reserved members of the flow limits
and fuses to come). This module imports only jobs.reasons, so every layer
may use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jobs.reasons import WaitingReason

# Reasons of a queued job held unpublished in the database: the leader publishes it when it
# may start (a pause, a concurrency limit, a rate limit); the outbox and the stamps leave it.
HELD_REASONS = (
    WaitingReason.PAUSED,
    WaitingReason.CONCURRENCY_LIMIT,
    WaitingReason.RATE_LIMIT,
    WaitingReason.FUSE_OPEN,
)

# The longest detail stored (Job.waiting_detail's max_length).
DETAIL_MAX_CHARS = 300


__all__ = [
    "CHOICES",
    "DETAIL_MAX_CHARS",
    "HELD_REASONS",
    "NOT_WAITING",
    "Waiting",
    "WaitingReason",
]

# The model field's and the API's choices: (value, label) of every reason.
CHOICES: list[tuple[str, str]] = [(reason.value, reason.label) for reason in WaitingReason]


@dataclass(frozen=True)
class Waiting:
    """One reason and its detail sentence (plain text, at most DETAIL_MAX_CHARS)."""

    reason: WaitingReason
    detail: str

    def fields(self) -> dict[str, str]:
        """The job row's columns for this reason."""
        return {"waiting_reason": self.reason.value, "waiting_detail": self.detail}


# The columns of a job that is not waiting (every transition that moves a job on).
NOT_WAITING: dict[str, str] = {"waiting_reason": "", "waiting_detail": ""}
FIELDS = tuple(NOT_WAITING)


def fields(waiting: Waiting | None) -> dict[str, str]:
    """The job row's waiting columns: `waiting`'s, or cleared for None."""
    return waiting.fields() if waiting is not None else dict(NOT_WAITING)


def apply(job: Any, waiting: Waiting | None) -> list[str]:
    """Set `job`'s waiting columns (cleared for None); returns their names for `update_fields`."""
    for name, value in fields(waiting).items():
        setattr(job, name, value)
    return list(FIELDS)


def seconds_text(value: float) -> str:
    """A wait as people read it: "0.7 s", "8.2 s" below 10 s, "74 s", "5 min 20 s"."""
    value = max(0.0, value)
    if value < 10:
        return f"{value:.1f} s"
    if value < 600:
        return f"{value:.0f} s"
    minutes, rest = divmod(round(value), 60)
    return f"{minutes} min {rest:02d} s"


def for_retry(
    *, kind: str, delay: float, retry_after: float | None = None, budget_added: float = 0.0
) -> Waiting:
    """Why a retry decided now waits `delay` seconds before its attempt.

    `retry_after` is the least delay the failure asked for (None: none);
    `budget_added` the seconds the retry budget of `kind` added to the
    backoff (0: none). The budget is named first: it is the surprise.
    """
    before_budget = delay - budget_added
    if budget_added > 0:
        why = (
            f"as the server asked (Retry-After {seconds_text(before_budget)})"
            if retry_after is not None and retry_after >= before_budget
            else f"after a backoff of {seconds_text(before_budget)}"
        )
        return _waiting(
            WaitingReason.RETRY_BUDGET,
            f"retry delayed {seconds_text(budget_added)} by the retry budget of {kind} ({why})",
        )
    if retry_after is not None and retry_after >= delay:
        return _waiting(
            WaitingReason.RETRY_AFTER,
            f"retry after {seconds_text(delay)}, as the server asked (Retry-After)",
        )
    return _waiting(WaitingReason.BACKOFF, f"retry after a backoff of {seconds_text(delay)}")


def held_by_budget(*, kind: str, held: float) -> Waiting:
    """Why a retry about to start was sent back to wait `held` seconds by `kind`'s retry budget."""
    return _waiting(
        WaitingReason.RETRY_BUDGET,
        f"retry delayed {seconds_text(held)} by the retry budget of {kind} (held at its "
        "start: it waited in the queue into a budget window with no room)",
    )


def _waiting(reason: WaitingReason, detail: str) -> Waiting:
    return Waiting(reason, detail[:DETAIL_MAX_CHARS])


def for_run_after(*, run_after: Any) -> Waiting:
    """Why a job submitted with a later start (`run_after`, an aware datetime) waits."""
    return _waiting(
        WaitingReason.RUN_AFTER, f"start not before {run_after.isoformat()}, as submitted"
    )


def _shown(key: str) -> str:
    """A key (JSON text: jobs.concurrency_gate.payload_key) as people read it: a string
    without its quotes, any other value as its JSON."""
    if key.startswith('"'):
        try:
            return str(json.loads(key))
        except ValueError:
            return key
    return key


def for_concurrency(*, kind: str, limit: int, key: str | None = None) -> Waiting:
    """Why a queued job waits in the database: `kind` (its `key` value, when the limit is
    per key) already runs `limit` attempts (jobs.concurrency_gate)."""
    slot = f"waiting for concurrency slot `{kind}`"
    if key is not None:
        slot += f" key `{_shown(key)}`"
    return _waiting(
        WaitingReason.CONCURRENCY_LIMIT,
        f"{slot}: {limit} live at most; it starts when a slot frees, older jobs first",
    )


def for_rate(*, kind: str, rate: str, key: str | None = None, wait: float) -> Waiting:
    """Why a queued job waits in the database: `kind` (its `key` value, when the rate is per
    key) started as many attempts as `rate` allows; its reserved start is `wait` s away."""
    limit = f"waiting for rate limit `{kind}`"
    if key is not None:
        limit += f" key `{_shown(key)}`"
    return _waiting(
        WaitingReason.RATE_LIMIT, f"{limit}: {rate}; next slot in ~{max(wait, 0.0):.1f} s"
    )


def for_pause(*, scope: str, name: str, paused_at: Any, reason: str = "") -> Waiting:
    """Why a queued job waits in the database: its kind or queue `name` is paused since `paused_at`."""
    why = f": {reason}" if reason else ""
    return _waiting(
        WaitingReason.PAUSED,
        f"{scope} {name} paused since {paused_at.isoformat(timespec='seconds')}{why}; "
        "starts within a scheduler tick of the resume",
    )


def for_fuse(*, kind: str, destination: str, probe_due: Any) -> Waiting:
    """Why a queued job waits in the database: the fuse of `kind` (for `destination`, a host;
    "*": the whole kind) is open; one probe may start at `probe_due` (an aware datetime)."""
    where = f"`{kind}`" if destination == "*" else f"`{kind}` destination `{destination}`"
    due = (
        f"a probe attempt is due at {probe_due.isoformat(timespec='seconds')}"
        if probe_due is not None
        else "a probe attempt runs now"
    )
    return _waiting(
        WaitingReason.FUSE_OPEN,
        f"fuse of {where} open: its dependency is failing; {due}, and the rest start "
        "once it succeeds",
    )
