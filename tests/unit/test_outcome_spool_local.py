"""jobs.services.outcomes on disk: an outcome kept in a file is written once, then removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs import services
from jobs.models import AttemptOutcome, Job, JobStatus
from jobs.services import AttemptReport
from jobs.services.outcomes import spool_dir

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_spool(settings: Any, tmp_path: Path) -> Path:
    settings.JOBS_OUTCOME_SPOOL_DIR = str(tmp_path / "outcomes")
    return tmp_path / "outcomes"


def test_kept_outcome_is_written_and_its_file_removed(running_job: Job, own_spool: Path) -> None:
    report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"n": 1})
    path = services.outcome_spool_local(
        job_id=running_job.id, attempt=1, report=report, rss_bytes=7
    )
    assert path.parent == own_spool == spool_dir()
    assert [p.name for p in own_spool.iterdir()] == [f"{running_job.id}-1.json"]

    assert services.outcomes_drain_local() == 1

    running_job.refresh_from_db()
    assert running_job.status == JobStatus.SUCCEEDED
    assert running_job.result == {"n": 1}
    assert running_job.attempts.get().rss_after_bytes == 7
    assert list(own_spool.iterdir()) == []


def test_outcome_already_recorded_elsewhere_is_a_no_op(running_job: Job, own_spool: Path) -> None:
    failed = AttemptReport(
        outcome=AttemptOutcome.ERROR,
        error_type="PermanentError",
        error_message="x",
        retryable=False,
    )
    services.outcome_spool_local(job_id=running_job.id, attempt=1, report=failed, rss_bytes=None)
    # the Redis copy won: the attempt was recorded as succeeded first
    services.attempt_finish(
        job_id=running_job.id,
        attempt=1,
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED),
        rss_bytes=None,
    )

    services.outcomes_drain_local()

    running_job.refresh_from_db()
    assert running_job.status == JobStatus.SUCCEEDED
    assert list(own_spool.iterdir()) == []


def test_malformed_file_is_set_aside(own_spool: Path) -> None:
    own_spool.mkdir(parents=True)
    (own_spool / "broken-1.json").write_text("{not json")

    assert services.outcomes_drain_local() == 0

    assert [p.name for p in own_spool.iterdir()] == ["broken-1.bad"]


def test_default_directory_differs_per_database(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.JOBS_OUTCOME_SPOOL_DIR = ""
    first = spool_dir()
    monkeypatch.setitem(settings.DATABASES["default"], "NAME", "other.sqlite3")
    assert spool_dir() != first
    assert first.parent.name == "outcomes"
