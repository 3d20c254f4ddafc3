"""jobs_fuse_state and jobs_fuse_trips_total on the web's /metrics, moved by the management
command: a fuse tripped by `manage.py jobs_fuse trip` reads 2 (open) and counts one trip; a reset
reads 0 again (a kind with a fuse has its "*" series from the start)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape

KIND = {"kind": "demo.flaky", "destination": "*"}


@pytest.mark.integration
@pytest.mark.timeout(120)
@covers("jobs_fuse_state", "jobs_fuse_trips_total")
def test_fuse_series_follow_the_fuse_command(platform_factory: Callable[..., Platform]) -> None:
    # given demo.flaky with a fuse
    overrides = json.dumps({"demo.flaky": {"fuse": True}})
    platform = platform_factory(
        "fuse_gauges", env={"JOBS_KIND_OVERRIDES": overrides}, worker=False, scheduler=False
    )
    web = platform.url("/metrics")
    assert scrape(web).get("jobs_fuse_state", KIND) == 0
    assert scrape(web).get("jobs_fuse_trips_total", KIND) == 0

    # when an operator trips it from the command line, it reads open with one trip
    run = ["python", "manage.py", "jobs_fuse"]
    out = platform.stack.run([*run, "trip", "demo.flaky", "--reason", "partner down"]).stdout
    assert "demo.flaky * open" in out
    tripped = scrape(web)
    assert tripped.get("jobs_fuse_state", KIND) == 2
    assert tripped.get("jobs_fuse_trips_total", KIND) == 1

    # when reset, closed again; the trip stays counted
    platform.stack.run([*run, "reset", "demo.flaky"])
    after = scrape(web)
    assert after.get("jobs_fuse_state", KIND) == 0
    assert after.get("jobs_fuse_trips_total", KIND) == 1

    # and a kind without a fuse is refused with one line and a non-zero exit status
    with pytest.raises(subprocess.CalledProcessError) as caught:
        platform.stack.run([*run, "trip", "demo.sleep"])
    lines = caught.value.stderr.strip().splitlines()
    assert len(lines) == 1, caught.value.stderr
    assert "has no fuse" in lines[0]
