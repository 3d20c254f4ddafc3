"""`make demo`'s notes under its table: what it does on purpose, what each dead reason means."""

from __future__ import annotations

from collections import Counter

from devstack.workload import Mix
from devstack.workload_notes import Budget, dead_reasons, on_purpose

BUDGET = Budget(window=60.0, ratio=0.2, floor=10, max_deferral=30.0)


def test_on_purpose_names_the_failure_share_the_budget_and_its_shortened_deferral() -> None:
    text = on_purpose(Mix(), budget=BUDGET, webhook_attempts=6, flaky_attempts=5)

    assert "500 webhooks (up to 6 attempts each) go to a receiver that fails 30% of" in text
    assert "0.2 x first attempts + 10 per 60 s window" in text
    assert "at most 30 s (JOBS_RETRY_BUDGET_MAX_DEFERRAL, shortened by `make demo`" in text
    assert "12 webhooks go to a receiver answering 410 Gone: not retried" in text
    assert "2 demo.flaky jobs fail 50 times, more than their 5 attempts" in text
    assert "3 jobs are cancelled" in text


def test_dead_reasons_explain_the_intended_ones_by_kind_and_flag_the_rest() -> None:
    # given the table of a run: budget and error deaths as arranged, one poison death
    found = {
        "webhook.deliver": Counter({"budget": 93, "error": 12, "exhausted": 1}),
        "demo.flaky": Counter({"budget": 2, "exhausted": 2, "poison": 1}),
    }

    lines = dead_reasons(found, Mix(), budget=BUDGET).splitlines()

    # then each reason has its line with its count, by kind, and cause; only poison is not intended
    assert lines[:2] == ["", "Dead reasons in the table:"]
    by_reason = {line.split()[2]: line for line in lines[2:]}
    assert set(by_reason) == {"budget", "error", "exhausted", "poison"}
    assert (
        "95 (demo.flaky 2, webhook.deliver 93)  the retry budget found no slot within 30 s"
        in by_reason["budget"]
    )
    assert (
        "12 (webhook.deliver 12)  a non-retryable error: the webhooks answered 410, "
        in (by_reason["error"])
    )
    assert by_reason["exhausted"].endswith("all its attempts, intended")
    assert by_reason["poison"].endswith("NOT INTENDED")
    assert all("NOT INTENDED" not in by_reason[r] for r in ("budget", "error", "exhausted"))


def test_dead_reasons_say_when_an_arranged_death_is_missing() -> None:
    lines = dead_reasons({"webhook.deliver": Counter({"budget": 3})}, Mix(), budget=BUDGET)

    assert "dead: error        0  a non-retryable error" in lines
    assert "; 12 expected" in lines
