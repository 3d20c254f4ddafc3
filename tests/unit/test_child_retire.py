"""jobs.child_retire: a child marked after an interrupted attempt reads over billiard's limit once."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import billiard.pool
import pytest

from jobs import child_retire, events, memory_startup
from jobs.events import RecycleReason


@pytest.fixture
def recycles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setattr(billiard.pool, "mem_rss", getattr(billiard.pool, "mem_rss"))  # noqa: B009
    seen: list[str] = []

    def receiver(reason: str, **_: Any) -> None:
        seen.append(reason)

    events.child_recycling.connect(receiver, dispatch_uid="test_child_retire")
    try:
        yield seen
    finally:
        events.child_recycling.disconnect(dispatch_uid="test_child_retire")
        child_retire.take_pending()


HUGE_KIB = 64 * 1024 * 1024  # 64 GiB: no test process owns that much


@pytest.mark.parametrize(
    ("limit_kb", "pool_limit"), [(0, child_retire.UNREACHABLE_KIB), (HUGE_KIB, HUGE_KIB)]
)
def test_owned_kib_is_over_the_pool_limit_once_after_an_interrupted_attempt(
    recycles: list[str], limit_kb: int, pool_limit: int
) -> None:
    # given billiard's after-task check reading owned memory, with or without a limit
    memory_startup.install_recycle_measure(hostname="h", limit_kb=limit_kb)
    # when the child's attempt was interrupted
    child_retire.retire_after_attempt(reason=RecycleReason.ABORTED, why="AttemptAbort was raised")
    # then the next reading is just over the pool's limit, and the recycle is counted as aborted
    assert memory_startup.owned_kib() == pool_limit + 1
    assert recycles == ["aborted"]
    # and the one after is the real reading again
    assert 0 < memory_startup.owned_kib() < HUGE_KIB
    assert recycles == ["aborted"]


def test_pool_without_a_memory_limit_gets_an_unreachable_one_and_shows_none() -> None:
    worker = SimpleNamespace(max_memory_per_child=None)
    child_retire.keep_check_on(sender=worker)
    assert worker.max_memory_per_child == child_retire.UNREACHABLE_KIB
    assert child_retire.limit_shown_kib(worker.max_memory_per_child) == 0

    limited = SimpleNamespace(max_memory_per_child=524288)
    child_retire.keep_check_on(sender=limited)
    assert limited.max_memory_per_child == 524288
    assert child_retire.limit_shown_kib(524288) == 524288


def test_child_label_is_main_outside_a_pool_child() -> None:
    assert child_retire.child_label() == "main"
