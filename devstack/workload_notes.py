"""What the demo workload does on purpose, and what each dead reason in its table means there.

`make demo` ends with a table where about a fifth of the webhooks are
`dead: budget` and a dozen jobs `dead: error`. Both are the point of the
demo, not a fault; without a word the table reads like one. The lines here
say what was arranged (a receiver failing ~30% of deliveries, above the
retry budget's 20%; the budget's deferral as configured; a receiver
answering 410; jobs failing more often than they may retry; cancellations)
and, for each dead reason in the table, what caused it in this run and
whether that was intended.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from devstack.workload import (
    EXHAUSTED_FAIL_TIMES,
    FAIL_SHARE,
    READ_TIMEOUT,
    SLOW_SECONDS,
    SLOW_SHARE,
    Mix,
)
from jobs.models import DeadReason
from jobs.waiting import seconds_text


@dataclass(frozen=True)
class Budget:
    """The retry budget the workers use: window and max_deferral in seconds."""

    window: float
    ratio: float
    floor: int
    max_deferral: float


def on_purpose(mix: Mix, *, budget: Budget, webhook_attempts: int, flaky_attempts: int) -> str:
    """The lines saying what the workload arranges, with the figures of this run's settings."""
    failing = FAIL_SHARE + SLOW_SHARE
    return "\n".join(
        [
            "",
            "What this demo does on purpose:",
            f"- {mix.webhooks} webhooks (up to {webhook_attempts} attempts each) go to a "
            f"receiver that fails {failing:.0%} of deliveries "
            f"({FAIL_SHARE:.0%} answer 5xx, {SLOW_SHARE:.0%} answer after {SLOW_SECONDS:g} s, "
            f"past the {READ_TIMEOUT:g} s read timeout): more retries than the retry budget "
            f"allows ({budget.ratio:g} x first attempts + {budget.floor} per "
            f"{seconds_text(budget.window)} window and kind).",
            f"- A retry over the budget waits for a free slot at most "
            f"{seconds_text(budget.max_deferral)} (JOBS_RETRY_BUDGET_MAX_DEFERRAL, shortened by "
            "`make demo` to keep the run short); with none, its job is dead with reason budget.",
            f"- {mix.gone} webhooks go to a receiver answering 410 Gone: not retried.",
            f"- {mix.flaky_exhausted} demo.flaky jobs fail {EXHAUSTED_FAIL_TIMES} times, more "
            f"than their {flaky_attempts} attempts; {mix.flaky} more fail 0-3 times and succeed.",
            f"- {mix.cancelled} jobs are cancelled as soon as they are accepted.",
        ]
    )


def dead_reasons(by_kind: Mapping[str, Counter], mix: Mix, *, budget: Budget) -> str:
    """One line per dead reason in the table (and per reason the demo arranges): its count, by
    kind, what it means here, and whether it was intended. `by_kind`: {kind: Counter of dead
    reasons}."""
    meaning = {
        DeadReason.BUDGET: (
            f"the retry budget found no slot within {seconds_text(budget.max_deferral)}: a "
            "kind's retries beyond its budget (the failing webhooks; demo.flaky's too when its "
            "retries crowd a window), intended",
            None,
        ),
        DeadReason.ERROR: (
            f"a non-retryable error: the webhooks answered 410, intended ({mix.gone})",
            mix.gone,
        ),
        DeadReason.EXHAUSTED: (
            f"every attempt failed: the demo.flaky jobs failing {EXHAUSTED_FAIL_TIMES} times "
            f"({mix.flaky_exhausted}, unless the budget ended them first) and any webhook "
            "that failed all its attempts, intended",
            None,
        ),
    }
    found: Counter = sum(by_kind.values(), Counter())
    reasons = sorted({*found, *meaning})
    width = max(len(str(reason)) for reason in reasons)
    lines = ["", "Dead reasons in the table:"]
    for reason in reasons:
        text, expected = meaning.get(
            reason, ("not part of the demo: see var/demo/logs/ and the job's last error", None)
        )
        count = found.get(reason, 0)
        kinds = ", ".join(f"{kind} {c[reason]}" for kind, c in sorted(by_kind.items()) if c[reason])
        flag = f"; {expected} expected" if expected is not None and count != expected else ""
        if reason not in meaning and count:
            flag = "; NOT INTENDED"
        where = f" ({kinds})" if kinds else ""
        lines.append(f"- dead: {str(reason):<{width}} {count:>4}{where}  {text}{flag}")
    return "\n".join(lines)
