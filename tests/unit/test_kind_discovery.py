"""Kinds from any installed app (issue 22, item 1): discovery and the duplicate-name check."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from jobs import checks
from jobs.kinds import Kind, get_kind, register, registry
from jobs.kinds.discovery import autodiscover_kinds
from jobs.kinds.flaky import FlakyPayload


@pytest.fixture
def clean_registry() -> Iterator[None]:
    kinds, conflicts = dict(registry._KINDS), list(registry._CONFLICTS)
    yield
    registry._KINDS.clear()
    registry._KINDS.update(kinds)
    registry._CONFLICTS[:] = conflicts


def test_a_fresh_apps_kinds_module_is_discovered(clean_registry: None) -> None:
    # given an installed app with a `kinds` module, not imported by anyone
    with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, "tests.byow_app"]):
        # when the platform discovers kinds
        found = autodiscover_kinds()
        # then its kind is registered, and its module named
        assert "tests.byow_app.kinds" in found
        assert "jobs.kinds" in found
        assert get_kind("byow.work").policy.max_attempts == 3
    assert checks.check_duplicate_kinds(None) == []


def test_two_classes_with_one_name_are_a_system_check_error(clean_registry: None) -> None:
    # given a second class registering the name of a built-in kind
    class Impostor(Kind):
        name = "report.csv_summary"
        payload_serializer = FlakyPayload

    register(Impostor)

    # then the first stays, and the check names both modules
    assert type(get_kind("report.csv_summary")).__name__ != "Impostor"
    (error,) = checks.check_duplicate_kinds(None)
    assert error.id == "jobs.E013"
    assert "jobs.kinds.csv_summary." in error.msg
    assert "test_kind_discovery" in error.msg
    assert "Impostor" in error.msg


def test_registering_the_same_class_again_is_no_conflict(clean_registry: None) -> None:
    register(type(get_kind("report.csv_summary")))
    assert checks.check_duplicate_kinds(None) == []
