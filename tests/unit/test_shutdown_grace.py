"""jobs.shutdown_grace: the grace a worker's warm shutdown needs, from the kinds' hard limits."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.kinds.registry import kind_names, policy_for
from jobs.shutdown_grace import MARGIN_SECONDS, ShutdownGrace, required_grace


def test_required_grace_is_the_largest_hard_limit_plus_the_margin() -> None:
    largest = max(policy_for(name).hard_time_limit for name in kind_names())
    grace = required_grace()
    assert grace.hard_time_limit == largest
    assert policy_for(grace.kind).hard_time_limit == largest
    assert grace.seconds == largest + MARGIN_SECONDS


def test_required_grace_follows_the_kind_overrides(settings: Any) -> None:
    # given an override that raises one kind's hard limit above every other
    settings.JOBS_KIND_OVERRIDES = {
        "demo.sleep": {"soft_time_limit": 400, "hard_time_limit": 420.5}
    }
    # then that kind sets the grace, rounded up to whole seconds
    assert required_grace(margin=10) == ShutdownGrace("demo.sleep", 420.5, 10)
    assert required_grace(margin=10).seconds == 431


def test_required_grace_refuses_an_empty_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobs.shutdown_grace.kind_names", list)
    with pytest.raises(ValueError, match="no job kind is registered"):
        required_grace()
