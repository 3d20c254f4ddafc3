"""Who may see and do what in the jobs admin (issue 10, "Permissions")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from jobs.models import DeadReason, Job, JobStatus

LIST = "/admin/jobs/job/"
OVERVIEW = "/admin/jobs/job/overview/"


def _login(
    client: Client, *, staff: bool = True, superuser: bool = False, perms: tuple = ()
) -> User:
    user = User.objects.create_user(
        username=f"u{User.objects.count()}", password="pw", is_staff=staff, is_superuser=superuser
    )
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(user)
    return user


@pytest.fixture
def dead_job(job_factory: Callable[..., Any]) -> Job:
    return job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)


def test_admin_non_staff_sent_to_login(client: Client, dead_job: Job) -> None:
    _login(client, staff=False)

    for url in (LIST, OVERVIEW, f"{LIST}{dead_job.pk}/change/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/?next=")


def test_admin_staff_without_permissions_is_refused(client: Client, dead_job: Job) -> None:
    _login(client)

    assert client.get(LIST).status_code == 403
    assert client.get(OVERVIEW).status_code == 403


def test_admin_view_only_staff_sees_no_actions(client: Client, dead_job: Job) -> None:
    # given a staff user with the view permission only
    _login(client, perms=("view_job",))

    # when they open the list, the job page and the overview
    listing = client.get(LIST)
    page = client.get(f"{LIST}{dead_job.pk}/change/")
    overview = client.get(OVERVIEW)

    # then they see all three, with no action anywhere
    assert (listing.status_code, page.status_code, overview.status_code) == (200, 200, 200)
    assert 'name="action"' not in listing.content.decode()
    assert 'class="job-actions"' not in page.content.decode()
    # and an action posted anyway is refused and changes nothing
    act = client.post(reverse("admin:jobs_job_act", args=[dead_job.pk, "requeue"]))
    assert act.status_code == 403
    listed = client.post(LIST, {"action": "requeue_action", "_selected_action": [str(dead_job.pk)]})
    assert listed.status_code in (200, 302)
    dead_job.refresh_from_db()
    assert dead_job.status == JobStatus.DEAD


def test_admin_change_permission_gives_actions_and_buttons(
    client: Client, dead_job: Job, broker_redis: Any
) -> None:
    _login(client, perms=("view_job", "change_job"))

    listing = client.get(LIST).content.decode()
    page = client.get(f"{LIST}{dead_job.pk}/change/").content.decode()

    for name in ("retry_now_action", "cancel_action", "requeue_action"):
        assert f'value="{name}"' in listing
    assert "delete_selected" not in listing
    assert 'class="job-action-requeue"' in page
    assert "max attempts 5 → 6" in page
    assert 'class="job-action-cancel"' not in page  # a dead job cannot be cancelled


def test_admin_nobody_adds_changes_or_deletes_jobs(client: Client, dead_job: Job) -> None:
    # given a superuser (every permission)
    _login(client, superuser=True)

    # then the index offers to view jobs only, and attempts are not in the admin at all
    index = client.get("/admin/").content.decode()
    assert f'href="{LIST}"' in index
    assert f"{LIST}add/" not in index
    assert ">Change<" not in index.split("Jobs")[-1][:400]
    assert client.get("/admin/jobs/attempt/").status_code == 404
    # and add, delete and saving the form are refused
    assert client.get(f"{LIST}add/").status_code == 403
    assert client.get(f"{LIST}{dead_job.pk}/delete/").status_code == 403
    assert client.post(f"{LIST}{dead_job.pk}/change/", {"kind": "x"}).status_code == 405
    # and the job page has no Save or Delete button
    page = client.get(f"{LIST}{dead_job.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    assert "deletelink" not in page
    dead_job.refresh_from_db()
    assert dead_job.kind == "demo.flaky"
