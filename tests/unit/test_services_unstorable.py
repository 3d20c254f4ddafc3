"""Outcomes the database cannot store never leave a job running."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import DataError

from jobs import engine, runner, services
from jobs.models import AttemptOutcome, DeadReason, JobStatus
from jobs.services import AttemptReport

pytestmark = pytest.mark.django_db


def test_attempt_finish_replaces_nul_in_result_and_error_text(running_job: Any) -> None:
    # given a succeeded attempt whose result holds NUL in a key and a value
    report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"a\x00": ["x\x00y"]})

    # when it is recorded
    services.attempt_finish(job_id=running_job.id, attempt=1, report=report)

    # then the stored result has U+FFFD where the NULs were
    running_job.refresh_from_db()
    assert running_job.result == {"a\ufffd": ["x\ufffdy"]}


def test_attempt_finish_replaces_nul_in_error_text(running_job: Any) -> None:
    report = AttemptReport(
        outcome=AttemptOutcome.ERROR,
        error_type="PermanentError",
        error_message="HTTP 404: bad\x00thing",
        retryable=False,
    )

    services.attempt_finish(job_id=running_job.id, attempt=1, report=report)

    running_job.refresh_from_db()
    attempt = running_job.attempts.get(number=1)
    assert attempt.error_message == "HTTP 404: bad\ufffdthing"
    assert "\x00" not in running_job.last_error
    assert running_job.status == JobStatus.DEAD


def test_runner_records_an_unstorable_outcome_as_permanent_error(
    running_job: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a database that refuses the first outcome written (as PostgreSQL does for some values)
    the_engine = engine.current()
    real_finish = the_engine.finish
    calls: list[AttemptReport] = []

    def refusing_once(ref: Any, report: AttemptReport) -> Any:
        calls.append(report)
        if len(calls) == 1:
            raise DataError("unsupported Unicode escape sequence")
        return real_finish(ref, report)

    monkeypatch.setattr(the_engine, "finish", refusing_once)

    # when the runner records a success
    status = runner._finish(
        job_id=str(running_job.id),
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"x": 1}),
        rss=None,
        hard_deadline=time.monotonic() + 60,
    ).status

    # then the attempt is closed as a permanent error, not left running
    assert status == JobStatus.DEAD
    running_job.refresh_from_db()
    assert running_job.dead_reason == DeadReason.ERROR
    assert running_job.attempts.get(number=1).error_type == "UnstorableOutcome"
