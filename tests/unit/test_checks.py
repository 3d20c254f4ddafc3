"""jobs.checks and config.startup: contradictory settings are errors, and errors stop a process."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import Error, Warning

from config.startup import EX_CONFIG, check_errors, refusal_line, refuse_on_check_errors
from jobs.checks import (
    check_broker_liveness,
    check_json_depth,
    check_kind_overrides,
    check_memory_limits,
    check_retry_budget,
    check_scheduler_lease,
    check_visibility_timeout,
)


def _ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_checks_default_settings_have_no_errors() -> None:
    assert check_errors() == []


def test_check_visibility_timeout_below_a_hard_limit_is_e001(settings: Any) -> None:
    settings.JOBS_VISIBILITY_TIMEOUT = 30

    errors = check_visibility_timeout(None)

    assert errors
    assert set(_ids(errors)) == {"jobs.E001"}
    assert any(
        "'demo.flaky' has hard_time_limit 45s >= JOBS_VISIBILITY_TIMEOUT 30s" in e.msg
        for e in errors
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"demo.flaky": {"backoff_floor": 10, "backoff_cap": 1}},
            "JOBS_KIND_OVERRIDES['demo.flaky'] gives an invalid policy: backoff_floor 10 s is "
            "above backoff_cap 1 s",
        ),
        ({"demo.flaky": {"backoff_floor": 900}}, "backoff_floor 900 s is above backoff_cap 300"),
        ({"demo.flaky": {"max_attempts": "3"}}, "max_attempts must be an integer, not '3'"),
        ({"demo.flaky": {"soft_time_limit": 60}}, "0 < soft_time_limit < hard_time_limit"),
        ({"demo.flaky": {"max_tries": 3}}, "unknown policy fields: ['max_tries']"),
        ({"demo.flaky": [1, 2]}, "must be an object of policy fields"),
        (["demo.flaky"], "JOBS_KIND_OVERRIDES must be a JSON object"),
    ],
    ids=[
        "floor-above-cap",
        "floor-above-kind-cap",
        "string-count",
        "soft-above-hard",
        "unknown",
        "list-fields",
        "list",
    ],
)
def test_check_kind_overrides_contradictions_are_e002(
    settings: Any, overrides: Any, expected: str
) -> None:
    settings.JOBS_KIND_OVERRIDES = overrides

    errors = check_kind_overrides(None)

    assert _ids(errors) == ["jobs.E002"]
    assert expected in errors[0].msg
    assert isinstance(errors[0], Error)


def test_check_kind_overrides_unknown_kind_is_a_warning_only(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"webhook.delivr": {"max_attempts": 2}}

    messages = check_kind_overrides(None)

    assert _ids(messages) == ["jobs.W001"]
    assert isinstance(messages[0], Warning)
    assert check_errors() == []


def test_check_visibility_timeout_skips_a_kind_with_an_invalid_override(settings: Any) -> None:
    # given an override E002 refuses, the E001 check must not crash on it
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"backoff_floor": 10, "backoff_cap": 1}}

    assert check_visibility_timeout(None) == []
    assert _ids(check_errors()) == ["jobs.E002"]


@pytest.mark.parametrize("depth", [0, -1, 201, 10_000, "64", True])
def test_check_json_depth_out_of_range_is_e003(settings: Any, depth: Any) -> None:
    settings.JOBS_JSON_MAX_DEPTH = depth

    assert _ids(check_json_depth(None)) == ["jobs.E003"]


@pytest.mark.parametrize("depth", [1, 64, 200])
def test_check_json_depth_in_range_passes(settings: Any, depth: int) -> None:
    settings.JOBS_JSON_MAX_DEPTH = depth

    assert check_json_depth(None) == []


def test_refusal_line_is_one_line_naming_the_first_error_and_the_count() -> None:
    errors = [
        Error("first\nproblem", hint="do  this", id="jobs.E001"),
        Error("second", id="jobs.E002"),
        Error("third", id="jobs.E001"),
    ]

    line = refusal_line("worker", errors)

    assert line == (
        "worker refused to start: jobs.E001: first problem (hint: do this); "
        "2 more (jobs.E001, jobs.E002): `python manage.py check` lists them all"
    )


def test_refuse_on_check_errors_exits_78_with_one_line(
    settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"backoff_floor": 10, "backoff_cap": 1}}

    with pytest.raises(SystemExit) as exited:
        refuse_on_check_errors("scheduler")

    assert exited.value.code == EX_CONFIG
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("scheduler refused to start: jobs.E002: ")


def test_refuse_on_check_errors_passes_a_valid_configuration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refuse_on_check_errors("web")

    assert capsys.readouterr().err == ""


def test_refuse_on_check_errors_respects_silenced_checks(settings: Any) -> None:
    settings.JOBS_VISIBILITY_TIMEOUT = 30
    settings.SILENCED_SYSTEM_CHECKS = ["jobs.E001"]

    refuse_on_check_errors("worker")


def test_check_memory_limits_soft_not_below_hard_is_e004(settings: Any) -> None:
    settings.JOBS_MEMORY_SOFT_LIMIT_BYTES = 600
    settings.JOBS_MEMORY_HARD_LIMIT_BYTES = 500
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"soft_memory_limit": 100}}

    errors = check_memory_limits(None)

    assert set(_ids(errors)) == {"jobs.E004"}
    flagged = {e.msg.split("'")[1] for e in errors}
    assert "demo.sleep" in flagged  # the global defaults contradict each other
    assert "demo.flaky" not in flagged  # its own soft limit is below the hard one


def test_check_memory_limits_negative_is_e004(settings: Any) -> None:
    settings.JOBS_MEMORY_HARD_LIMIT_BYTES = -1

    errors = check_memory_limits(None)

    assert _ids(errors) == ["jobs.E004"]
    assert "JOBS_MEMORY_HARD_LIMIT_BYTES is -1" in errors[0].msg


def test_check_retry_budget_refuses_a_zero_window_and_negative_numbers(settings: Any) -> None:
    assert check_retry_budget(None) == []
    settings.JOBS_RETRY_BUDGET_WINDOW = 0
    settings.JOBS_RETRY_BUDGET_FLOOR = -1
    errors = check_retry_budget(None)
    assert _ids(errors) == ["jobs.E006", "jobs.E006"]
    assert "JOBS_RETRY_BUDGET_WINDOW is 0; it must be a number above 0" in errors[0].msg
    assert "JOBS_RETRY_BUDGET_FLOOR is -1" in errors[1].msg


def test_check_broker_liveness_refuses_intervals_and_timeouts_not_above_zero(
    settings: Any,
) -> None:
    assert check_broker_liveness(None) == []
    # 0 would turn kombu's health checks off: a silent broker never noticed
    settings.JOBS_BROKER_HEALTH_CHECK_INTERVAL = 0
    settings.JOBS_BROKER_SOCKET_TIMEOUT = "2"
    errors = check_broker_liveness(None)
    assert _ids(errors) == ["jobs.E008", "jobs.E008"]
    assert errors[0].msg.startswith("JOBS_BROKER_HEALTH_CHECK_INTERVAL is 0;")
    assert errors[1].msg.startswith("JOBS_BROKER_SOCKET_TIMEOUT is '2';")


def test_check_scheduler_lease_refuses_a_renewal_not_below_the_lease(settings: Any) -> None:
    settings.JOBS_SCHEDULER_LEASE_SECONDS = 5
    settings.JOBS_SCHEDULER_RENEW_SECONDS = 5
    (error,) = check_scheduler_lease(None)
    assert error.id == "jobs.E021"
    assert "JOBS_SCHEDULER_RENEW_SECONDS (5) must be below JOBS_SCHEDULER_LEASE_SECONDS (5)" in (
        error.msg
    )
    settings.JOBS_SCHEDULER_RENEW_SECONDS = 4.5
    assert check_scheduler_lease(None) == []


def test_check_scheduler_lease_refuses_seconds_not_above_zero(settings: Any) -> None:
    settings.JOBS_SCHEDULER_LEASE_SECONDS = 0
    settings.JOBS_SCHEDULER_RENEW_SECONDS = -1
    settings.JOBS_OUTBOX_CLAIM_SECONDS = "30"
    assert _ids(check_scheduler_lease(None)) == ["jobs.E021"] * 3
