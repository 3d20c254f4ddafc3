"""`make demo`'s workload command, small: its table, then what it does on purpose and why jobs died.

Issue 19, item 7: the demo's table showed 95 jobs `dead: budget` and 12
`dead: error` with no line saying these were intended, and its shortened
budget deferral was not printed. `manage.py jobs_demo` (what `make demo`
runs) is run here with 20 webhooks instead of 500, with `make demo`'s
settings, against a live platform.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.demo import DEMO_KIND_OVERRIDES
from tests.integration.harness import Platform, PlatformFactory, require_postgres

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_platform(_logroot: Path) -> Iterator[Platform]:
    """A platform with `make demo`'s overrides: webhook backoff capped, budget deferral 30 s."""
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory(
            "demo",
            env={
                "JOBS_KIND_OVERRIDES": DEMO_KIND_OVERRIDES,
                "JOBS_RETRY_BUDGET_MAX_DEFERRAL": "30",
                "JOBS_RETRY_BUDGET_FLOOR": "10",
            },
            worker_concurrency=4,
        )
    finally:
        factory.close()


@pytest.mark.timeout(300)
def test_jobs_demo_says_what_it_does_on_purpose_and_why_its_jobs_died(
    demo_platform: Platform,
) -> None:
    # when the demo's workload runs, small
    done = demo_platform.stack.run(
        [
            "python",
            "manage.py",
            "jobs_demo",
            f"--api-url={demo_platform.base_url}",
            f"--token={demo_platform.token}",
            "--webhooks=20",
            "--csv-jobs=1",
            "--csv-mb=0.2",
            "--deadline=240",
        ],
        timeout=280,
    )
    out = done.stdout

    # then its table has a Django @task's column and the jobs that reported progress (issue 22)
    assert "example.tasks.slugify_titles" in out, out
    (progress_row,) = [line for line in out.splitlines() if line.startswith("| reported progress")]
    assert int(progress_row.split("|")[2]) >= 1, out

    # and after its table it says what it arranged, with the deferral it ran with ...
    assert "| dead: error " in out, out
    notes = out[out.index("What this demo does on purpose:") :]
    assert "20 webhooks (up to 6 attempts each) go to a receiver that fails 30%" in notes
    assert "at most 30 s (JOBS_RETRY_BUDGET_MAX_DEFERRAL, shortened by `make demo`" in notes
    assert json.loads(DEMO_KIND_OVERRIDES) == json.loads(
        out.split("policy overrides (JOBS_KIND_OVERRIDES): ", 1)[1].splitlines()[0]
    )
    # ... and one line per dead reason: the 410s and the always-failing jobs as intended
    reasons = notes[notes.index("Dead reasons in the table:") :].splitlines()[1:]
    by_reason = {line.split()[2]: line for line in reasons if line.startswith("- dead: ")}
    assert {"budget", "error", "exhausted"} <= set(by_reason), reasons
    assert by_reason["error"].endswith(
        "12 (webhook.deliver 12)  a non-retryable error: the webhooks answered 410, intended (12)"
    )
    assert "NOT INTENDED" not in notes
