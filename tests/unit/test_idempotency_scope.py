"""Idempotency keys are scoped per submitter and kind (issue 18, item 4).

B sending A's key gets a job of its own, never A's job nor a conflict naming
it; jobs without a submitter share one namespace of their own; the database
enforces both (two partial unique indexes, migration 0008).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from jobs import services
from jobs.errors import IdempotencyConflict
from jobs.models import Job
from jobs.services import submission

pytestmark = pytest.mark.django_db

FLAKY = {"fail_times": 1}


def _submit(user: Any = None, **kwargs: Any) -> services.SubmitResult:
    return services.job_submit(
        **{"kind": "demo.flaky", "payload": FLAKY, "idempotency_key": "order-42", **kwargs},
        user=user,
    )


@pytest.fixture
def a() -> User:
    return User.objects.create_user(username="a", password="not-used")


@pytest.fixture
def b() -> User:
    return User.objects.create_user(username="b", password="not-used")


def test_another_users_key_with_the_same_body_makes_a_new_job(a: User, b: User) -> None:
    theirs = _submit(a)

    mine = _submit(b)

    assert mine.created is True
    assert mine.job.pk != theirs.job.pk
    assert mine.job.created_by == b


def test_another_users_key_with_another_body_is_no_conflict(a: User, b: User) -> None:
    theirs = _submit(a)

    mine = _submit(b, payload={"fail_times": 3})

    assert mine.created is True
    assert str(theirs.job.pk) not in str(mine)


def test_a_squatted_key_does_not_block_the_owner(a: User, b: User) -> None:
    # B guesses A's next key first, with a body of its own
    _submit(b, payload={"fail_times": 9})

    # A's real submission is accepted, and repeating it returns A's job
    first = _submit(a)
    again = _submit(a)
    assert first.created is True
    assert (again.created, again.job.pk) == (False, first.job.pk)


def test_the_same_submitter_still_conflicts_naming_only_their_job(a: User, b: User) -> None:
    _submit(b)
    mine = _submit(a)

    with pytest.raises(IdempotencyConflict) as info:
        _submit(a, payload={"fail_times": 2})

    assert str(mine.job.pk) in str(info.value)
    assert str(Job.objects.get(created_by=b).pk) not in str(info.value)


def test_jobs_without_a_submitter_share_a_namespace_of_their_own(a: User) -> None:
    anonymous = _submit(None)

    assert _submit(None).job.pk == anonymous.job.pk
    assert _submit(a).job.pk != anonymous.job.pk


@pytest.mark.parametrize("submitter", ["a", None])
def test_the_database_refuses_a_second_row_with_one_submitters_key(
    a: User, submitter: str | None
) -> None:
    user = a if submitter else None
    first = _submit(user).job

    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(
            kind=first.kind,
            payload=first.payload,
            max_attempts=1,
            request_fingerprint="x",
            idempotency_key=first.idempotency_key,
            created_by=user,
        )


def test_a_lost_race_returns_the_winners_job_of_the_same_submitter(a: User, b: User) -> None:
    # B's job and A's winning job exist; A's lookup missed A's (it committed meanwhile)
    _submit(b)
    winner = _submit(a).job
    found = submission._same_key(kind="demo.flaky", key="order-42", submitter=a)
    with mock.patch.object(submission, "_same_key", side_effect=[None, found]):
        again = _submit(a)

    assert (again.created, again.job.pk) == (False, winner.pk)


def test_deleting_a_user_releases_their_keys(a: User) -> None:
    # A system job (no submitter) and A's job hold the same key
    system = _submit(None).job
    mine = _submit(a).job

    # deleting A moves A's job to no submitter: it must not collide with the system job
    a.delete()

    mine.refresh_from_db()
    assert mine.created_by is None
    assert mine.idempotency_key is None
    system.refresh_from_db()
    assert system.idempotency_key == "order-42"
