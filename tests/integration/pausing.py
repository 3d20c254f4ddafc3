"""Helpers of the pause tests (test_pause_resume.py, test_pause_soak.py): resume a paused
kind through the staff API and time the leader's release and the first start after it."""

from __future__ import annotations

import time
from typing import Any, Protocol

import requests

from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT


class Database(Protocol):
    def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any: ...


def resume_and_time_first_start(
    ops: requests.Session, resume_url: str, kind: str, db: Database, *, running: int
) -> tuple[float, dict[str, float]]:
    """POST the resume of `kind` as `ops`; wait until no job waits `paused` (the leader's
    release) and more than `running` attempts exist (a first start). Returns the resume's
    time.monotonic() and {"released": s, "started": s} after it."""
    resumed_at = time.monotonic()
    response = ops.post(resume_url, json={"scope": "kind", "name": kind}, timeout=HTTP_TIMEOUT)
    assert response.status_code == 200, response.text
    after: dict[str, float] = {}

    def released_and_started() -> bool:
        now = time.monotonic() - resumed_at
        if "released" not in after and not db.scalar(
            "SELECT count(*) FROM jobs_job WHERE waiting_reason = 'paused'"
        ):
            after["released"] = now
        if "started" not in after and db.scalar("SELECT count(*) FROM jobs_attempt") > running:
            after["started"] = now
        return len(after) == 2

    wait_for(released_and_started, timeout=10, interval=0.01, what="release and a first start")
    return resumed_at, after
