"""The retry budget's window arithmetic (jobs.budget) against a real Redis (the private broker)."""

from __future__ import annotations

import dataclasses
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from celery import signals
from django.utils import timezone

from devstack.services import RedisServer, free_port
from jobs import budget, services, tasks
from jobs.budget import BudgetConfig
from jobs.first_tally import FirstTally
from jobs.models import AttemptOutcome, DeadReason, Job, JobStatus
from jobs.services import AttemptReport
from jobs.waiting import WaitingReason

W = 60.0
# Start of a window, far from "now" so nothing else shares its keys.
T0 = 1_000_000 * W


@pytest.fixture
def client(private_broker: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(private_broker.url)


@pytest.fixture
def config(client: redis.Redis) -> Iterator[BudgetConfig]:
    """Defaults of the acceptance (60 s, 0.2, floor 3, 300 s), under a key prefix of its own."""
    prefix = f"test:budget:{uuid.uuid4().hex}:"
    yield BudgetConfig(window=W, ratio=0.2, floor=3, max_deferral=300.0, key_prefix=prefix)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


def _firsts(n: int, at: float, config: BudgetConfig, client: redis.Redis) -> None:
    for _ in range(n):
        assert budget.record_first("k", now=at, config=config, client=client)


def test_budget_allows_ratio_times_first_attempts_plus_floor(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given 50 first attempts in the window: 0.2 x 50 + 3 = 13 retries allowed
    _firsts(50, T0 + 1, config, client)
    answers = [
        budget.reserve("k", now=T0 + 2, due=T0 + 10, config=config, client=client, spread=0.5)
        for _ in range(14)
    ]
    # then 13 get their asked time, the 14th is deferred into the next window
    assert [a.due for a in answers[:13]] == [T0 + 10] * 13
    assert not any(a.deferred or a.fallback for a in answers[:13])
    assert answers[0].limit == 13
    assert answers[12].used == 12
    late = answers[13]
    assert late.granted
    assert late.deferred
    assert T0 + W <= late.due < T0 + 2 * W
    # and the first refusal of the window is flagged once, for one log line
    assert late.first_exhaustion
    again = budget.reserve("k", now=T0 + 2, due=T0 + 10, config=config, client=client)
    assert again.deferred
    assert not again.first_exhaustion


def test_budget_deferral_uses_the_floor_of_windows_ahead_then_refuses(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given no first attempts at all: each window has the floor (3)
    answers = [
        budget.reserve("k", now=T0, due=T0 + 1, config=config, client=client, spread=0.0)
        for _ in range(3 * 6 + 1)
    ]
    # then 3 per window for the asked window and the 5 windows within 300 s after it
    windows = [int(a.due // W) - int(T0 // W) for a in answers if a.granted]
    assert windows == [w for w in range(6) for _ in range(3)]
    assert all(a.added_seconds <= config.max_deferral for a in answers if a.granted)
    # and past the maximum deferral the budget refuses (the job goes dead "budget")
    assert not answers[-1].granted


def test_budget_counts_a_due_time_at_the_window_edge_in_both_windows(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given a retry due 1 s before its window ends (within the 5 s guard)
    edge = budget.reserve("k", now=T0, due=T0 + W - 1, config=config, client=client)
    assert edge.granted
    assert not edge.deferred
    # then it took one of the 3 slots of both windows
    counts = {i: int(client.hget(config.key("k", int(T0 // W) + i), "r") or 0) for i in (0, 1)}
    assert counts == {0: 1, 1: 1}


def test_budget_windows_are_per_kind_and_expire(config: BudgetConfig, client: redis.Redis) -> None:
    _firsts(10, T0, config, client)
    budget.reserve("k", now=T0, due=T0 + 1, config=config, client=client)
    counts = budget.window_counts(["k", "other"], now=T0, config=config)
    assert counts == {"k": (1, 0.2 * 10 + 3), "other": (0, 3.0)}
    # the hashes are kept for the longest deferral plus two windows, then expire
    assert config.ttl == int(300 + 2 * W) + 1
    assert 0 < client.ttl(config.key("k", int(T0 // W))) <= config.ttl


def test_budget_falls_back_when_redis_is_unreachable(config: BudgetConfig) -> None:
    # given a Redis URL where nothing listens, with the budget's short timeouts
    dead = budget._client(f"redis://127.0.0.1:{free_port()}/0", 0.25)
    started = time.monotonic()
    answer = budget.reserve("k", now=T0, due=T0 + 7, config=config, client=dead)
    counted = budget.record_first("k", now=T0, config=config, client=dead)
    # then the retry keeps its due time, says so, and nothing stalled
    assert (answer.granted, answer.fallback, answer.due, answer.deferred) == (
        True,
        True,
        T0 + 7,
        False,
    )
    assert counted is False
    assert time.monotonic() - started < 2.0


def test_admitted_due_range_holds_exactly_the_due_times_admit_passes_unasked(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given start times across a window (its edges too) and due times around each
    # edge of the range, with a Redis that asks nothing (admit's round trip, when
    # it makes one, comes back as a fallback: not None)
    dead = budget._client(f"redis://127.0.0.1:{free_port()}/0", 0.05)
    margin = budget.ADMITTED_MARGIN_SECONDS
    for now in (T0, T0 + 0.001, T0 + 13.7, T0 + W - 0.001):
        low, high = budget.admitted_due_range(now, config)
        # then every due time inside the range is one admit lets start unasked ...
        for due in (low, low + 1, (low + high) / 2, high - 1, high):
            assert budget.admit("k", due=due, now=now, config=config, client=client) is None
        # ... and just outside it (past the margin) admit asks the budget
        for due in (low - 2 * margin, high + 2 * margin, T0 - W, T0 + 2 * W):
            assert budget.admit("k", due=due, now=now, config=config, client=dead) is not None
    # and the range is now's window plus the previous one's last guard seconds
    low, high = budget.admitted_due_range(T0 + 5, config)
    assert low == pytest.approx(T0 - W * budget.GUARD_FRACTION + margin, abs=1e-6)
    assert high == pytest.approx(T0 + W - margin, abs=1e-6)


def test_budget_decision_is_one_round_trip(config: BudgetConfig, client: redis.Redis) -> None:
    # given a window holding 5,000 first attempts and many retries
    key = config.key("k", int(T0 // W))
    client.hset(key, mapping={"f": 5000, "r": 900})
    budget.reserve("k", now=T0, due=T0 + 1, config=config, client=client)  # script loaded
    client.config_resetstat()
    budget.reserve("k", now=T0, due=T0 + 1, config=config, client=client)
    stats = client.info("commandstats")
    # then the decision sent one command, EVALSHA (the rest ran inside the script)
    sent = {name: v["calls"] for name, v in stats.items() if name not in {"cmdstat_config"}}
    assert sent.get("cmdstat_evalsha") == 1, sent


# --- the one decision, through the services ---------------------------------------


def _window_with_now_at(fraction: float, *, about: float) -> float:
    """A budget window length (seconds, within a few ms of ``about``) with now ``fraction`` in.

    Budget windows are epoch-aligned (window n is ``[n * length, (n + 1) * length)``), so a
    test that needs a few milliseconds of work to fall inside one window, far from its guard,
    picks the length from the clock instead of hoping the time of day is right.
    """
    now = time.time()
    length = (now - fraction * about) / (now // about)
    assert abs((now % length) / length - fraction) < 0.01
    return length


@pytest.mark.django_db
@pytest.mark.parametrize("one_statement", [False, True], ids=["general-path", "fast-path"])
def test_attempt_finish_over_budget_defers_then_dead_budget(
    job_factory: Callable[..., Any],
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    client: redis.Redis,
    one_statement: bool,
) -> None:

    # given a budget of one retry per window (floor 1, ratio 0), at most one window of deferral,
    # with a window length (~1 h) chosen so that now is 30% into its window whatever the clock
    # says: far from the window's end, so no retry falls in the guard that counts it in the
    # next window too (windows are epoch-aligned: window n is [n * length, (n + 1) * length))
    window = _window_with_now_at(0.3, about=3600.0)
    settings.JOBS_RETRY_BUDGET_RATIO = 0.0
    settings.JOBS_RETRY_BUDGET_FLOOR = 1
    settings.JOBS_RETRY_BUDGET_WINDOW = window
    settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL = window
    # (each first attempt written at its commit, not after a wait in this process:
    # test_budget_first_attempts_wait_in_the_process_until_flushed has the wait)
    settings.JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS = 0.0
    jobs = [job_factory() for _ in range(3)]
    failed = AttemptReport(
        outcome=AttemptOutcome.ERROR, error_type="RetryableError", error_message="x"
    )
    # when three jobs start (first attempts counted on commit) and fail
    with django_capture_on_commit_callbacks(execute=True):
        started = [
            services.attempt_start(
                job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(), rss_bytes=None
            )
            for job in jobs
        ]
    # (with what attempt_start returned, the finish is one statement: jobs.services.attempt_sql)
    ends = [
        services.attempt_finish(
            job_id=j.id, attempt=1, report=failed, started=s if one_statement else None
        )
        for j, s in zip(jobs, started, strict=True)
    ]
    # then the first keeps its backoff, the second waits for the next window,
    # the third finds no slot within the maximum deferral and is dead "budget"
    assert [e.status for e in ends] == [JobStatus.RETRYING, JobStatus.RETRYING, JobStatus.DEAD]
    decisions = [e.decision for e in ends if e.decision is not None]
    assert [d.budget_deferred for d in decisions] == [False, True, False]
    assert decisions[1].delay_seconds > 0
    assert decisions[2].dead_reason == DeadReason.BUDGET
    # and each job says why it waits: its backoff, or the budget that delayed it; the dead none
    rows = [Job.objects.get(id=j.id) for j in jobs]
    assert [r.waiting_reason for r in rows] == [
        WaitingReason.BACKOFF,
        WaitingReason.RETRY_BUDGET,
        "",
    ]
    backoff = re.search(r"after a backoff of ([\d.]+) s", rows[1].waiting_detail)
    assert backoff is not None, rows[1].waiting_detail
    assert decisions[1].delay_seconds > float(backoff.group(1)) + 1, rows[1].waiting_detail
    assert rows[1].waiting_detail.startswith("retry delayed "), rows[1].waiting_detail
    assert f"by the retry budget of {jobs[1].kind}" in rows[1].waiting_detail
    assert rows[0].waiting_detail.startswith("retry after a backoff of ")
    assert rows[2].waiting_detail == ""
    # and the three first attempts were counted in the window
    now = time.time()
    key = f"{settings.JOBS_RETRY_BUDGET_KEY_PREFIX}{{{jobs[0].kind}}}:{int(now // window)}"
    assert int(client.hget(key, "f") or 0) == 3


@pytest.mark.django_db
def test_a_retry_that_waited_into_a_full_window_is_held_at_its_start(
    job_factory: Callable[..., Any],
    attempt_factory: Callable[..., Any],
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:

    # given one retry per ~10 s window (ratio 0, floor 1; now 30% into its window, so both
    # starts fall in it), and two jobs whose retry was due 31 s ago (a window long gone:
    # they waited in a busy queue)
    length = _window_with_now_at(0.3, about=10.0)
    settings.JOBS_RETRY_BUDGET_RATIO = 0.0
    settings.JOBS_RETRY_BUDGET_FLOOR = 1
    settings.JOBS_RETRY_BUDGET_WINDOW = length
    ended = timezone.now() - timedelta(seconds=31)
    jobs = []
    for _ in range(2):
        job = job_factory(attempts_made=1)
        attempt_factory(
            job,
            number=1,
            outcome=AttemptOutcome.ERROR,
            finished_at=ended,
            retry_delay_seconds=1.0,
        )
        jobs.append(job)

    # when both retries start now
    with django_capture_on_commit_callbacks(execute=True):
        started = [
            services.attempt_start(
                job_id=j.id, attempt=2, hostname="w@h", pid=os.getpid(), rss_bytes=None
            )
            for j in jobs
        ]

    # then the first is counted in this window and runs; the second finds it full and
    # waits for the budget's next free slot (a later window), unrun
    assert started[0] is not None
    assert started[1] is None
    for job in jobs:
        job.refresh_from_db()
    assert jobs[0].status == JobStatus.RUNNING
    assert jobs[1].status == JobStatus.RETRYING
    # and the held one says why it waits, with the seconds it was held; the running one does not
    assert (jobs[0].waiting_reason, jobs[0].waiting_detail) == ("", "")
    assert jobs[1].waiting_reason == "retry_budget"
    assert re.fullmatch(
        rf"retry delayed [\d.]+ (s|min \d+ s) by the retry budget of {jobs[1].kind} \(held at "
        r"its start: .*\)",
        jobs[1].waiting_detail,
    ), jobs[1].waiting_detail
    assert jobs[1].attempts_made == 1
    window = int(timezone.now().timestamp() // length)
    assert int(jobs[1].next_attempt_at.timestamp() // length) > window
    # and its retry delay now ends at that slot, so its start there is the one
    # counted (no second count, no new deferral: it runs)
    previous = jobs[1].attempts.get(number=1)
    slot = previous.finished_at.timestamp() + previous.retry_delay_seconds
    assert slot == pytest.approx(jobs[1].next_attempt_at.timestamp(), abs=0.001)
    assert budget.admit(jobs[1].kind, due=slot, now=slot) is None


def test_budget_first_attempts_wait_in_the_process_until_flushed(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given counts that may wait a minute in their process (jobs.first_tally)
    waiting = dataclasses.replace(config, first_flush=60.0)
    tally = FirstTally()
    key = config.key("k", int(T0 // W))
    # when 5 first attempts are counted
    for _ in range(5):
        assert budget.record_first("k", now=T0 + 1, config=waiting, client=client, tally=tally)
    # then none has cost a round trip yet: a decision meanwhile sees a lower limit, never higher
    assert client.hget(key, "f") is None
    answer = budget.reserve("k", now=T0 + 2, due=T0 + 10, config=waiting, client=client, spread=0.5)
    assert answer.limit == 3
    # and a flush (a child's exit) writes them, in their own window
    assert budget.flush_firsts(config=waiting, client=client, tally=tally)
    assert client.hget(key, "f") == b"5"
    assert tally.take() == {}


def test_budget_first_attempts_are_written_once_the_oldest_waited_long_enough(
    config: BudgetConfig, client: redis.Redis
) -> None:
    # given counts that may wait no time at all past the first one
    waiting = dataclasses.replace(config, first_flush=1e-9)
    tally = FirstTally()
    key = config.key("k", int(T0 // W))
    # when two first attempts are counted, one in the next window
    budget.record_first("k", now=T0 + 1, config=waiting, client=client, tally=tally)
    time.sleep(0.001)
    budget.record_first("k", now=T0 + W + 1, config=waiting, client=client, tally=tally)
    # then both are written, each to its own window's hash, with its expiry
    assert client.hget(key, "f") == b"1"
    assert client.hget(config.key("k", int(T0 // W) + 1), "f") == b"1"
    assert 0 < client.ttl(key) <= config.ttl
    # and a flush with nothing pending costs nothing and succeeds
    assert budget.flush_firsts(config=waiting, client=client, tally=tally)


def test_budget_first_attempts_left_waiting_are_written_when_the_child_exits(
    settings: Any, client: redis.Redis
) -> None:
    # given first attempts waiting in this process's tally (the budget on the broker's Redis)
    settings.JOBS_RETRY_BUDGET_FIRST_FLUSH_SECONDS = 60.0
    config = BudgetConfig.from_settings()
    budget.first_tally().take()
    for _ in range(3):
        budget.record_first("k", now=T0 + 1, config=config)
    key = config.key("k", int(T0 // W))
    assert client.hget(key, "f") is None
    # when the worker child exits (the receiver Celery's worker_process_shutdown calls)
    receivers = [r[1]() for r in signals.worker_process_shutdown.receivers]
    assert tasks.flush_first_attempt_counts in receivers
    tasks.flush_first_attempt_counts()
    # then they are written
    assert client.hget(key, "f") == b"3"
