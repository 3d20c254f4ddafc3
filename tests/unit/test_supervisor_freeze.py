"""Supervisor.freeze stops the attempt's thread where it is (jobs.memory_guard's hard limit)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from jobs import supervisor as supervisor_module
from jobs.supervisor import ABORT_SIGNAL, FREEZE_SIGNAL, SOFT_LIMIT_SIGNAL, Supervisor
from observability.dumps import DUMP_SIGNAL


@pytest.mark.timeout(20)
def test_freeze_stops_the_attempts_thread_until_the_child_ends(
    attempt_context: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # FREEZE_SECONDS stands for "until the child ends": here the thread comes back.
    monkeypatch.setattr(supervisor_module, "FREEZE_SECONDS", 1.0)
    previous = {signum: signal.getsignal(signum) for signum in (ABORT_SIGNAL, FREEZE_SIGNAL)}
    watcher = Supervisor()
    ctx = attempt_context()
    # given an attempt busy in Python code on this (the main) thread
    watcher.watch(ctx)
    steps = [0]
    seen: dict[str, Any] = {}

    def freeze_from_the_watchdog() -> None:
        deadline = time.monotonic() + 5
        while steps[0] < 10_000 and time.monotonic() < deadline:
            time.sleep(0.001)
        # when another thread freezes it
        seen["returned"] = watcher.freeze(ctx)
        seen["at_freeze"] = steps[0]
        time.sleep(0.5)  # a window in which nothing may run, not a synchronisation
        seen["half_a_second_later"] = steps[0]

    other = threading.Thread(target=freeze_from_the_watchdog)
    try:
        other.start()
        deadline = time.monotonic() + 10
        while other.is_alive() and time.monotonic() < deadline:
            steps[0] += 1
        other.join(5)
    finally:
        watcher.unwatch()
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    # then it stopped within its next bytecode and ran nothing more while frozen
    assert seen["returned"] is True
    assert seen["half_a_second_later"] == seen["at_freeze"], seen
    # and freezing something not watched does nothing
    assert watcher.freeze(attempt_context()) is False


def test_the_childs_signals_are_distinct() -> None:
    signals = [ABORT_SIGNAL, FREEZE_SIGNAL, DUMP_SIGNAL, SOFT_LIMIT_SIGNAL]
    assert len(set(signals)) == len(signals)
