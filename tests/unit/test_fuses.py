"""The fuse on the unit test database (jobs.engine.fusing, jobs.services.fuse_ops): it trips on
dependency failures, holds deliveries in the database, lets one probe through after the
cool-down and releases the held jobs when the probe succeeds."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone
from prometheus_client import CollectorRegistry

from jobs import checks, engine, fuse_gate, services
from jobs.engine.values import AttemptReport
from jobs.fuse_model import Fuse
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.reasons import FuseState, WaitingReason
from jobs.telemetry.fuses import FuseCollector

HOST = "worker-1@unit-box"
FUSE = {"fuse": True, "fuse_min_attempts": 2, "fuse_failure_ratio": 0.5, "fuse_cooldown": 5.0}


@pytest.fixture
def fused(settings: Any) -> Callable[..., None]:
    def turn_on(**policy: Any) -> None:
        settings.JOBS_KIND_OVERRIDES = {"demo.flaky": FUSE | policy}

    return turn_on


def _start(job: Job, attempt: int = 1) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=attempt, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )


def _end(job: Job, started: Any, *, outcome: AttemptOutcome, retryable: bool = True) -> Any:
    report = AttemptReport(outcome=outcome, error_type="E", retryable=retryable)
    return services.attempt_finish(
        job_id=job.id, attempt=started.attempt, report=report, started=started
    )


def _probe_running(job: Job) -> Any:
    """Trip demo.flaky's fuse, make its probe due and start `job` as the probe (half-open);
    the started attempt."""
    services.fuse_trip(kind="demo.flaky", via="test")
    Fuse.objects.update(probe_due_at=timezone.now() - timedelta(seconds=1))
    started = _start(job)
    assert started is not None
    assert _fuse().state == FuseState.HALF_OPEN
    return started


def _fuse() -> Fuse:
    return Fuse.objects.get(kind="demo.flaky", destination="*")


def test_fuse_failed_classifies_dependency_failures() -> None:
    assert fuse_gate.failed(AttemptOutcome.SUCCEEDED, "") is False
    assert fuse_gate.failed(AttemptOutcome.ERROR, "") is True  # retried
    assert fuse_gate.failed(AttemptOutcome.ERROR, "exhausted") is True
    assert fuse_gate.failed(AttemptOutcome.HARD_TIMEOUT, "") is True
    assert fuse_gate.failed(AttemptOutcome.ERROR, "error") is False  # permanent: e.g. a 4xx
    assert fuse_gate.failed(AttemptOutcome.WORKER_LOST, "") is None
    assert fuse_gate.failed(AttemptOutcome.CANCELLED, "error") is None


def test_fuse_destination_is_the_url_host() -> None:
    config = fuse_gate.FuseConfig("k", fuse_gate.FuseRules(), ("target", "url"))
    assert config.destination({"target": {"url": "https://API.example.com/x?q=1"}}) == (
        "api.example.com"
    )
    assert config.destination({"target": {"url": "http://127.0.0.1:8080/"}}) == "127.0.0.1:8080"
    assert config.destination({"target": {}}) == "?"
    assert fuse_gate.FuseConfig("k", fuse_gate.FuseRules()).destination({}) == "*"


def test_fuse_kind_has_its_lease_negated_in_the_start_statement_map(settings: Any) -> None:
    backend = engine.backends.PostgresBackend()
    assert backend.leases()["demo.flaky"] > 0
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"fuse": True}}
    assert backend.leases()["demo.flaky"] < 0
    assert backend.leases()["demo.sleep"] > 0


@pytest.mark.django_db
def test_fuse_trips_holds_probes_and_releases(
    job_factory: Callable[..., Any],
    fused: Callable[..., None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given demo.flaky with a fuse (2 attempts, half failing), and 5 jobs
    fused()
    now = timezone.now()
    jobs = [job_factory(enqueued_at=now + timedelta(seconds=i)) for i in range(5)]

    # when the first two attempts fail retryably
    with django_capture_on_commit_callbacks(execute=True):
        for job in jobs[:2]:
            _end(job, _start(job), outcome=AttemptOutcome.ERROR)

    # then the fuse is open, and the next deliveries wait in the database, unspent
    fuse = _fuse()
    assert (fuse.state, fuse.trips) == (FuseState.OPEN, 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert [_start(job) for job in jobs[2:]] == [None, None, None]
    for job in jobs[2:]:
        job.refresh_from_db()
        assert (job.status, job.attempts_made, job.published_at) == (JobStatus.QUEUED, 0, None)
        assert job.waiting_reason == WaitingReason.FUSE_OPEN
        assert "fuse of `demo.flaky` open" in job.waiting_detail
        assert "probe attempt is due at" in job.waiting_detail
        assert not Attempt.objects.filter(job=job).exists()
    # the outbox sweep leaves them alone, and the leader releases none before the cool-down
    later = timezone.now() + timedelta(hours=1)
    assert services.outbox_sweep(now=later, limit=10, claimer="leader") == 0
    assert services.fuse_release(limit=10, claimer="leader") == 0

    # when the cool-down is over: one probe is released, and its start makes the fuse half-open
    Fuse.objects.filter(pk=fuse.pk).update(probe_due_at=timezone.now() - timedelta(seconds=1))
    assert services.fuse_release(limit=10, claimer="leader") == 1
    assert services.fuse_release(limit=10, claimer="leader") == 0  # one probe at a time
    probe = Job.objects.filter(waiting_reason=WaitingReason.FUSE_OPEN).exclude(
        publish_claimed_by=""
    )
    probe_job = probe.get()
    assert probe_job.id == jobs[2].id  # the oldest
    started = _start(probe_job)
    assert started is not None
    assert _fuse().state == FuseState.HALF_OPEN
    assert _start(jobs[3]) is None  # nobody else while the probe runs

    # when the probe succeeds: closed, and the leader releases the rest, oldest first
    with django_capture_on_commit_callbacks(execute=True):
        _end(probe_job, started, outcome=AttemptOutcome.SUCCEEDED)
    assert _fuse().state == FuseState.CLOSED
    assert services.fuse_release(limit=10, claimer="leader") == 2
    for job in jobs[3:]:
        job.refresh_from_db()
        assert job.waiting_reason == ""
        assert _start(job) is not None
    assert not Job.objects.filter(status=JobStatus.DEAD).exists()


@pytest.mark.django_db
def test_fuse_probe_failure_reopens_longer(
    job_factory: Callable[..., Any],
    fused: Callable[..., None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    fused()
    job = job_factory()
    started = _probe_running(job)
    with django_capture_on_commit_callbacks(execute=True):
        _end(job, started, outcome=AttemptOutcome.ERROR)
    fuse = _fuse()
    assert (fuse.state, fuse.cooldown_seconds, fuse.trips) == (FuseState.OPEN, 10.0, 1)


@pytest.mark.django_db
def test_fuse_probe_lost_worker_reopens_with_the_probe_due_now(
    job_factory: Callable[..., Any],
    fused: Callable[..., None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a half-open fuse whose probe runs
    fused()
    job = job_factory()
    _probe_running(job)

    # when the probe's child dies (an end that says nothing about the dependency)
    with django_capture_on_commit_callbacks(execute=True):
        services.attempt_worker_lost(
            job_id=job.id, attempt=1, worker_pid=os.getpid(), message="child died"
        )

    # then open again, its cool-down unchanged, a new probe due at once
    fuse = _fuse()
    assert (fuse.state, fuse.cooldown_seconds) == (FuseState.OPEN, 5.0)
    assert fuse.probe_due_at is not None
    assert fuse.probe_due_at <= timezone.now()


@pytest.mark.django_db
def test_fuse_permanent_errors_do_not_trip(
    job_factory: Callable[..., Any],
    fused: Callable[..., None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    fused()
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(4):
            job = job_factory()
            _end(job, _start(job), outcome=AttemptOutcome.ERROR, retryable=False)
    fuse = _fuse()
    assert fuse.state == FuseState.CLOSED
    assert (fuse.attempts, fuse.failures) == (4, 0)


@pytest.mark.django_db
def test_fuse_kind_without_fuse_is_untouched(
    job_factory: Callable[..., Any],
    fused: Callable[..., None],
    django_capture_on_commit_callbacks: Any,
) -> None:
    fused()
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            job = job_factory(kind="demo.sleep", payload={"seconds": 0})
            _end(job, _start(job), outcome=AttemptOutcome.ERROR)
    assert not Fuse.objects.exists()


@pytest.mark.django_db
def test_fuse_operator_trip_and_reset_are_in_history(
    job_factory: Callable[..., Any], fused: Callable[..., None], admin_user: Any
) -> None:
    fused()
    job = job_factory()
    row = services.fuse_trip(kind="demo.flaky", actor=admin_user, reason="partner down", via="CLI")
    assert row.state == FuseState.OPEN
    assert row.changed_by == admin_user
    assert _start(job) is None
    row = services.fuse_reset(kind="demo.flaky", actor=admin_user, via="admin")
    assert row.state == FuseState.CLOSED
    messages = list(
        LogEntry.objects.filter(object_id=str(row.pk)).values_list("change_message", flat=True)
    )
    assert sorted(messages) == ["Reset via admin.", "Tripped via CLI: partner down"]
    assert services.fuse_release(limit=10, claimer="leader") == 1


@pytest.mark.django_db
def test_fuse_trip_refuses_a_kind_without_fuse(fused: Callable[..., None]) -> None:
    from jobs.errors import JobsError  # noqa: PLC0415 - only this test needs it

    with pytest.raises(JobsError, match="has no fuse"):
        services.fuse_trip(kind="demo.sleep", via="test")


@pytest.mark.django_db
def test_fuse_collector_gauges_state_and_trips(fused: Callable[..., None]) -> None:
    fused()
    registry = CollectorRegistry()
    registry.register(FuseCollector())
    labels = {"kind": "demo.flaky", "destination": "*"}
    assert registry.get_sample_value("jobs_fuse_state", labels) == 0
    services.fuse_trip(kind="demo.flaky", via="test")
    assert registry.get_sample_value("jobs_fuse_state", labels) == 2
    assert registry.get_sample_value("jobs_fuse_trips_total", labels) == 1
    other = {"kind": "demo.sleep", "destination": "*"}
    assert registry.get_sample_value("jobs_fuse_state", other) == 0


def test_fuse_bad_override_is_a_system_check_error(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"fuse": True, "fuse_failure_ratio": 2}}
    errors = [e for e in checks.check_kind_overrides(None) if e.id == "jobs.E002"]
    assert errors
    assert "fuse_failure_ratio" in errors[0].msg


@pytest.mark.django_db
def test_fuse_open_holds_new_submissions_unpublished_until_released(
    fused: Callable[..., None],
    admin_user: Any,
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given demo.flaky's fuse tripped, and publishes recorded instead of sent
    fused()
    services.fuse_trip(kind="demo.flaky", actor=admin_user, reason="partner down", via="CLI")

    # when a job of it and one of another kind are submitted
    with django_capture_on_commit_callbacks(execute=True):
        held = services.job_submit(kind="demo.flaky", payload={"fail_times": 0}).job
        other = services.job_submit(kind="demo.sleep", payload={"seconds": 0}).job

    # then the fused kind's job waits in the database, unpublished; the other kind's is sent
    held.refresh_from_db()
    assert (held.status, held.published_at, held.waiting_reason) == (
        JobStatus.QUEUED,
        None,
        WaitingReason.FUSE_OPEN,
    )
    assert "fuse of `demo.flaky` open" in held.waiting_detail
    assert published == [other.id]
    # and the reset lets the leader release it, as a job held at its start
    services.fuse_reset(kind="demo.flaky", actor=admin_user, via="admin")
    assert services.fuse_release(limit=10, claimer="leader") == 1


@pytest.mark.django_db
def test_fuse_closed_submission_is_published(
    fused: Callable[..., None],
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    fused()
    with django_capture_on_commit_callbacks(execute=True):
        job = services.job_submit(kind="demo.flaky", payload={"fail_times": 0}).job
    job.refresh_from_db()
    assert (published, job.waiting_reason) == ([job.id], "")


@pytest.mark.django_db
def test_fuse_open_job_estimates_its_start_at_the_probe_time(
    job_factory: Callable[..., Any], fused: Callable[..., None], api_client: Any
) -> None:
    # given demo.flaky's fuse tripped and a job it holds at its start
    fused()
    job = job_factory()
    row = services.fuse_trip(kind="demo.flaky", via="test")
    assert _start(job) is None
    due = row.probe_due_at
    assert due is not None

    # then the API says it waits until the probe's due time, its estimated start
    shown = api_client.get(f"/api/jobs/{job.id}/").json()
    assert shown["waiting"]["reason"] == WaitingReason.FUSE_OPEN
    expected = due.isoformat().replace("+00:00", "Z")
    assert (shown["waiting"]["until"], shown["estimated_start"]) == (expected, expected)

    # and half-open with another job's probe running, nothing can be said
    Fuse.objects.update(state=FuseState.HALF_OPEN, probe_due_at=None)
    shown = api_client.get(f"/api/jobs/{job.id}/").json()
    assert (shown["waiting"]["until"], shown["estimated_start"]) == (None, None)
