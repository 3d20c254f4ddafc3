"""jobs.cancellation: the main process's relay writes flag files; a child's poller reads them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.cancellation import CancelPoller, CancelRelay
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def test_relay_flags_the_cancelled_jobs_running_here_and_clears_the_rest(
    job_factory: Callable[..., Job], tmp_path: Path
) -> None:
    # given two running attempts on this worker, one of whose jobs is cancelled,
    # and a stale flag of a job no longer running here
    cancelled = job_factory(status=JobStatus.CANCELLED)
    running = job_factory(status=JobStatus.RUNNING)
    (tmp_path / "stale-job").touch()
    relay = CancelRelay(active=lambda: {str(cancelled.id), str(running.id)}, directory=tmp_path)
    poller = CancelPoller(directory=tmp_path)

    # when the relay makes a pass
    flagged = relay.relay_once()

    # then only the cancelled one is flagged, and its child's poller sees it
    assert flagged == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [str(cancelled.id)]
    assert poller.requested(cancelled.id)
    assert not poller.requested(running.id)


def test_relay_with_nothing_running_reads_nothing_and_keeps_no_flags(tmp_path: Path) -> None:
    (tmp_path / "old").touch()
    assert CancelRelay(active=set, directory=tmp_path).relay_once() == 0
    assert list(tmp_path.iterdir()) == []


def test_poller_never_raises_for_a_directory_that_is_not_there(tmp_path: Path) -> None:
    assert not CancelPoller(directory=tmp_path / "missing").requested("job")
