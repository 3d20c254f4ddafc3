"""Concurrency limits per kind and key (jobs.concurrency_gate, jobs.engine.limiting) on the
unit test database: a job over its limit waits in the database and keeps its place."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry

from jobs import checks, concurrency_gate, engine, services, waiting_now
from jobs.concurrency_gate import KindLimit
from jobs.engine.values import AttemptReport, JobRef
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.policy import Policy
from jobs.reasons import WaitingReason
from jobs.telemetry.concurrency import ConcurrencyCollector

HOST = "worker-1@unit-box"


def _start(job: Job, attempt: int = 1) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=attempt, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"concurrency": 0},
        {"concurrency": True},
        {"concurrency": "3"},
        {"concurrency": 2.5},
        {"concurrency_key": "account_id"},  # a key needs a limit
        {"concurrency": 2, "concurrency_key": ""},
        {"concurrency": 2, "concurrency_key": "account..id"},
        {"concurrency": 2, "concurrency_key": 7},
    ],
)
def test_policy_refuses_bad_concurrency(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Policy().with_overrides(fields)


def test_policy_concurrency_path() -> None:
    assert Policy().concurrency_path == ()
    assert Policy(concurrency=3, concurrency_key="account.id").concurrency_path == ("account", "id")


def test_kind_limit_key_reads_the_payload_path() -> None:
    limit = KindLimit("k", 2, ("account", "id"))
    assert limit.key({"account": {"id": "a-1"}}) == '"a-1"'
    assert limit.key({"account": {"id": 42}}) == "42"
    assert limit.key({"other": 1}) == "null"
    # the JSON value is the identity, as in PostgreSQL: 42 and "42" are two keys
    assert limit.key({"account": {"id": "42"}}) != limit.key({"account": {"id": 42}})
    assert KindLimit("k", 2).key({"account": 1}) is None


def test_free_slots_and_pick_released_keep_the_order_per_key() -> None:
    # given a limit of 2 per account, a running on a and one released on b
    limit = KindLimit("k", 2, ("account",))
    free = concurrency_gate.free_slots(
        limit, running=[{"account": "a"}], in_flight=[{"account": "b"}, {"account": "b"}]
    )
    assert free == {'"a"': 1, '"b"': 0}
    held = [(1, {"account": "b"}), (2, {"account": "a"}), (3, {"account": "a"})]
    held += [(4, {"account": "c"}), (5, {"account": "c"}), (6, {"account": "c"})]
    # then the oldest held jobs that fit are released: one of a, none of b, two of c
    assert concurrency_gate.pick_released(limit, held, free) == [2, 4, 5]


@pytest.fixture
def limited(settings: Any) -> Callable[..., None]:
    def limit(**policy: Any) -> None:
        settings.JOBS_KIND_OVERRIDES = {"demo.flaky": policy}

    return limit


@pytest.mark.django_db
def test_concurrency_over_the_limit_waits_in_the_database(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    # given demo.flaky limited to 2 live attempts and 4 published jobs
    limited(concurrency=2)
    now = timezone.now()
    jobs = [job_factory(published_at=now, enqueued_at=now + timedelta(seconds=i)) for i in range(4)]

    # when all four deliveries arrive
    started = [_start(job) for job in jobs]

    # then two start and two wait, unpublished, with no attempt spent, saying why
    assert [s is not None for s in started] == [True, True, False, False]
    for job in jobs[2:]:
        job.refresh_from_db()
        assert job.status == JobStatus.QUEUED
        assert job.published_at is None
        assert job.attempts_made == 0
        assert job.waiting_reason == WaitingReason.CONCURRENCY_LIMIT
        assert job.waiting_detail.startswith("waiting for concurrency slot `demo.flaky`")
        assert not Attempt.objects.filter(job=job).exists()
    # the outbox sweep leaves them to the leader's release pass, which has no slot yet
    later = timezone.now() + timedelta(hours=1)
    assert services.outbox_sweep(now=later, limit=10, claimer="leader") == 0
    assert services.concurrency_release(limit=10, claimer="leader") == 0

    # when one running job ends, the oldest waiting job is released, the other keeps waiting
    Job.objects.filter(id=jobs[0].id).update(status=JobStatus.SUCCEEDED)
    assert services.concurrency_release(limit=10, claimer="leader") == 1
    assert services.concurrency_release(limit=10, claimer="leader") == 0  # its slot is taken
    # a newer job's delivery does not jump the queue: it waits behind the released one
    assert _start(jobs[3]) is None
    # and the released one starts
    assert _start(jobs[2]) is not None
    jobs[2].refresh_from_db()
    assert jobs[2].status == JobStatus.RUNNING
    assert jobs[2].waiting_reason == ""


@pytest.mark.django_db
def test_concurrency_key_limits_each_value(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    # given one live attempt per account
    limited(concurrency=1, concurrency_key="account")
    now = timezone.now()

    def job(account: str, i: int) -> Job:
        payload = {"fail_times": 0, "sleep_seconds": 0, "account": account}
        return job_factory(payload=payload, enqueued_at=now + timedelta(seconds=i))

    a1, b1, a2 = job("a", 0), job("b", 1), job("a", 2)

    # then a1 and b1 start, a2 waits for account a's slot
    assert _start(a1) is not None
    assert _start(b1) is not None
    assert _start(a2) is None
    a2.refresh_from_db()
    assert "key `a`" in a2.waiting_detail
    # b's end frees nothing for a
    Job.objects.filter(id=b1.id).update(status=JobStatus.SUCCEEDED)
    assert services.concurrency_release(limit=10, claimer="leader") == 0
    Job.objects.filter(id=a1.id).update(status=JobStatus.SUCCEEDED)
    assert services.concurrency_release(limit=10, claimer="leader") == 1
    assert _start(a2) is not None


@pytest.mark.django_db
def test_concurrency_key_keeps_a_number_and_its_string_apart(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    # given one live attempt per account, and accounts 42 (a number) and "42" (a string)
    limited(concurrency=1, concurrency_key="account")
    now = timezone.now()

    def job(account: Any, i: int) -> Job:
        payload = {"fail_times": 0, "sleep_seconds": 0, "account": account}
        return job_factory(payload=payload, enqueued_at=now + timedelta(seconds=i))

    number, text, number2 = job(42, 0), job("42", 1), job(42, 2)
    # then both start (two keys), and a second 42 waits for the number's slot
    assert _start(number) is not None
    assert _start(text) is not None
    assert _start(number2) is None
    number2.refresh_from_db()
    assert "key `42`" in number2.waiting_detail
    # the string's end frees nothing for the number
    Job.objects.filter(id=text.id).update(status=JobStatus.SUCCEEDED)
    assert services.concurrency_release(limit=10, claimer="leader") == 0


@pytest.mark.django_db
def test_concurrency_unlimited_kind_is_untouched(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    limited(concurrency=1)
    jobs = [job_factory(kind="demo.sleep", payload={"seconds": 0}) for _ in range(3)]
    assert all(_start(job) is not None for job in jobs)


@pytest.mark.django_db
def test_concurrency_collector_gauges_waiting_jobs_and_limits(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    # given demo.flaky limited to one live attempt, one running and two held
    limited(concurrency=1)
    jobs = [job_factory() for _ in range(3)]
    assert [_start(job) is not None for job in jobs] == [True, False, False]

    # when scraped
    registry = CollectorRegistry()
    registry.register(ConcurrencyCollector())

    # then the kind shows 2 waiting and its limit of 1
    labels = {"kind": "demo.flaky"}
    assert registry.get_sample_value("jobs_concurrency_waiting", labels) == 2
    assert registry.get_sample_value("jobs_concurrency_limit", labels) == 1
    assert registry.get_sample_value("jobs_concurrency_limit", {"kind": "demo.sleep"}) is None


def test_concurrency_bad_override_is_a_system_check_error(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"concurrency": 0}}
    errors = [e for e in checks.check_kind_overrides(None) if e.id == "jobs.E002"]
    assert errors, "no jobs.E002 for concurrency 0"
    assert "concurrency" in errors[0].msg


@pytest.mark.django_db
def test_concurrency_waiting_job_says_why(
    job_factory: Callable[..., Any], limited: Callable[..., None]
) -> None:
    limited(concurrency=1)
    first, second = job_factory(), job_factory()
    assert _start(first) is not None
    assert _start(second) is None
    second.refresh_from_db()

    shown = waiting_now.job_waiting(second)

    assert shown is not None
    assert shown.reason == WaitingReason.CONCURRENCY_LIMIT
    assert shown.detail.startswith("waiting for concurrency slot `demo.flaky`")
    assert shown.estimated_start is None


@pytest.mark.django_db
def test_concurrency_jobs_held_for_a_removed_limit_are_released(
    job_factory: Callable[..., Any], limited: Callable[..., None], settings: Any
) -> None:
    # given a job held under a limit of 1
    limited(concurrency=1)
    first, second = job_factory(), job_factory()
    assert _start(first) is not None
    assert _start(second) is None

    # when the limit is removed from the settings
    settings.JOBS_KIND_OVERRIDES = {}

    # then the leader's pass releases it, no longer waiting, and it starts
    assert services.concurrency_release(limit=10, claimer="leader") == 1
    second.refresh_from_db()
    assert second.waiting_reason == ""
    assert _start(second) is not None


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[Any], str]]:
    """What the engine's hand-off publishes (ids, claimer), the broker left out."""
    calls: list[tuple[list[Any], str]] = []

    def publish(job_ids: list[Any], claimer: str) -> int:
        calls.append((list(job_ids), claimer))
        return len(job_ids)

    monkeypatch.setattr(engine.current(), "publish", publish)
    return calls


def _succeed(job: Job, started: Any) -> Any:
    report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"ok": True})
    return services.attempt_finish(job_id=job.id, attempt=1, report=report, started=started)


def _retry(job: Job, started: Any) -> Any:
    report = AttemptReport(outcome=AttemptOutcome.ERROR, error_type="E", retryable=True)
    return services.attempt_finish(job_id=job.id, attempt=1, report=report, started=started)


def _lost(job: Job, started: Any) -> Any:
    return services.attempt_worker_lost(
        job_id=job.id, attempt=1, worker_pid=os.getpid(), message="child died"
    )


def _cancelled(job: Job, started: Any) -> Any:
    return engine.current().cancel(JobRef(job.id))


@pytest.mark.django_db
@pytest.mark.parametrize("end", [_succeed, _retry, _lost, _cancelled])
def test_concurrency_slot_is_handed_off_when_an_attempt_ends(
    job_factory: Callable[..., Any],
    limited: Callable[..., None],
    published: list[tuple[list[Any], str]],
    django_capture_on_commit_callbacks: Any,
    end: Callable[[Job, Any], Any],
) -> None:
    # given a limit of 1: one job running, two held (oldest first)
    limited(concurrency=1)
    now = timezone.now()
    running, older, newer = (
        job_factory(published_at=now, enqueued_at=now + timedelta(seconds=i)) for i in range(3)
    )
    started = _start(running)
    assert started is not None
    assert _start(older) is None
    assert _start(newer) is None

    # when the running attempt ends (success, retry, lost worker, cancel)
    with django_capture_on_commit_callbacks(execute=True):
        end(running, started)

    # then the oldest held job is claimed and published at once, the newer keeps waiting
    assert [ids for ids, _ in published] == [[older.id]]
    older.refresh_from_db()
    newer.refresh_from_db()
    assert older.publish_claimed_by.startswith("hand-off@")
    assert newer.publish_claimed_until is None
    # and the leader's pass finds the slot taken
    assert services.concurrency_release(limit=10, claimer="leader") == 0
    assert _start(newer) is None
    assert _start(older) is not None


@pytest.mark.django_db
def test_concurrency_hand_off_goes_to_the_freed_key_only(
    job_factory: Callable[..., Any],
    limited: Callable[..., None],
    published: list[tuple[list[Any], str]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given one live attempt per account: a1 and b1 run, a2 and b2 wait
    limited(concurrency=1, concurrency_key="account")
    now = timezone.now()

    def job(account: str, i: int) -> Job:
        payload = {"fail_times": 0, "sleep_seconds": 0, "account": account}
        return job_factory(payload=payload, enqueued_at=now + timedelta(seconds=i))

    a1, b1, a2, b2 = job("a", 0), job("b", 1), job("a", 2), job("b", 3)
    started = _start(a1)
    assert _start(b1) is not None
    assert _start(a2) is None
    assert _start(b2) is None

    # when a1 ends, a's slot goes to a2 (b2 still waits for b1)
    with django_capture_on_commit_callbacks(execute=True):
        _succeed(a1, started)
    assert [ids for ids, _ in published] == [[a2.id]]


@pytest.mark.django_db
def test_concurrency_no_hand_off_for_an_unlimited_kind_or_when_nothing_waits(
    job_factory: Callable[..., Any],
    limited: Callable[..., None],
    published: list[tuple[list[Any], str]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    limited(concurrency=1)
    other = job_factory(kind="demo.sleep", payload={"seconds": 0})
    alone = job_factory()
    for job in (other, alone):
        started = _start(job)
        with django_capture_on_commit_callbacks(execute=True):
            _succeed(job, started)
    assert published == []
