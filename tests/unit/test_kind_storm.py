"""demo.storm (the drill's job): times out holding its buffer, then succeeds; its helper stops on the flag."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from jobs.attempt_classify import run_kind
from jobs.kinds.storm import Storm, touched_buffer
from jobs.models import AttemptOutcome

PAYLOAD = {"fail_times": 1, "buffer_bytes": 64 * 1024, "leave_thread": True, "thread_seconds": 30}


def test_touched_buffer_has_every_page_written() -> None:
    buffer = touched_buffer(3 * 4096 + 10)

    assert len(buffer) == 3 * 4096 + 10
    assert [buffer[i] for i in range(0, len(buffer), 4096)] == [1, 1, 1, 1]


def test_storm_hanging_attempt_is_soft_timeout_and_leaves_no_thread(
    attempt_context: Callable[..., Any],
) -> None:
    # given the first attempt of a storm job, whose call hangs in a helper thread
    kind = Storm()
    payload = kind.validate_payload(PAYLOAD)
    before = set(threading.enumerate())

    # when its soft limit passes
    report = run_kind(kind, payload, attempt_context(soft_in=0.2, attempt=1), kind.policy)

    # then it timed out, retryable, and its helper is gone with the attempt
    assert report.outcome == AttemptOutcome.SOFT_TIMEOUT
    assert report.retryable is True
    left = [t for t in threading.enumerate() if t not in before and t.name.startswith("demo-storm")]
    for thread in left:
        thread.join(timeout=2)
    assert not any(t.is_alive() for t in left)


def test_storm_attempt_past_fail_times_succeeds(attempt_context: Callable[..., Any]) -> None:
    kind = Storm()
    payload = kind.validate_payload(PAYLOAD)

    report = run_kind(kind, payload, attempt_context(attempt=2), kind.policy)

    assert report.outcome == AttemptOutcome.SUCCEEDED
    assert report.result == {"attempt": 2, "buffer_bytes": 64 * 1024}
