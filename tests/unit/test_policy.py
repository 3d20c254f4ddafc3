"""jobs.policy: limits, the backoff bounds and the jittered delay."""

from __future__ import annotations

import random

import pytest

from jobs.kinds import policy_for
from jobs.policy import Policy


@pytest.mark.parametrize(
    ("failed_attempt", "expected"),
    [
        (1, (0.5, 1.0)),
        (2, (0.5, 2.0)),
        (3, (0.5, 4.0)),
        (9, (0.5, 256.0)),
        (10, (0.5, 300.0)),
        (500, (0.5, 300.0)),
    ],
)
def test_backoff_bounds_defaults_follow_floor_and_capped_doubling(
    failed_attempt: int, expected: tuple[float, float]
) -> None:
    assert Policy().backoff_bounds(failed_attempt) == expected


def test_backoff_bounds_formula_holds_for_custom_policy() -> None:
    policy = Policy(backoff_base=0.2, backoff_cap=5.0, backoff_floor=0.1)

    for n in range(1, 40):
        low, high = policy.backoff_bounds(n)
        assert low == 0.1
        assert high == max(0.1, min(5.0, 0.2 * 2 ** (n - 1)))


def test_backoff_bounds_high_never_below_floor() -> None:
    # base * 2**0 is below the floor; the floor wins, the cap still bounds later retries
    policy = Policy(backoff_base=0.01, backoff_cap=5.0, backoff_floor=2.0)

    assert policy.backoff_bounds(1) == (2.0, 2.0)
    assert policy.backoff_delay(1, rng=random.Random(1)) == 2.0
    assert policy.backoff_bounds(20) == (2.0, 5.0)


def test_backoff_delay_always_within_bounds_over_many_draws() -> None:
    policy = Policy(backoff_base=1.0, backoff_cap=60.0, backoff_floor=0.5)
    rng = random.Random(20240601)

    for n in range(1, 12):
        low, high = policy.backoff_bounds(n)
        draws = [policy.backoff_delay(n, rng=rng) for _ in range(2000)]
        assert all(low <= d <= high for d in draws), n
        # Full jitter: the draws spread over the interval, not one point.
        if high - low > 1:
            assert min(draws) < low + (high - low) * 0.1
            assert max(draws) > high - (high - low) * 0.1


def test_backoff_delay_is_deterministic_for_a_seeded_rng() -> None:
    policy = Policy()

    first = [policy.backoff_delay(4, rng=random.Random(7)) for _ in range(3)]

    assert len(set(first)) == 1


def test_retry_delay_retry_after_raises_the_minimum() -> None:
    policy = Policy(backoff_base=1.0, backoff_cap=10.0, backoff_floor=0.5)
    rng = random.Random(3)

    for n in range(1, 6):
        assert policy.retry_delay(n, retry_after=30.0, rng=rng) == 30.0


def test_retry_delay_small_retry_after_keeps_backoff_within_bounds() -> None:
    policy = Policy(backoff_base=1.0, backoff_cap=10.0, backoff_floor=0.5)
    rng = random.Random(4)

    for _ in range(500):
        delay = policy.retry_delay(3, retry_after=2.0, rng=rng)
        assert 2.0 <= delay <= 4.0


def test_retry_delay_without_retry_after_equals_backoff() -> None:
    policy = Policy()

    assert policy.retry_delay(3, rng=random.Random(9)) == policy.backoff_delay(
        3, rng=random.Random(9)
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"soft_time_limit": 0}, "time limits"),
        ({"soft_time_limit": 10, "hard_time_limit": 10}, "time limits"),
        ({"soft_time_limit": 10, "hard_time_limit": 5}, "time limits"),
        ({"backoff_base": -1}, "negative"),
        ({"backoff_cap": -1}, "negative"),
        ({"backoff_floor": -0.1}, "negative"),
        ({"backoff_floor": 10, "backoff_cap": 1}, "backoff_floor 10 s is above backoff_cap 1 s"),
        ({"max_attempts": 2.5}, "max_attempts must be an integer"),
        ({"max_attempts": True}, "max_attempts must be an integer"),
        ({"max_attempts": "3"}, "max_attempts must be an integer"),
        ({"backoff_cap": "60"}, "backoff_cap must be a number"),
        ({"soft_time_limit": False}, "soft_time_limit must be a number"),
        ({"hard_time_limit": float("inf")}, "hard_time_limit must be a finite number"),
        ({"soft_time_limit": float("nan")}, "soft_time_limit must be a finite number"),
        ({"backoff_cap": float("nan")}, "backoff_cap must be a finite number"),
        ({"retry_unexpected_errors": "no"}, "retry_unexpected_errors must be true or false"),
    ],
)
def test_policy_invalid_rules_raise_value_error(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Policy(**fields)


def test_policy_with_overrides_replaces_named_fields() -> None:
    policy = Policy().with_overrides({"max_attempts": 2, "backoff_base": 0.2})

    assert policy.max_attempts == 2
    assert policy.backoff_base == 0.2
    assert policy.backoff_cap == Policy().backoff_cap


def test_policy_with_overrides_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown policy fields"):
        Policy().with_overrides({"max_attempts": 2, "retry_forever": True})


def test_policy_with_overrides_rejects_a_non_object() -> None:
    with pytest.raises(ValueError, match="must be an object of policy fields, not list"):
        Policy().with_overrides([["max_attempts", 2]])  # type: ignore[arg-type]


def test_policy_with_overrides_rejects_floor_above_the_kinds_cap() -> None:
    # given a kind whose cap is 300 s, when only the floor is overridden past it
    with pytest.raises(ValueError, match="backoff_floor 600 s is above backoff_cap 300.0 s"):
        Policy().with_overrides({"backoff_floor": 600})


def test_policy_with_overrides_rejects_inconsistent_result() -> None:
    with pytest.raises(ValueError, match="time limits"):
        Policy(soft_time_limit=30, hard_time_limit=45).with_overrides({"soft_time_limit": 60})


def test_policy_is_frozen() -> None:
    policy = Policy()

    with pytest.raises(AttributeError):
        policy.max_attempts = 100  # type: ignore[misc]


def test_policy_for_applies_settings_overrides(settings) -> None:

    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"max_attempts": 2, "backoff_base": 0.1}}

    policy = policy_for("demo.flaky")

    assert (policy.max_attempts, policy.backoff_base) == (2, 0.1)


def test_policy_for_invalid_override_raises(settings) -> None:

    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"max_tries": 2}}

    with pytest.raises(ValueError, match="unknown policy fields"):
        policy_for("demo.flaky")
