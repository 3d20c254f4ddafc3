"""jobs.engine.verdicts: the failure verdict with its retry budget, and the engine's log lines."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from jobs import budget
from jobs.decisions import Action, Decision
from jobs.engine import verdicts
from jobs.engine.values import AttemptReport
from jobs.kinds import policy_for
from jobs.models import AttemptOutcome, DeadReason, Job

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def test_verdicts_non_retryable_failure_is_dead_without_asking_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget, "reserve", lambda *a, **k: pytest.fail("budget asked"))

    decision = verdicts.decide_failure(
        kind="demo.flaky",
        policy=policy_for("demo.flaky"),
        report=AttemptReport(outcome=AttemptOutcome.ERROR, retryable=False),
        attempts_made=1,
        max_attempts=5,
        now=NOW,
    )

    assert (decision.action, decision.dead_reason) == (Action.DEAD, DeadReason.ERROR)


def test_verdicts_budget_is_asked_for_the_retry_window(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[float, float]] = []

    def reserve(kind: str, *, now: float, due: float) -> Any:
        asked.append((now, due))
        return budget.Reservation(granted=True, due=due, asked=due)

    monkeypatch.setattr(budget, "reserve", reserve)

    verdicts.budget_for("demo.flaky", now=NOW)(2.0)

    assert asked == [(NOW.timestamp(), NOW.timestamp() + 2.0)]


@pytest.mark.django_db
def test_verdicts_log_dead_as_warning_and_retry_as_info(
    job_factory: Callable[..., Job], caplog: pytest.LogCaptureFixture
) -> None:
    job = job_factory()

    with caplog.at_level(logging.INFO, logger="jobs.engine.verdicts"):
        verdicts.log_decision(job, 1, "error", Decision(Action.DEAD, dead_reason="error"), "E: x")
        verdicts.log_decision(job, 1, "error", Decision(Action.RETRY, delay_seconds=1.0), "")

    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]


@pytest.mark.django_db
def test_verdicts_started_attempt_carries_the_kinds_policy(job_factory: Callable[..., Job]) -> None:
    job = job_factory(attempts_made=1)

    started = verdicts.started_attempt(job, 2)

    assert (started.attempt, started.kind, started.max_attempts) == (2, job.kind, 5)
    assert started.policy == policy_for(job.kind)
