"""Statements per attempt on PostgreSQL: the engine's start and finish are one statement each.

Run in a `manage.py shell` against a fresh PostgreSQL database (a copy of
the session's migrated template), so the PostgreSQL backend is the one
chosen at startup. The database's clock is measured once before counting
(jobs.clock refreshes it every 30 s, not per attempt), and one attempt runs
before them (the retry budget writes its first-attempt counts at most once a
second per process, the first time at the first attempt).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import pytest

from devstack.postgres import create_database, drop_database
from devstack.processes import Stack
from tests.integration.harness import BASE_ENV, _migrated_template, require_postgres

_SCRIPT = """
import json, os
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jobs import clock, engine
from jobs.engine.values import AttemptRef, AttemptReport, Delivery
from jobs.kinds import policy_for
from jobs.models import AttemptOutcome

the_engine = engine.current()
counts = {"backend": the_engine.backend.name}
for name, report in {
    # The retry budget's first-attempt counts are written at most once a
    # second per process (jobs.budget_pg), the first time at the first
    # attempt: a warm-up attempt takes that write out of the counted ones.
    "warm-up": AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"ok": True}),
    "succeeded": AttemptReport(outcome=AttemptOutcome.SUCCEEDED, result={"ok": True}),
    "dead": AttemptReport(outcome=AttemptOutcome.ERROR, error_type="E", retryable=False),
}.items():
    job = the_engine.submitted(
        delayed=False, run_after=None, kind="demo.flaky", queue="default",
        payload={"fail_times": 0, "sleep_seconds": 0},
        max_attempts=policy_for("demo.flaky").max_attempts, enqueued_at=clock.now(),
    )
    job.save(force_insert=True)
    clock.now()
    with CaptureQueriesContext(connection) as queries:
        started = the_engine.start(
            Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(), rss_bytes=1)
        )
        end = the_engine.finish(AttemptRef(job_id=job.id, number=1, started=started), report)
    counts[name] = [end.status, [q["sql"].split()[0] for q in queries.captured_queries]]
print("COUNTS=" + json.dumps(counts))
"""


@pytest.mark.timeout(300)
def test_engine_statements_per_attempt_on_postgres_are_two() -> None:
    admin_url = require_postgres()
    template, _token = _migrated_template(admin_url)
    name = f"jobs_it_statements_{uuid.uuid4().hex[:8]}"
    url = create_database(name, admin_url=admin_url, template=template)
    try:
        with tempfile.TemporaryDirectory(prefix="jobs-it-statements-") as logdir:
            stack = Stack(env={**BASE_ENV, "DATABASE_URL": url}, logdir=Path(logdir))
            out = stack.run(["python", "manage.py", "shell", "-c", _SCRIPT], timeout=120).stdout
    finally:
        drop_database(name, admin_url=admin_url)
    line = next(x for x in out.splitlines() if x.startswith("COUNTS="))
    counts = json.loads(line.removeprefix("COUNTS="))

    assert counts["backend"] == "postgres"
    # one WITH ... UPDATE/INSERT for the start, one WITH ... UPDATE for the finish
    assert counts["succeeded"] == ["succeeded", ["WITH", "WITH"]]
    assert counts["dead"] == ["dead", ["WITH", "WITH"]]
