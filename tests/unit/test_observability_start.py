"""observability.start: the one place a process role starts its telemetry."""

from __future__ import annotations

import pytest

import observability
from observability import tracing


def test_start_refuses_an_unknown_role_by_name() -> None:
    with pytest.raises(ValueError, match="unknown telemetry role 'webb'"):
        observability.start("webb")


def test_every_role_starts_without_an_exporter(settings: object) -> None:
    # With no exporter configured (the test settings) no tracer provider is installed.

    for role in ("web", "scheduler", "worker"):
        observability.start(role, hostname="w@h")
    assert tracing._provider is None
