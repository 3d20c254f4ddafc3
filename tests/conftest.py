"""Hooks shared by the unit and integration tests."""

from __future__ import annotations

import signal
from typing import Any


def pytest_configure(config: Any) -> None:
    # A CI timeout or a plain `kill` sends SIGTERM, which would end pytest
    # without teardown and orphan every process a fixture started. As a
    # KeyboardInterrupt, pytest still runs the finalizers (stop by pid).
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"received signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
