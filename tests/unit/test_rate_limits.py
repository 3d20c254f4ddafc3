"""Rate limits per kind and key (jobs.gcra, jobs.rate_gate, jobs.engine.rating) on the unit
test database: the policy's fields, the GCRA arithmetic, and a job over the rate held in the
database with a reserved start, its place kept."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry

from jobs import checks, gcra, rate_gate, services, waiting_now
from jobs.models import Attempt, Job, JobStatus, RateBucket
from jobs.policy import Policy
from jobs.rate_gate import KindRate
from jobs.reasons import WaitingReason
from jobs.telemetry.rates import RateCollector

HOST = "worker-1@unit-box"


def _start(job: Job) -> Any:
    return services.attempt_start(
        job_id=job.id, attempt=1, hostname=HOST, pid=os.getpid(), rss_bytes=1000
    )


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("20/s", 20.0), ("600/m", 10.0), ("2.5/s", 2.5), (" 3 / m ", 0.05)],
)
def test_parse_rate_reads_per_second_and_per_minute(text: str, per_second: float) -> None:
    assert gcra.parse_rate(text) == pytest.approx(per_second)


@pytest.mark.parametrize(
    "fields",
    [
        {"rate": "20"},
        {"rate": "0/s"},
        {"rate": "-1/s"},
        {"rate": "20/h"},
        {"rate": 20},
        {"rate": True},
        {"rate_key": "account_id"},  # a key needs a rate
        {"rate": "1/s", "rate_key": "a..b"},
        {"rate": "1/s", "rate_key": 3},
        {"rate": "1/s", "rate_burst": -1},
        {"rate": "1/s", "rate_burst": 1.5},
        {"rate": "1/s", "rate_burst": True},
        {"rate": "1/s", "rate_burst": "2"},
    ],
)
def test_policy_refuses_bad_rate(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="rate"):
        Policy().with_overrides(fields)


def test_policy_rate_fields() -> None:
    policy = Policy(rate="600/m", rate_key="account.id", rate_burst=2)
    assert policy.rate_per_second == pytest.approx(10.0)
    assert policy.rate_path == ("account", "id")
    assert Policy().rate_per_second is None
    assert Policy().rate_path == ()


def test_rate_bad_override_is_a_system_check_error(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"rate": "fast"}}
    errors = [e for e in checks.check_kind_overrides(None) if e.id == "jobs.E002"]
    assert errors, "no jobs.E002 for rate 'fast'"
    assert "rate" in errors[0].msg


def test_gcra_spaces_arrivals_one_interval_apart() -> None:
    # given 10/s without burst: the first arrival conforms, the next only 0.1 s later
    first = gcra.judge(tat=None, at=100.0, per_second=10, burst=0)
    assert first.admitted
    assert first.tat == pytest.approx(100.1)
    early = gcra.judge(tat=first.tat, at=100.05, per_second=10, burst=0)
    assert not early.admitted
    assert early.wait == pytest.approx(0.05)
    assert early.tat == first.tat  # a refusal leaves the bucket alone
    on_time = gcra.judge(tat=first.tat, at=100.1, per_second=10, burst=0)
    assert on_time.admitted
    assert on_time.tat == pytest.approx(100.2)


def test_gcra_burst_admits_extra_arrivals_after_a_quiet_spell() -> None:
    # given 10/s with a burst of 2: three arrivals at once conform, the fourth waits
    tat = None
    verdicts = []
    for _ in range(4):
        verdict = gcra.judge(tat=tat, at=50.0, per_second=10, burst=2)
        verdicts.append(verdict.admitted)
        tat = verdict.tat if verdict.admitted else tat
    assert verdicts == [True, True, True, False]


@pytest.mark.parametrize("burst", [0, 1, 3])
def test_gcra_never_exceeds_rate_plus_burst_in_a_sliding_second(burst: int) -> None:
    # given arrivals every 7 ms for 5 s, judged in a shuffled order within each 28 ms
    rng = random.Random(7)
    times = [i * 0.007 for i in range(715)]
    order = []
    for start in range(0, len(times), 4):
        chunk = times[start : start + 4]
        rng.shuffle(chunk)
        order += chunk
    tat: float | None = None
    admitted = []
    for at in order:
        verdict = gcra.judge(tat=tat, at=at, per_second=20, burst=burst)
        if verdict.admitted:
            tat = verdict.tat
            admitted.append(at)
    admitted.sort()
    # then no half-open second holds more than 20 + burst, and the mean is the rate
    worst = max(sum(1 for t in admitted if start <= t < start + 1.0) for start in admitted)
    assert worst <= 20 + burst
    # and in arrival order the mean is the rate (out of order, late arrivals cost slots)
    tat = None
    in_order = 0
    for at in times:
        verdict = gcra.judge(tat=tat, at=at, per_second=20, burst=burst)
        if verdict.admitted:
            tat, in_order = verdict.tat, in_order + 1
    assert (in_order - burst) / 5.0 == pytest.approx(20, rel=0.1)


@pytest.mark.parametrize("burst", [0, 2])
def test_gcra_dispatch_margin_keeps_every_closed_second_at_the_destination_within_the_rate(
    burst: int,
) -> None:
    # given 20/s judged as KindRate does, with 25 ms of dispatch margin, arrivals every 1 ms
    rate = KindRate("k", "20/s", 20.0, burst, margin=0.025)
    assert rate.interval == pytest.approx(0.05125)
    tat: float | None = None
    starts = []
    for at in (i * 0.001 for i in range(5000)):
        verdict = gcra.judge(tat=tat, at=at, per_second=rate.enforced_per_second, burst=burst)
        if verdict.admitted:
            tat = verdict.tat
            starts.append(at)

    # then without the margin 21 starts fit in a closed second (the fence post) ...
    plain = [i * 0.05 for i in range(100)]
    assert max(sum(1 for t in plain if s <= t <= s + 1.0) for s in plain) == 21
    # ... and with it, each request delayed by any amount from 0 to 25 ms, no closed
    # second at the destination holds more than 20 + burst
    rng = random.Random(11)
    arrivals = sorted(t + rng.uniform(0, 0.025) for t in starts)
    worst = max(sum(1 for t in arrivals if s <= t <= s + 1.0) for s in arrivals)
    assert worst <= 20 + burst
    # and the mean costs the margin, 2.5 %: 20 / 1.025 = 19.5 a second
    assert (len(starts) - burst) / 5.0 == pytest.approx(20, rel=0.04)


def test_rate_dispatch_margin_out_of_range_is_a_system_check_error(settings: Any) -> None:
    settings.JOBS_RATE_DISPATCH_MARGIN = -0.1
    assert [e.id for e in checks.check_rate_dispatch_margin(None)] == ["jobs.E041"]
    settings.JOBS_RATE_DISPATCH_MARGIN = 0.025
    assert checks.check_rate_dispatch_margin(None) == []


def test_gcra_next_slot_follows_the_planning_cursor() -> None:
    # a new bucket: now; a busy one: its first conforming time, not before the cursor
    assert gcra.next_slot(tat=None, plan=None, at=10.0, per_second=4, burst=0) == 10.0
    assert gcra.next_slot(tat=11.0, plan=None, at=10.0, per_second=4, burst=1) == 10.75
    assert gcra.next_slot(tat=11.0, plan=12.5, at=10.0, per_second=4, burst=0) == 12.5


@pytest.fixture
def rated(settings: Any) -> Callable[..., None]:
    def limit(**policy: Any) -> None:
        settings.JOBS_KIND_OVERRIDES = {"demo.flaky": policy}
        # exact GCRA intervals here; the dispatch margin has tests of its own
        settings.JOBS_RATE_DISPATCH_MARGIN = 0.0

    return limit


@pytest.mark.django_db
def test_rate_over_the_limit_waits_with_a_reserved_start(
    job_factory: Callable[..., Any], rated: Callable[..., None]
) -> None:
    # given demo.flaky at 1 start a minute with a burst of 1, and 4 published jobs
    rated(rate="1/m", rate_burst=1)
    now = timezone.now()
    jobs = [job_factory(published_at=now, enqueued_at=now + timedelta(seconds=i)) for i in range(4)]

    # when all four deliveries arrive
    started = [_start(job) for job in jobs]

    # then two start (1 + burst) and two wait, unpublished, no attempt spent, saying why
    assert [s is not None for s in started] == [True, True, False, False]
    slots = []
    for job in jobs[2:]:
        job.refresh_from_db()
        assert job.status == JobStatus.QUEUED
        assert job.published_at is None
        assert job.attempts_made == 0
        assert job.waiting_reason == WaitingReason.RATE_LIMIT
        assert job.waiting_detail.startswith("waiting for rate limit `demo.flaky`: 1/m; next slot")
        assert not Attempt.objects.filter(job=job).exists()
        slots.append(job.next_attempt_at)
    # their reserved starts are one interval apart, in submission order, and shown as estimates
    assert (slots[1] - slots[0]).total_seconds() == pytest.approx(60.0, abs=0.01)
    shown = waiting_now.job_waiting(jobs[2])
    assert shown is not None
    assert shown.reason == WaitingReason.RATE_LIMIT
    assert shown.estimated_start == slots[0]
    # the outbox sweep and the pacer leave them alone before their time
    later = timezone.now() + timedelta(seconds=5)
    assert services.outbox_sweep(now=later, limit=10, claimer="leader") == 0
    assert services.rate_release(limit=10, claimer="leader") == 0


@pytest.mark.django_db
def test_rate_keeps_the_place_of_a_held_job(
    job_factory: Callable[..., Any], rated: Callable[..., None]
) -> None:
    # given one job held for the rate
    rated(rate="1/m")
    now = timezone.now()
    first, held, newer = (job_factory(enqueued_at=now + timedelta(seconds=i)) for i in range(3))
    assert _start(first) is not None
    assert _start(held) is None

    # when its slot has come (the bucket conforms again) but a newer job arrives first
    Job.objects.filter(id=held.id).update(next_attempt_at=timezone.now())
    RateBucket.objects.filter(kind="demo.flaky").update(tat=0.0)

    # then the newer one waits behind it; the pacer releases the held one, which starts
    assert _start(newer) is None
    assert services.rate_release(limit=10, claimer="leader") == 1
    assert _start(held) is not None
    held.refresh_from_db()
    assert held.status == JobStatus.RUNNING
    assert held.waiting_reason == ""


@pytest.mark.django_db
def test_rate_key_limits_each_value(
    job_factory: Callable[..., Any], rated: Callable[..., None]
) -> None:
    rated(rate="1/m", rate_key="account")

    def job(account: str) -> Job:
        return job_factory(payload={"fail_times": 0, "sleep_seconds": 0, "account": account})

    a1, b1, a2 = job("a"), job("b"), job("a")
    assert _start(a1) is not None
    assert _start(b1) is not None
    assert _start(a2) is None
    a2.refresh_from_db()
    assert "key `a`" in a2.waiting_detail


@pytest.mark.django_db
def test_rate_key_keeps_a_number_and_its_string_apart(
    job_factory: Callable[..., Any], rated: Callable[..., None]
) -> None:
    rated(rate="1/m", rate_key="account")

    def job(account: Any) -> Job:
        return job_factory(payload={"fail_times": 0, "sleep_seconds": 0, "account": account})

    number, text, number2 = job(42), job("42"), job(42)
    # then 42 and "42" have a bucket each, as PostgreSQL's (payload #> path)::text keys them
    assert _start(number) is not None
    assert _start(text) is not None
    assert _start(number2) is None
    assert set(RateBucket.objects.values_list("key", flat=True)) == {"42", '"42"'}
    # and the pacer groups them apart too: a slot due for 42 never goes to an older "42"
    rate = KindRate("demo.flaky", "1/m", 1 / 60, 0, ("account",))
    at = timezone.now()
    due = [(2, {"account": 42}, at)]
    oldest = [(1, {"account": "42"}, at), (2, {"account": 42}, at)]
    assert rate_gate.fill_due_slots(rate, due, oldest) == ([2], [])


@pytest.mark.django_db
def test_rate_unlimited_kind_is_untouched_and_removed_rate_releases(
    job_factory: Callable[..., Any], rated: Callable[..., None], settings: Any
) -> None:
    rated(rate="1/m")
    others = [job_factory(kind="demo.sleep", payload={"seconds": 0}) for _ in range(3)]
    assert all(_start(job) is not None for job in others)
    first, second = job_factory(), job_factory()
    assert _start(first) is not None
    assert _start(second) is None

    # when the rate is removed, the pacer releases the held job, no longer waiting
    settings.JOBS_KIND_OVERRIDES = {}
    assert services.rate_release(limit=10, claimer="leader") == 1
    second.refresh_from_db()
    assert second.waiting_reason == ""
    assert _start(second) is not None


@pytest.mark.django_db
def test_rate_collector_gauges_waiting_jobs_and_the_rate(
    job_factory: Callable[..., Any], rated: Callable[..., None]
) -> None:
    rated(rate="1/m")
    jobs = [job_factory() for _ in range(3)]
    assert [_start(job) is not None for job in jobs] == [True, False, False]

    registry = CollectorRegistry()
    registry.register(RateCollector())

    labels = {"kind": "demo.flaky"}
    assert registry.get_sample_value("jobs_rate_waiting", labels) == 2
    assert registry.get_sample_value("jobs_rate_limit_per_second", labels) == pytest.approx(1 / 60)
    assert registry.get_sample_value("jobs_rate_limit_per_second", {"kind": "demo.sleep"}) is None


@pytest.mark.django_db
def test_rate_new_submission_queues_unpublished_behind_held_jobs(
    job_factory: Callable[..., Any],
    rated: Callable[..., None],
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given demo.flaky at 1 start a minute, one job started and one held for the rate
    rated(rate="1/m")
    now = timezone.now()
    first, held = (job_factory(enqueued_at=now + timedelta(seconds=i)) for i in range(2))
    assert _start(first) is not None
    assert _start(held) is None
    held.refresh_from_db()

    # when a new job of the kind and one of another kind are submitted
    with django_capture_on_commit_callbacks(execute=True):
        new = services.job_submit(kind="demo.flaky", payload={"fail_times": 0}).job
        other = services.job_submit(kind="demo.sleep", payload={"seconds": 0}).job

    # then the new one waits in the database, unpublished, with the next reserved start
    new.refresh_from_db()
    assert (new.status, new.published_at, new.waiting_reason) == (
        JobStatus.QUEUED,
        None,
        WaitingReason.RATE_LIMIT,
    )
    assert new.waiting_detail.startswith("waiting for rate limit `demo.flaky`: 1/m")
    assert (new.next_attempt_at - held.next_attempt_at).total_seconds() == pytest.approx(
        60.0, abs=0.01
    )
    assert published == [other.id]


@pytest.mark.django_db
def test_rate_new_submission_is_published_when_nothing_is_held(
    rated: Callable[..., None],
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    rated(rate="1/m")
    with django_capture_on_commit_callbacks(execute=True):
        job = services.job_submit(kind="demo.flaky", payload={"fail_times": 0}).job
    job.refresh_from_db()
    assert (published, job.waiting_reason, job.next_attempt_at) == ([job.id], "", None)
