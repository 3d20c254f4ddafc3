"""jobs.engine.changes: the one mapping from a decision to row changes, and the other transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models.functions import Now

from jobs import waiting
from jobs.decisions import Action, Decision
from jobs.engine import changes
from jobs.engine.values import AttemptReport
from jobs.models import AttemptOutcome, DeadReason, JobStatus

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
FAILED = AttemptReport(
    outcome=AttemptOutcome.ERROR, error_type="E", error_message="boom\x00", traceback="t" * 30_000
)


def test_changes_success_sets_result_and_finishes() -> None:
    ending = changes.ending(
        None, report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1}), now=NOW
    )

    assert ending.job == {
        "lease_expires_at": None,
        "status": JobStatus.SUCCEEDED,
        "result": {"n": 1},
        "finished_at": NOW,
        **waiting.NOT_WAITING,
    }
    assert ending.attempt["outcome"] == AttemptOutcome.SUCCEEDED
    assert "retry_delay_seconds" not in ending.attempt


def test_changes_retry_waits_its_delay_and_keeps_it_on_the_attempt() -> None:
    why = waiting.for_retry(kind="k", delay=2.5)
    decision = Decision(Action.RETRY, delay_seconds=2.5, waiting=why)

    ending = changes.ending(decision, report=FAILED, now=NOW)

    assert ending.job["status"] == JobStatus.RETRYING
    assert ending.job["next_attempt_at"] == NOW + timedelta(seconds=2.5)
    assert ending.job["waiting_reason"] == why.reason
    assert ending.job["last_error"] == "E: boom\ufffd"
    assert "finished_at" not in ending.job
    assert ending.attempt["retry_delay_seconds"] == 2.5
    assert len(ending.attempt["traceback"]) == changes.TRACEBACK_KEEP


def test_changes_dead_keeps_the_reason() -> None:
    ending = changes.ending(
        Decision(Action.DEAD, dead_reason=DeadReason.EXHAUSTED), report=FAILED, now=NOW
    )

    assert (ending.job["status"], ending.job["dead_reason"]) == (
        JobStatus.DEAD,
        DeadReason.EXHAUSTED,
    )
    assert ending.job["finished_at"] == NOW


@pytest.mark.parametrize("requeued", [True, False])
def test_changes_requeue_is_queued_and_published_only_when_the_broker_holds_it(
    requeued: bool,
) -> None:
    ending = changes.ending(Decision(Action.REQUEUE), report=FAILED, now=NOW, requeued=requeued)

    assert ending.job["status"] == JobStatus.QUEUED
    assert ending.job["enqueued_at"] == NOW
    assert isinstance(ending.job["published_at"], Now) is requeued


def test_changes_a_failure_without_a_decision_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a decision"):
        changes.ending(None, report=FAILED, now=NOW)


def test_changes_held_retry_or_dead_by_budget() -> None:
    assert changes.held(until=NOW, held_by=None, now=NOW)["status"] == JobStatus.RETRYING
    dead = changes.held(until=None, held_by=None, now=NOW)
    assert (dead["status"], dead["dead_reason"]) == (JobStatus.DEAD, DeadReason.BUDGET)


def test_changes_operator_transitions() -> None:
    assert changes.cancelled(now=NOW)["status"] == JobStatus.CANCELLED
    requeued = changes.requeued(now=NOW, max_attempts=6)
    assert (requeued["status"], requeued["max_attempts"], requeued["worker_losses"]) == (
        JobStatus.QUEUED,
        6,
        0,
    )
    assert requeued["published_at"] is None
    started = changes.started(number=2, started_at=NOW, lease_expires_at=NOW)
    assert (started["status"], started["attempts_made"]) == (JobStatus.RUNNING, 2)


def test_changes_submitted_is_delayed_until_run_after() -> None:
    later = NOW + timedelta(hours=1)

    job = changes.submitted(delayed=True, run_after=later, kind="demo.flaky")

    assert (job.status, job.next_attempt_at) == (JobStatus.DELAYED, later)
    assert job.waiting_reason == waiting.WaitingReason.RUN_AFTER


def test_changes_apply_sets_and_names_columns() -> None:
    class Row:
        status = ""

    row = Row()

    assert changes.apply(row, {"status": "dead"}) == ["status"]
    assert row.status == "dead"
