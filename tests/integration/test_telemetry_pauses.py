"""jobs_paused and jobs_paused_seconds on the web's /metrics, moved by the management commands.

A pause made by `manage.py jobs_pause` shows as jobs_paused{scope, name} 1 with a growing
jobs_paused_seconds; `jobs_resume` sets both back to 0 (every kind and queue has both series). Bad input: exit status 1 and one line.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape, wait_metric

KIND = {"scope": "kind", "name": "demo.flaky"}


@pytest.mark.integration
@pytest.mark.timeout(120)
@covers("jobs_paused", "jobs_paused_seconds")
def test_paused_gauges_follow_the_pause_commands(platform_factory: Callable[..., Platform]) -> None:
    platform = platform_factory("pause_gauges", worker=False, scheduler=False)
    web = platform.url("/metrics")
    assert scrape(web).get("jobs_paused", KIND) == 0
    assert scrape(web).get("jobs_paused_seconds", KIND) == 0

    # when the kind is paused from the command line
    out = platform.stack.run(["python", "manage.py", "jobs_pause", "kind", "demo.flaky"]).stdout
    assert "kind demo.flaky paused since" in out

    # then it is 1, and the age grows
    first = scrape(web)
    assert first.get("jobs_paused", KIND) == 1
    age = first.get("jobs_paused_seconds", KIND)
    assert age is not None
    assert age >= 0
    wait_metric(
        platform,
        lambda s: (s.get("jobs_paused_seconds", KIND) or 0) >= age + 1,
        timeout=10,
        what="paused age to grow by 1 s",
        url=web,
    )

    # when resumed, both read 0 again
    platform.stack.run(["python", "manage.py", "jobs_resume", "kind", "demo.flaky"])
    after = scrape(web)
    assert after.get("jobs_paused", KIND) == 0
    assert after.get("jobs_paused_seconds", KIND) == 0

    # and bad input is refused with one readable line and a non-zero exit status
    with pytest.raises(subprocess.CalledProcessError) as caught:
        platform.stack.run(["python", "manage.py", "jobs_pause", "kind", "no.such"])
    lines = caught.value.stderr.strip().splitlines()
    assert caught.value.returncode != 0
    assert len(lines) == 1, caught.value.stderr
    assert "no kind named 'no.such'" in lines[0]
