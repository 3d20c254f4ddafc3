"""The fuse's state machine (jobs.fuse_rules): pure, no database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.fuse_rules import (
    FuseRules,
    FuseSnapshot,
    admit,
    check_fields,
    close,
    record_end,
    trip,
)
from jobs.reasons import FuseState

RULES = FuseRules(failure_ratio=0.5, min_attempts=4, window=10.0, cooldown=5.0, cooldown_max=12.0)
LEASE = 60.0


def _ends(s: FuseSnapshot, results: list[bool | None], *, at: float = 100.0) -> FuseSnapshot:
    for n, failed in enumerate(results):
        s = record_end(s, RULES, now=at + n * 0.1, job_id=f"j{n}", failed=failed)
    return s


def test_fuse_rules_closed_admits_and_counts_in_window() -> None:
    s = _ends(FuseSnapshot(), [False, True, None])
    assert s.state == FuseState.CLOSED
    assert (s.attempts, s.failures) == (2, 1)
    assert admit(s, RULES, now=101, job_id="x", probe_lease=LEASE) == (True, s)


def test_fuse_rules_trips_at_ratio_with_min_attempts() -> None:
    # given 3 failures of 3: below min_attempts, still closed
    s = _ends(FuseSnapshot(), [True, True, True])
    assert s.state == FuseState.CLOSED
    # when a 4th failure ends: 4 of 4 >= 0.5
    s = record_end(s, RULES, now=101.0, job_id="j9", failed=True)
    # then open, cool-down 5 s, one trip
    assert s.state == FuseState.OPEN
    assert s.probe_due == pytest.approx(106.0)
    assert (s.cooldown, s.trips, s.attempts) == (5.0, 1, 0)


def test_fuse_rules_stays_closed_below_ratio() -> None:
    s = _ends(FuseSnapshot(), [False, False, False, True, False, True, False])
    assert s.state == FuseState.CLOSED  # 2 of 7 < 0.5


def test_fuse_rules_window_rolls_over() -> None:
    # given 3 failures, then the window's 10 s pass
    s = _ends(FuseSnapshot(), [True, True, True])
    s = record_end(s, RULES, now=115.0, job_id="late", failed=True)
    # then the old failures no longer count
    assert s.state == FuseState.CLOSED
    assert (s.attempts, s.failures) == (1, 1)


LAST8 = FuseRules(failure_ratio=0.5, min_attempts=4, window=1000.0, window_attempts=8, cooldown=5.0)


def _ends_by(rules: FuseRules, results: list[bool], *, s: FuseSnapshot | None = None) -> list:
    """The state after each end, one every 0.01 s."""
    states, s = [], s or FuseSnapshot()
    for n, failed in enumerate(results):
        s = record_end(s, rules, now=100.0 + n * 0.01, job_id=f"j{n}", failed=failed)
        states.append(s)
    return states


def test_fuse_rules_old_successes_do_not_outvote_a_burst_of_failures() -> None:
    # given a busy calm: 1,000 successes inside the window's time
    calm = _ends_by(LAST8, [False] * 1000)[-1]
    assert (calm.state, calm.attempts, calm.failures) == (FuseState.CLOSED, 8, 0)
    # when the dependency fails: then the 4th failure trips it (4 of the last 8 ends)
    after = _ends_by(LAST8, [True] * 4, s=calm)
    assert [s.state for s in after] == [FuseState.CLOSED] * 3 + [FuseState.OPEN]
    assert after[-1].trips == 1


def test_fuse_rules_a_steady_share_under_the_ratio_never_trips() -> None:
    # given one failure in three ends, for 3,000 ends (what must stay silent), judged
    # from 6 ends on (at 4, "F S S F" would be 2 of 4: a small window's own noise)
    rules = replace(LAST8, min_attempts=6)
    states = _ends_by(rules, [n % 3 == 0 for n in range(3000)])
    # then it stays closed, counting at most the last 8 ends
    assert {s.state for s in states} == {FuseState.CLOSED}
    assert max(s.attempts for s in states) == 8
    assert max(s.failures for s in states) == 3


def test_fuse_rules_open_holds_until_cooldown_then_one_probe() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    ok, same = admit(s, RULES, now=104.0, job_id="a", probe_lease=LEASE)
    assert (ok, same) == (False, s)
    # when the cool-down is over, the first start becomes the probe
    ok, s = admit(s, RULES, now=106.5, job_id="probe", probe_lease=LEASE)
    assert ok
    assert s.state == FuseState.HALF_OPEN
    assert s.probe_job == "probe"
    # then nobody else starts, but the probe's redelivery does
    assert admit(s, RULES, now=107, job_id="other", probe_lease=LEASE)[0] is False
    assert admit(s, RULES, now=107, job_id="probe", probe_lease=LEASE)[0] is True


def test_fuse_rules_probe_success_closes() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    _, s = admit(s, RULES, now=107.0, job_id="probe", probe_lease=LEASE)
    s = record_end(s, RULES, now=108.0, job_id="probe", failed=False)
    assert s.state == FuseState.CLOSED
    assert (s.attempts, s.failures, s.trips, s.cooldown) == (0, 0, 1, 5.0)


def test_fuse_rules_probe_failure_reopens_with_doubled_capped_cooldown() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    cooldowns = []
    now = 107.0
    for _ in range(3):
        _, s = admit(s, RULES, now=now, job_id="p", probe_lease=LEASE)
        s = record_end(s, RULES, now=now + 1, job_id="p", failed=True)
        cooldowns.append(s.cooldown)
        assert s.state == FuseState.OPEN
        assert s.probe_due == pytest.approx(now + 1 + s.cooldown)
        now = s.probe_due or 0.0
    assert cooldowns == [10.0, 12.0, 12.0]
    assert s.trips == 1  # a re-open is not a new trip


def test_fuse_rules_probe_lost_worker_reopens_due_now() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    _, s = admit(s, RULES, now=107.0, job_id="p", probe_lease=LEASE)
    s = record_end(s, RULES, now=108.0, job_id="p", failed=None)
    assert s.state == FuseState.OPEN
    assert s.probe_due == 108.0
    assert s.cooldown == 5.0


def test_fuse_rules_ends_of_others_while_open_change_nothing() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    assert record_end(s, RULES, now=101, job_id="old", failed=False) == s
    _, half = admit(s, RULES, now=107.0, job_id="p", probe_lease=LEASE)
    assert record_end(half, RULES, now=108, job_id="old", failed=False) == half


def test_fuse_rules_lost_probe_replaced_after_its_lease() -> None:
    s = _ends(FuseSnapshot(), [True] * 4)
    _, s = admit(s, RULES, now=107.0, job_id="p", probe_lease=LEASE)
    assert admit(s, RULES, now=107.0 + LEASE - 1, job_id="q", probe_lease=LEASE)[0] is False
    ok, s = admit(s, RULES, now=107.0 + LEASE, job_id="q", probe_lease=LEASE)
    assert ok
    assert s.probe_job == "q"


def test_fuse_rules_operator_trip_and_reset() -> None:
    s = trip(FuseSnapshot(), RULES, now=50.0)
    assert (s.state, s.trips, s.probe_due) == (FuseState.OPEN, 1, 55.0)
    assert trip(s, RULES, now=51.0).trips == 1  # tripping an open fuse is no new trip
    assert close(s, RULES) == FuseSnapshot(cooldown=5.0, trips=1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("fuse", "yes"),
        ("fuse_key", "a..b"),
        ("failure_ratio", 0),
        ("failure_ratio", 1.5),
        ("failure_ratio", True),
        ("min_attempts", 0),
        ("min_attempts", 2.5),
        ("window", 0),
        ("cooldown", float("nan")),
        ("cooldown_max", 1.0),
        ("window_attempts", 9),
        ("window_attempts", 63),
        ("window_attempts", True),
    ],
)
def test_fuse_rules_check_fields_refuses(field: str, value: object) -> None:
    good: dict[str, object] = {
        "fuse": True,
        "fuse_key": "url",
        "failure_ratio": 0.5,
        "min_attempts": 10,
        "window": 60.0,
        "cooldown": 30.0,
        "cooldown_max": 600.0,
        "window_attempts": 20,
    }
    check_fields(**good)
    with pytest.raises(ValueError, match="fuse"):
        check_fields(**good | {field: value})
