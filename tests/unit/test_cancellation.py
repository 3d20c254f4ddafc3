"""jobs.cancellation: the main process's relay writes flag files; a child's poller reads them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.cancellation import CancelPoller, CancelRelay
from jobs.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def test_relay_flags_the_cancelled_jobs_running_here_and_clears_only_its_own(
    job_factory: Callable[..., Job], tmp_path: Path
) -> None:
    # given two running attempts on this worker, one of whose jobs is cancelled,
    # and another worker's flag in the host's shared directory
    cancelled = job_factory(status=JobStatus.CANCELLED)
    running = job_factory(status=JobStatus.RUNNING)
    (tmp_path / "other-workers-job").touch()
    here = {str(cancelled.id), str(running.id)}
    relay = CancelRelay(active=lambda: here, directory=tmp_path)
    poller = CancelPoller(directory=tmp_path)

    # when the relay makes a pass
    flagged = relay.relay_once()

    # then the cancelled one is flagged, and its child's poller sees it
    assert flagged == 1
    assert poller.requested(cancelled.id)
    assert not poller.requested(running.id)
    # and once that attempt ended here, the relay removes its own flag only
    here.discard(str(cancelled.id))
    relay.relay_once()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-workers-job"]


def test_relay_with_nothing_running_reads_nothing(tmp_path: Path) -> None:
    assert CancelRelay(active=set, directory=tmp_path).relay_once() == 0


def test_poller_never_raises_for_a_directory_that_is_not_there(tmp_path: Path) -> None:
    assert not CancelPoller(directory=tmp_path / "missing").requested("job")
