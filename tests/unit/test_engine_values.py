"""jobs.engine.values: the value objects the engine's operations take and return."""

from __future__ import annotations

import dataclasses

import pytest

from jobs import events
from jobs.engine.values import AttemptRef, Delivery, Effects, Loss, without_nul


def test_values_are_frozen() -> None:
    delivery = Delivery(job_id="j", attempt=1, hostname="w@h", pid=1)

    with pytest.raises(dataclasses.FrozenInstanceError):
        delivery.attempt = 2  # type: ignore[misc]
    assert AttemptRef(job_id="j", number=1).started is None
    assert Loss(job_id="j", attempt=1, worker_pid=None, message="gone").worker_pid is None


def test_effects_collect_in_order_and_send_nothing() -> None:
    effects = Effects()
    calls: list[int] = []

    effects.send(events.job_completed, job="a")
    effects.send(events.attempt_finished, job="b", attempt=None, decision=None)
    effects.call(lambda: calls.append(1))

    assert [(signal, kwargs["job"]) for signal, kwargs in effects.events] == [
        (events.job_completed, "a"),
        (events.attempt_finished, "b"),
    ]
    assert len(effects.calls) == 1
    assert calls == []


def test_without_nul_replaces_nul_in_nested_values() -> None:
    assert without_nul({"a\x00": ["x\x00", 1]}) == {"a\ufffd": ["x\ufffd", 1]}
