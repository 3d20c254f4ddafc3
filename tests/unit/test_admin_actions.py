"""Admin actions: through the services, bounded per request, larger selections as background jobs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from jobs.admin import actions
from jobs.kinds import AttemptContext, get_kind
from jobs.kinds.base import PermanentError
from jobs.models import DeadReason, Job, JobStatus

LIST = "/admin/jobs/job/"


@pytest.fixture
def root(db: None) -> User:
    return User.objects.create_superuser("root", "root@localhost", "pw")


@pytest.fixture
def admin_client(client: Client, root: User) -> Client:
    client.force_login(root)
    return client


def _dead(job_factory: Callable[..., Any], **fields: Any) -> Job:
    return job_factory(
        status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5, **fields
    )


def test_admin_list_action_requeues_eligible_jobs_and_skips_others(
    admin_client: Client, job_factory: Callable[..., Any], broker_redis: Any, root: User
) -> None:
    # given a dead job and a queued one, both selected
    dead, queued = _dead(job_factory), job_factory()

    # when the requeue action runs on both
    response = admin_client.post(
        LIST,
        {"action": "requeue_action", "_selected_action": [str(dead.id), str(queued.id)]},
        follow=True,
    )

    # then the dead job is queued with one more attempt, the other is skipped and said so
    dead.refresh_from_db()
    assert (dead.status, dead.max_attempts) == (JobStatus.QUEUED, 6)
    text = response.content.decode()
    assert "Requeue: 1 job(s) changed." in text
    assert "1 selected job(s) skipped" in text
    # and the History of the dead job names the user
    assert LogEntry.objects.get(object_id=str(dead.id)).user == root


def test_admin_job_page_cancel_button(
    admin_client: Client, job_factory: Callable[..., Any]
) -> None:
    job = job_factory()

    response = admin_client.post(reverse("admin:jobs_job_act", args=[job.id, "cancel"]))

    assert response.status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert "Cancelled via admin" in LogEntry.objects.get(object_id=str(job.id)).change_message


def test_admin_job_page_action_not_allowed_says_why(
    admin_client: Client, job_factory: Callable[..., Any]
) -> None:
    job = job_factory(status=JobStatus.SUCCEEDED)

    response = admin_client.post(
        reverse("admin:jobs_job_act", args=[job.id, "requeue"]), follow=True
    )

    assert (
        "Not done: job is succeeded; only dead jobs can be requeued." in response.content.decode()
    )


def test_large_selection_runs_as_background_jobs(
    job_factory: Callable[..., Any], broker_redis: Any, root: User, settings: Any
) -> None:
    # given more dead jobs than an action changes in the request
    settings.JOBS_ADMIN_ACTION_INLINE = 2
    settings.JOBS_ADMIN_ACTION_BATCH = 2
    dead = [_dead(job_factory) for _ in range(5)]

    # when the requeue action runs on all of them
    outcome = actions.run_on_selection(
        action="requeue", queryset=Job.objects.filter(kind="demo.flaky"), user=root
    )

    # then nothing changed in the request; 3 bulk jobs of at most 2 ids were submitted by the user
    assert (outcome.done, outcome.background_ids, len(outcome.background_jobs)) == (0, 5, 3)
    bulk = Job.objects.filter(kind="admin.bulk_action")
    assert sorted(len(j.payload["job_ids"]) for j in bulk) == [1, 2, 2]
    assert {j.created_by for j in bulk} == {root}

    # when a worker runs them (the kind's code, as the runner would call it)
    for job in bulk:
        reports: list[tuple[float, float | None, str]] = []
        ctx = replace(_ctx(job), progress_sink=lambda *report, r=reports: r.append(report))
        result = get_kind("admin.bulk_action").run(job.payload, ctx)
        assert result["skipped"] == result["missing"] == 0
        # and each reports its progress, ending at all of its jobs
        size = len(job.payload["job_ids"])
        assert [done for done, _, _ in reports] == list(range(size + 1))
        assert reports[-1] == (size, size, f"requeue: {size} of {size} jobs")

    # then every dead job is queued, and its History names the user and the bulk job
    assert {j.status for j in Job.objects.filter(id__in=[d.id for d in dead])} == {"queued"}
    entry = LogEntry.objects.filter(object_id=str(dead[0].id)).get()
    assert entry.user == root
    assert "bulk job" in entry.change_message


def test_bulk_action_refuses_a_submitter_without_change_permission(
    job_factory: Callable[..., Any], db: None
) -> None:
    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    target = _dead(job_factory)
    bulk = job_factory(
        kind="admin.bulk_action",
        payload={"action": "requeue", "job_ids": [str(target.id)]},
        created_by=clerk,
    )

    with pytest.raises(PermanentError, match="change_job"):
        get_kind("admin.bulk_action").run(bulk.payload, _ctx(bulk))

    target.refresh_from_db()
    assert target.status == JobStatus.DEAD


def _ctx(job: Job) -> Any:

    return AttemptContext(
        job_id=job.id,
        kind=job.kind,
        attempt=1,
        max_attempts=3,
        soft_deadline=time.monotonic() + 60,
        hard_deadline=time.monotonic() + 90,
    )
