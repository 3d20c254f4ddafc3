"""jobs.memory_guard and its measure: limits, the watchdog's verdicts, the decision, billiard's hook."""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import billiard.pool
import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key

from jobs import memory_guard, memory_startup, services
from jobs.attempt_classify import MEMORY_LIMIT_ERROR, run_kind
from jobs.decisions import Action, decide
from jobs.kinds import AttemptContext, Kind
from jobs.models import AttemptOutcome, DeadReason
from jobs.policy import Policy
from jobs.services import AttemptReport
from jobs.supervisor import supervisor
from observability import memory, multiproc, worker_info

MIB = 1024 * 1024


class FuncKind(Kind):
    name = "test.func"

    def __init__(self, func: Callable[[dict[str, Any], AttemptContext], Any]) -> None:
        self.func = func

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        return self.func(payload, ctx)


# --- policy and decision -----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"soft_memory_limit": 200, "hard_memory_limit": 100}, "soft_memory_limit < hard_memory"),
        ({"hard_memory_limit": -1}, "hard_memory_limit must be a whole number of bytes"),
        ({"soft_memory_limit": 1.5}, "soft_memory_limit must be a whole number of bytes"),
        ({"soft_memory_limit": True}, "soft_memory_limit must be a whole number of bytes"),
        ({"retry_memory_limit": "yes"}, "retry_memory_limit must be true or false"),
    ],
)
def test_policy_memory_limits_invalid_raise_value_error(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**fields)


def test_attempt_limits_take_the_global_default_unless_the_kind_overrides(
    settings: Any,
) -> None:
    settings.JOBS_MEMORY_SOFT_LIMIT_BYTES = 100
    settings.JOBS_MEMORY_HARD_LIMIT_BYTES = 200

    assert memory_guard.attempt_limits(Policy()) == (100, 200)
    assert memory_guard.attempt_limits(Policy(hard_memory_limit=500)) == (100, 500)
    assert memory_guard.attempt_limits(Policy(soft_memory_limit=0, hard_memory_limit=0)) == (0, 0)


def test_decide_memory_limit_is_dead_with_its_reason_unless_the_kind_retries_it() -> None:
    def verdict(policy: Policy, attempts_made: int) -> Any:
        return decide(
            policy=policy,
            outcome=AttemptOutcome.MEMORY_LIMIT,
            retryable=False,
            attempts_made=attempts_made,
            max_attempts=3,
        )

    dead = verdict(Policy(), 1)
    retried = verdict(Policy(retry_memory_limit=True), 1)
    exhausted = verdict(Policy(retry_memory_limit=True), 3)

    assert (dead.action, dead.dead_reason) == (Action.DEAD, DeadReason.MEMORY_LIMIT)
    assert retried.action == Action.RETRY
    assert retried.delay_seconds > 0
    assert (exhausted.action, exhausted.dead_reason) == (Action.DEAD, DeadReason.EXHAUSTED)


# --- the watchdog ---------------------------------------------------------------------


def _context() -> AttemptContext:

    now = time.monotonic()
    return AttemptContext(
        job_id=uuid.uuid4(),
        kind="test.func",
        attempt=1,
        max_attempts=1,
        soft_deadline=now + 30,
        hard_deadline=now + 45,
    )


def test_watchdog_calls_soft_once_then_hard_once_on_growth_since_the_attempt_began() -> None:
    reading = {"bytes": 1000 * MIB}
    dog = memory_guard.MemoryWatchdog(interval=60, measure=lambda: reading["bytes"])
    calls: list[tuple[str, int]] = []
    dog.watch(
        _context(),
        soft=100 * MIB,
        hard=300 * MIB,
        on_soft=lambda g: calls.append(("soft", g)),
        on_hard=lambda g: calls.append(("hard", g)),
    )

    for grown in (50, 150, 200, 350, 400):
        reading["bytes"] = (1000 + grown) * MIB
        dog.check()

    assert calls == [("soft", 150 * MIB), ("hard", 350 * MIB)]
    assert dog.unwatch() == (350 * MIB, True)


def test_watchdog_zero_limits_check_nothing() -> None:
    reading = {"bytes": 0}
    dog = memory_guard.MemoryWatchdog(interval=60, measure=lambda: reading["bytes"])
    calls: list[int] = []
    dog.watch(_context(), soft=0, hard=0, on_soft=calls.append, on_hard=calls.append)

    reading["bytes"] = 10_000 * MIB
    dog.check()

    assert calls == []


def test_run_kind_stopped_on_the_memory_flag_ends_memory_limit() -> None:
    # given an attempt that waits on its cancellation flag, flagged for memory
    def run(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        threading.Timer(0.05, supervisor.flag, args=(ctx, "memory_limit")).start()
        ctx.cancel_event.wait(5)
        ctx.raise_if_cancelled()

    report = run_kind(FuncKind(run), {}, _context(), Policy())

    assert report.outcome == AttemptOutcome.MEMORY_LIMIT
    assert report.error_type == MEMORY_LIMIT_ERROR
    assert report.retryable is False


def test_run_kind_memory_error_ends_memory_limit() -> None:
    def run(payload: dict[str, Any], ctx: AttemptContext) -> Any:
        raise MemoryError

    report = run_kind(FuncKind(run), {}, _context(), Policy())

    assert (report.outcome, report.error_type) == (AttemptOutcome.MEMORY_LIMIT, MEMORY_LIMIT_ERROR)


# --- the measure and billiard's hook ----------------------------------------------------


def test_owned_bytes_counts_growth_since_the_fork_mark() -> None:
    memory.mark_fork()
    before = memory.owned_bytes()
    held = b"\x01" * (32 * MIB)

    grown = memory.owned_bytes() - before

    assert 30 * MIB <= grown <= 40 * MIB, grown
    del held


def test_billiard_still_reads_mem_rss_after_each_task() -> None:
    # install_recycle_measure replaces billiard.pool.mem_rss: this fails loudly
    # if billiard stops calling it by that name in Worker.workloop.
    source = inspect.getsource(billiard.pool.Worker.workloop)
    assert "used_kb = mem_rss()" in source
    assert "max_memory_per_child" in source


def test_install_recycle_measure_makes_billiard_read_owned_kib(monkeypatch: Any) -> None:
    monkeypatch.setattr(billiard.pool, "mem_rss", getattr(billiard.pool, "mem_rss"))  # noqa: B009
    memory.mark_fork()

    memory_startup.install_recycle_measure(hostname="h", limit_kb=0)

    reading = getattr(billiard.pool, "mem_rss")  # noqa: B009 - not in billiard's stubs
    assert reading is memory_startup.owned_kib
    assert 0 < reading() < 64 * 1024  # KiB owned since the mark, not the peak


# --- the recorded end, read back by the worker's main process ----------------------------


@pytest.mark.django_db
def test_attempt_memory_limit_end_reads_back_the_recorded_decision(running_job: Any) -> None:

    pid = running_job.attempts.get().worker_pid
    # given the child recorded its attempt memory_limit before it exited
    services.attempt_finish(
        job_id=running_job.id,
        attempt=1,
        report=AttemptReport(
            outcome=AttemptOutcome.MEMORY_LIMIT,
            error_type=MEMORY_LIMIT_ERROR,
            error_message="hard memory limit exceeded",
        ),
    )

    # when the main process reads it back for that child
    end = services.attempt_memory_limit_end(job_id=running_job.id, worker_pid=pid)
    other = services.attempt_memory_limit_end(job_id=running_job.id, worker_pid=pid + 1)

    # then it is the job's dead end with reason memory_limit; another child's is None
    assert end is not None
    assert end.decision is not None
    assert (end.decision.action, end.decision.dead_reason) == (
        Action.DEAD,
        DeadReason.MEMORY_LIMIT,
    )
    assert (end.job_status, end.attempt, end.outcome) == ("dead", 1, AttemptOutcome.MEMORY_LIMIT)
    assert other is None


def test_owned_by_pid_reads_each_childs_gauge_file(tmp_path: Any, monkeypatch: Any) -> None:

    # given two children's gauge files, one also holding another gauge
    for pid, owned in ((101, 5 * MIB), (102, 7 * MIB)):
        mm = MmapedDict(str(tmp_path / f"gauge_liveall_{pid}.db"))
        family = worker_info.OWNED_FAMILY
        key = mmap_key(family, family, ["hostname"], ["box"], "h")
        mm.write_value(key, float(owned), 0.0)
        other = mmap_key("jobs_other", "jobs_other", [], [], "h")
        mm.write_value(other, 1.0, 0.0)
        mm.close()
    monkeypatch.setattr(multiproc, "multiproc_dir", lambda: tmp_path)

    # then each pid's owned bytes are read back, and nothing else
    assert worker_info.owned_by_pid() == {101: 5 * MIB, 102: 7 * MIB}


@pytest.mark.parametrize(
    ("growth", "rate", "limit", "expected"),
    [
        (0, 0.0, 300 * MIB, 0.1),  # not growing: the configured interval
        (100 * MIB, 1 * MIB, 300 * MIB, 0.1),  # slow: the limit is far in time
        (0, 2000 * MIB, 300 * MIB, 0.075),  # fast: half the headroom at that rate
        (290 * MIB, 2000 * MIB, 300 * MIB, memory_guard.MIN_SAMPLE_INTERVAL),  # never below
        (100 * MIB, 2000 * MIB, 0, 0.1),  # no limit left to reach
        (100 * MIB, -50 * MIB, 300 * MIB, 0.1),  # shrinking
    ],
)
def test_next_interval_samples_faster_as_a_limit_comes_near_fast(
    growth: int, rate: float, limit: int, expected: float
) -> None:
    got = memory_guard.next_interval(growth=growth, rate=rate, limit=limit, interval=0.1)
    assert got == pytest.approx(expected)


def test_watchdog_pause_follows_the_growth_rate_towards_the_nearest_limit() -> None:
    reading = {"bytes": 0}
    dog = memory_guard.MemoryWatchdog(interval=0.1, measure=lambda: reading["bytes"])
    dog.watch(_context(), soft=0, hard=300 * MIB, on_soft=lambda g: None, on_hard=lambda g: None)
    assert dog.pause() == pytest.approx(0.1)
    # 200 MiB in (at most) a few ms: the next sample comes at the shortest pause
    reading["bytes"] = 200 * MIB
    dog.check()
    assert dog.pause() == pytest.approx(memory_guard.MIN_SAMPLE_INTERVAL)
    dog.unwatch()
    assert dog.pause() == pytest.approx(0.1)
