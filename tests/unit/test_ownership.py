"""jobs.ownership, its selectors and services: who sees and acts on which job.

Issue 18, item 3: a job belongs to its submitter; other non-staff users get
"no such job"; staff with jobs.view_job / jobs.change_job see / act on all;
JOBS_JOB_VISIBILITY=shared makes one namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User

from jobs import ownership, selectors, services
from jobs.errors import ActionNotPermitted, JobNotFound
from jobs.models import DeadReason, Job, JobStatus
from jobs.security_checks import check_job_visibility

pytestmark = pytest.mark.django_db


def _user(name: str, *, staff: bool = False, perms: tuple[str, ...] = ()) -> User:
    user = User.objects.create_user(username=name, password="not-used", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    return User.objects.get(pk=user.pk)  # a fresh instance: no cached permissions


@pytest.fixture
def people(user: User) -> dict[str, User]:
    """`a` owns the jobs (the job_factory's user); the others look at them."""
    return {
        "a": user,
        "b": _user("b"),
        "staff": _user("staff", staff=True),
        "viewer": _user("viewer", staff=True, perms=("view_job",)),
        "operator": _user("operator", staff=True, perms=("view_job", "change_job")),
        "not-staff-with-perms": _user("np", perms=("view_job", "change_job")),
    }


@pytest.mark.parametrize(
    ("who", "sees"),
    [
        ("a", True),
        ("b", False),
        ("staff", False),
        ("viewer", True),
        ("operator", True),
        ("not-staff-with-perms", False),
    ],
)
def test_job_get_for_returns_the_job_only_to_who_may_see_it(
    job_factory: Callable[..., Job], people: dict[str, User], who: str, sees: bool
) -> None:
    job = job_factory()

    found = selectors.job_get_for(user=people[who], job_id=job.id)

    assert (found is not None) is sees


def test_job_list_shows_each_user_their_own_jobs(
    job_factory: Callable[..., Job], people: dict[str, User]
) -> None:
    mine = job_factory()
    theirs = job_factory(created_by=people["b"])
    nobodys = job_factory(created_by=None)

    assert list(selectors.job_list(user=people["a"])) == [mine]
    assert list(selectors.job_list(user=people["b"])) == [theirs]
    assert list(selectors.job_list(user=people["staff"])) == []
    assert set(selectors.job_list(user=people["viewer"])) == {mine, theirs, nobodys}


def test_job_list_and_get_show_nothing_to_an_anonymous_user(
    job_factory: Callable[..., Job],
) -> None:

    job = job_factory(created_by=None)

    assert list(selectors.job_list(user=AnonymousUser())) == []
    assert selectors.job_get_for(user=AnonymousUser(), job_id=job.id) is None


def test_an_inactive_owner_sees_nothing(
    job_factory: Callable[..., Job], people: dict[str, User]
) -> None:
    job = job_factory()
    people["a"].is_active = False

    assert selectors.job_get_for(user=people["a"], job_id=job.id) is None


@pytest.mark.parametrize("who", ["b", "staff", "not-staff-with-perms"])
@pytest.mark.parametrize(
    ("service", "status"),
    [
        (services.job_cancel_for, JobStatus.RUNNING),
        (services.job_requeue_for, JobStatus.DEAD),
        (services.job_retry_now_for, JobStatus.DEAD),
    ],
)
def test_acting_on_another_users_job_is_job_not_found_and_changes_nothing(
    job_factory: Callable[..., Job],
    people: dict[str, User],
    who: str,
    service: Callable[..., Job],
    status: str,
) -> None:
    job = job_factory(status=status, dead_reason=DeadReason.EXHAUSTED if status == "dead" else "")

    with pytest.raises(JobNotFound) as raised:
        service(user=people[who], job_id=job.id)

    # the same error, word for word, as for an id that does not exist
    with pytest.raises(JobNotFound) as missing:
        service(user=people[who], job_id="00000000-0000-0000-0000-000000000000")
    assert str(raised.value) == str(missing.value)
    job.refresh_from_db()
    assert job.status == status


def test_a_viewer_without_change_permission_sees_but_may_not_act(
    job_factory: Callable[..., Job], people: dict[str, User]
) -> None:
    job = job_factory(status=JobStatus.RUNNING)

    with pytest.raises(ActionNotPermitted):
        services.job_cancel_for(user=people["viewer"], job_id=job.id)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_a_viewer_acts_on_their_own_jobs(
    job_factory: Callable[..., Job], people: dict[str, User]
) -> None:
    job = job_factory(status=JobStatus.QUEUED, created_by=people["viewer"])

    assert services.job_cancel_for(user=people["viewer"], job_id=job.id).status == "cancelled"


@pytest.mark.parametrize("who", ["a", "operator"])
def test_the_owner_and_an_operator_cancel_requeue_and_retry(
    job_factory: Callable[..., Job], people: dict[str, User], who: str
) -> None:
    running = job_factory(status=JobStatus.RUNNING)
    dead = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)
    dead2 = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED, attempts_made=5)

    assert services.job_cancel_for(user=people[who], job_id=running.id).status == "cancelled"
    assert services.job_requeue_for(user=people[who], job_id=dead.id).status == "queued"
    assert services.job_retry_now_for(user=people[who], job_id=dead2.id).status == "queued"


def test_shared_visibility_lets_every_user_see_and_act(
    job_factory: Callable[..., Job], people: dict[str, User], settings: Any
) -> None:
    settings.JOBS_JOB_VISIBILITY = "shared"
    job = job_factory(status=JobStatus.QUEUED)

    assert selectors.job_get_for(user=people["b"], job_id=job.id) == job
    assert services.job_cancel_for(user=people["b"], job_id=job.id).status == "cancelled"


def test_a_job_without_submitter_belongs_to_nobody(
    job_factory: Callable[..., Job], people: dict[str, User]
) -> None:
    job = job_factory(created_by=None)

    assert not ownership.is_owner(job, user=people["a"])
    assert ownership.may_act_on(job, user=people["operator"])


def test_unknown_visibility_is_a_startup_error(settings: Any) -> None:

    settings.JOBS_JOB_VISIBILITY = "everyone"

    assert [m.id for m in check_job_visibility(None)] == ["jobs.E010"]
