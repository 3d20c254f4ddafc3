"""Celery's soft time limit signal raises only in an overdue attempt's code (jobs.supervisor)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from jobs.supervisor import SOFT_LIMIT_SIGNAL, guard_soft_limit_signal, supervisor


@pytest.fixture
def guarded() -> Iterator[None]:

    previous = signal.getsignal(SOFT_LIMIT_SIGNAL)
    guard_soft_limit_signal()
    yield
    supervisor.unwatch()
    signal.signal(SOFT_LIMIT_SIGNAL, previous)


def _send() -> None:
    # Delivered to this (the main) thread before os.kill returns.
    os.kill(os.getpid(), SOFT_LIMIT_SIGNAL)


@pytest.mark.usefixtures("guarded")
def test_soft_signal_between_attempts_is_dropped() -> None:
    # given no attempt running (the signal was meant for one that ended)
    # when it lands, then nothing is raised
    _send()


@pytest.mark.usefixtures("guarded")
def test_soft_signal_early_in_a_fresh_attempt_is_dropped(
    attempt_context: Callable[..., Any],
) -> None:
    # given an attempt whose soft deadline is 30 s away
    supervisor.watch(attempt_context(soft_in=30))

    # when a late signal for the previous attempt lands, then it runs on
    _send()


@pytest.mark.usefixtures("guarded")
def test_soft_signal_in_an_overdue_attempt_raises(attempt_context: Callable[..., Any]) -> None:
    # given an attempt past its soft deadline
    supervisor.watch(attempt_context(soft_in=-0.1))

    # when the signal lands, then the kind's code gets SoftTimeLimitExceeded
    with pytest.raises(SoftTimeLimitExceeded):
        _send()
