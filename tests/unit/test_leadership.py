"""jobs.leadership: the scheduler's lease row (on the unit tests' SQLite; PostgreSQL in
tests/integration/test_scheduler_replicas.py) and this process's view of it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from jobs.leadership import (
    Leadership,
    lease_holder,
    lease_release,
    lease_take,
    process_identity,
)
from jobs.models import SchedulerLease
from jobs.telemetry.collectors import LeaderCollector


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def expire(name: str = "scheduler") -> None:
    SchedulerLease.objects.filter(name=name).update(expires_at=Now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_lease_take_first_taker_wins_and_others_wait_until_it_expires() -> None:
    # given a lease taken by a
    assert lease_take(name="scheduler", holder="a", seconds=10)
    first = lease_holder()
    assert first is not None
    assert first.holder == "a"
    assert first.term == 1
    assert first.expires_at is not None
    assert first.expires_at > timezone.now()

    # then b cannot take it while it runs, and a renews it without a new term
    assert not lease_take(name="scheduler", holder="b", seconds=10)
    assert lease_take(name="scheduler", holder="a", seconds=10)
    renewed = lease_holder()
    assert renewed is not None
    assert (renewed.holder, renewed.term) == ("a", 1)
    assert renewed.acquired_at == first.acquired_at

    # when a's lease runs out, b takes it in a new term and a cannot renew
    expire()
    assert lease_take(name="scheduler", holder="b", seconds=10)
    assert not lease_take(name="scheduler", holder="a", seconds=10)
    taken = lease_holder()
    assert taken is not None
    assert (taken.holder, taken.term) == ("b", 2)


@pytest.mark.django_db
def test_lease_release_frees_the_lease_at_once() -> None:
    assert lease_take(name="scheduler", holder="a", seconds=60)
    assert not lease_release(name="scheduler", holder="b")
    assert lease_release(name="scheduler", holder="a")
    assert lease_take(name="scheduler", holder="b", seconds=60)


@pytest.mark.django_db
def test_leadership_renews_at_its_pace_and_trusts_the_lease_for_its_length() -> None:
    # given two schedulers on one (fake) monotonic clock
    clock = FakeClock()
    a = Leadership(identity="a", lease_seconds=10, renew_seconds=2, clock=clock)
    b = Leadership(identity="b", lease_seconds=10, renew_seconds=2, clock=clock)

    # then the first to try leads and the other stands by
    assert a.hold()
    assert a.leading
    assert not b.hold()
    assert not b.leading

    # a cannot renew (say its database is gone): it still leads until the lease
    # counted from before its last renewal runs out, then stops
    clock.now += 9.9
    assert a.leading
    clock.now += 0.2
    assert not a.leading

    # once the row expires, b takes over at its next try; a learns it lost
    expire()
    assert b.hold()
    clock.now += 2
    assert not a.hold()
    assert (a.transitions, b.transitions) == (2, 1)


@pytest.mark.django_db
def test_leadership_does_not_query_between_renewals(
    django_assert_num_queries: Any,
) -> None:
    clock = FakeClock()
    a = Leadership(identity="a", lease_seconds=10, renew_seconds=2, clock=clock)
    a.hold()
    clock.now += 1
    with django_assert_num_queries(0):
        assert a.hold()
    clock.now += 1
    with django_assert_num_queries(1):
        assert a.hold()


@pytest.mark.django_db
def test_leadership_release_lets_a_standby_lead_at_its_next_try() -> None:
    clock = FakeClock()
    a = Leadership(identity="a", lease_seconds=10, renew_seconds=2, clock=clock)
    b = Leadership(identity="b", lease_seconds=10, renew_seconds=2, clock=clock)
    assert a.hold()
    assert not b.hold()
    a.release()
    assert not a.leading
    clock.now += 2
    assert b.hold()


@pytest.mark.django_db
def test_leader_collector_reports_whether_this_process_leads() -> None:
    clock = FakeClock()
    a = Leadership(identity="a", lease_seconds=10, renew_seconds=2, clock=clock)
    collector = LeaderCollector(a)

    def value() -> float:
        (family,) = list(collector.collect())
        assert family.name == "jobs_scheduler_leader"
        return family.samples[0].value

    assert value() == 0.0
    a.hold()
    assert value() == 1.0
    clock.now += 11
    assert value() == 0.0


def test_process_identity_is_unique_per_call_and_names_the_host_and_pid() -> None:
    first, second = process_identity(), process_identity()
    assert first != second
    host, pid, _ = first.split(":")
    assert host
    assert pid.isdigit()
