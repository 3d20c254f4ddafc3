"""The API under the ownership rule, with two non-staff tokens and staff (issue 18, items 3, 4).

B never sees, lists, cancels or requeues A's job: each is answered exactly
as for an id that does not exist (404 in the error shape). Staff see and act
on all only with jobs.view_job / jobs.change_job.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.models import DeadReason, Job, JobStatus

pytestmark = pytest.mark.django_db

JOBS_URL = "/api/jobs/"


def _client(name: str, *, staff: bool = False, perms: tuple[str, ...] = ()) -> APIClient:
    user = User.objects.create_user(username=name, password="not-used", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


@pytest.fixture
def b() -> APIClient:
    return _client("b")


@pytest.mark.parametrize(
    ("method", "suffix", "status"),
    [
        ("get", "", JobStatus.QUEUED),
        ("post", "cancel/", JobStatus.RUNNING),
        ("post", "requeue/", JobStatus.DEAD),
    ],
)
def test_another_users_job_is_answered_as_a_missing_one(
    job_factory: Callable[..., Job], b: APIClient, method: str, suffix: str, status: str
) -> None:
    job = job_factory(
        status=status,
        payload={"fail_times": 0, "sleep_seconds": 0},
        dead_reason=DeadReason.EXHAUSTED if status == JobStatus.DEAD else "",
    )

    theirs = getattr(b, method)(f"{JOBS_URL}{job.id}/{suffix}")
    missing = getattr(b, method)(f"{JOBS_URL}{uuid.uuid4()}/{suffix}")

    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert set(theirs.json()) == {"detail", "errors"}
    job.refresh_from_db()
    assert job.status == status


def test_the_list_shows_each_token_only_its_jobs(
    job_factory: Callable[..., Job], api_client: APIClient, b: APIClient
) -> None:
    mine = job_factory()
    job_factory(created_by=None)

    assert [j["id"] for j in api_client.get(JOBS_URL).json()["results"]] == [str(mine.id)]
    assert b.get(JOBS_URL).json()["count"] == 0
    assert b.get(JOBS_URL, {"kind": "demo.flaky", "status": "queued"}).json()["count"] == 0


def test_the_owner_reads_cancels_and_requeues_their_job(
    job_factory: Callable[..., Job], api_client: APIClient
) -> None:
    running = job_factory(status=JobStatus.RUNNING)
    dead = job_factory(status=JobStatus.DEAD, dead_reason=DeadReason.EXHAUSTED)

    assert api_client.get(f"{JOBS_URL}{running.id}/").status_code == 200
    assert api_client.post(f"{JOBS_URL}{running.id}/cancel/").json()["status"] == "cancelled"
    assert api_client.post(f"{JOBS_URL}{dead.id}/requeue/").json()["status"] == "queued"


def test_staff_without_permissions_is_like_any_user(job_factory: Callable[..., Job]) -> None:
    job = job_factory(status=JobStatus.RUNNING)
    staff = _client("staff", staff=True)

    assert staff.get(f"{JOBS_URL}{job.id}/").status_code == 404
    assert staff.post(f"{JOBS_URL}{job.id}/cancel/").status_code == 404
    assert staff.get(JOBS_URL).json()["count"] == 0


def test_staff_with_view_sees_all_and_gets_403_acting_on_others(
    job_factory: Callable[..., Job],
) -> None:
    job = job_factory(status=JobStatus.RUNNING)
    viewer = _client("viewer", staff=True, perms=("view_job",))

    assert viewer.get(f"{JOBS_URL}{job.id}/").status_code == 200
    assert viewer.get(JOBS_URL).json()["count"] == 1
    refused = viewer.post(f"{JOBS_URL}{job.id}/cancel/")
    assert refused.status_code == 403
    assert [e["field"] for e in refused.json()["errors"]] == ["Authorization"]
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING


def test_staff_with_view_and_change_acts_on_all(job_factory: Callable[..., Job]) -> None:
    job = job_factory(status=JobStatus.RUNNING)
    operator = _client("operator", staff=True, perms=("view_job", "change_job"))

    assert operator.post(f"{JOBS_URL}{job.id}/cancel/").json()["status"] == "cancelled"


def test_another_users_idempotency_key_gets_a_job_of_ones_own(
    api_client: APIClient, b: APIClient
) -> None:
    body = json.dumps({"kind": "demo.flaky", "payload": {"fail_times": 1}})
    a_job = api_client.post(
        JOBS_URL, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    same = b.post(JOBS_URL, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1")
    other = b.post(
        JOBS_URL,
        json.dumps({"kind": "demo.flaky", "payload": {"fail_times": 2}}),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )

    assert a_job.status_code == 202
    assert same.status_code == 202  # a new job, not A's (200)
    assert same.json()["id"] != a_job.json()["id"]
    assert other.status_code == 409  # B's own first use of the key, with another body
    assert a_job.json()["id"] not in other.content.decode()
