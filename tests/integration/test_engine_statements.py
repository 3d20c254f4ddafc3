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
from tests.integration.harness import BASE_ENV, require_postgres
from tests.integration.platform_seed import migrated_template

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
    counts["admit"] = any("jobs_concurrency_admit" in q["sql"] for q in queries.captured_queries)
    counts["fused"] = "jobs_fuse" in queries.captured_queries[0]["sql"]
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'WITH%%'")
    counts["prepared"] = cursor.fetchone()[0]
print("COUNTS=" + json.dumps(counts))
"""


def _shell_in_fresh_database(script: str, label: str, env: dict[str, str] | None = None) -> str:
    """stdout of `manage.py shell -c script` on a new migrated PostgreSQL database, dropped after
    (`env` added to the shell's environment)."""
    admin_url = require_postgres()
    template, _token = migrated_template(admin_url, BASE_ENV)
    name = f"jobs_it_{label}_{uuid.uuid4().hex[:8]}"
    url = create_database(name, admin_url=admin_url, template=template)
    try:
        with tempfile.TemporaryDirectory(prefix=f"jobs-it-{label}-") as logdir:
            stack = Stack(env={**BASE_ENV, "DATABASE_URL": url, **(env or {})}, logdir=Path(logdir))
            return stack.run(["python", "manage.py", "shell", "-c", script], timeout=120).stdout
    finally:
        drop_database(name, admin_url=admin_url)


@pytest.mark.timeout(300)
def test_engine_statements_per_attempt_on_postgres_are_two() -> None:
    out = _shell_in_fresh_database(_SCRIPT, "statements")
    line = next(x for x in out.splitlines() if x.startswith("COUNTS="))
    counts = json.loads(line.removeprefix("COUNTS="))

    assert counts["backend"] == "postgres"
    # one WITH ... UPDATE/INSERT for the start, one WITH ... UPDATE for the finish
    assert counts["succeeded"] == ["succeeded", ["WITH", "WITH"]]
    assert counts["dead"] == ["dead", ["WITH", "WITH"]]
    assert counts["admit"] is False  # no kind has a limit: the start statement of old
    assert counts["fused"] is False  # no kind has a fuse: the lease of old
    # JOBS_ENGINE_PREPARED (default on): both prepared once on the connection, run by name
    assert counts["prepared"] == 2


@pytest.mark.timeout(300)
def test_engine_statements_with_a_concurrency_limit_are_still_two() -> None:
    # demo.flaky limited (issue 24 item 1): the check runs inside the start statement
    # (jobs_concurrency_admit), so an attempt under the limit still costs two statements.
    env = {"JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": {"concurrency": 5}})}
    out = _shell_in_fresh_database(_SCRIPT, "statements_limited", env)
    line = next(x for x in out.splitlines() if x.startswith("COUNTS="))
    counts = json.loads(line.removeprefix("COUNTS="))

    assert counts["succeeded"] == ["succeeded", ["WITH", "WITH"]]
    assert counts["dead"] == ["dead", ["WITH", "WITH"]]
    assert counts["admit"] is True  # the limited statement (start_limited) ran


_ALTERED_SCRIPT = """
import json, os
import psycopg
from jobs import clock, engine
from jobs.engine.backends import pg_statement
from jobs.kinds import policy_for

the_engine = engine.current()
job = the_engine.submitted(
    delayed=False, run_after=None, kind="demo.flaky", queue="default",
    payload={"fail_times": 0}, max_attempts=policy_for("demo.flaky").max_attempts,
    enqueued_at=clock.now(),
)
job.save(force_insert=True)
query = "SELECT jobs_job.*, 1 AS x FROM jobs_job WHERE id = %(id)s"
first = pg_statement.run(query, {"id": str(job.id)})
runs = []
original = pg_statement._run
pg_statement._run = lambda *args: runs.append(1) or original(*args)
# Another session's migration (on this connection, psycopg would drop its prepared statements).
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as other:
    other.execute("ALTER TABLE jobs_job ADD COLUMN zz_added integer")
again = pg_statement.run(query, {"id": str(job.id)})
print("ALTERED=" + json.dumps(
    {"same": first[0].pk == again[0].pk, "other": again[1], "runs": len(runs)}
))
"""


@pytest.mark.timeout(300)
def test_prepared_statement_survives_a_changed_table() -> None:
    out = _shell_in_fresh_database(_ALTERED_SCRIPT, "prepared")
    line = next(x for x in out.splitlines() if x.startswith("ALTERED="))
    # The first run failed on the stale prepared statement (nothing written), the second ran.
    assert json.loads(line.removeprefix("ALTERED=")) == {
        "same": True,
        "other": {"zz_added": None, "x": 1},  # a column the model lacks: left aside
        "runs": 2,
    }


@pytest.mark.timeout(300)
def test_engine_statements_with_a_fuse_on_another_kind_are_still_two() -> None:
    # demo.sleep has a fuse (issue 24 item 3): demo.flaky, without one, keeps two statements
    # (the start's `_lease_fused` gives it its lease at once, without reading jobs_fuse).
    env = {"JOBS_KIND_OVERRIDES": json.dumps({"demo.sleep": {"fuse": True}})}
    out = _shell_in_fresh_database(_SCRIPT, "statements_fused_other", env)
    counts = json.loads(next(x for x in out.splitlines() if x.startswith("COUNTS="))[7:])
    assert counts["fused"] is True  # the start with `_lease_fused` (its first branch here)

    assert counts["succeeded"] == ["succeeded", ["WITH", "WITH"]]
    assert counts["dead"] == ["dead", ["WITH", "WITH"]]


@pytest.mark.timeout(300)
def test_engine_statements_of_a_kind_with_a_fuse() -> None:
    # demo.flaky has a fuse, closed: its start is still the one statement (its lease, negated in
    # the map, holds while none of its fuses is open: `_lease` in postgres.sql), its finish too,
    # and its end is counted in the fuse after the finish commits (BEGIN, SELECT ... FOR
    # UPDATE, UPDATE, COMMIT): six statements an attempt.
    env = {"JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": {"fuse": True}})}
    out = _shell_in_fresh_database(_SCRIPT, "statements_fused", env)
    counts = json.loads(next(x for x in out.splitlines() if x.startswith("COUNTS="))[7:])

    counted = ["BEGIN", "SELECT", "UPDATE", "COMMIT"]
    assert counts["succeeded"] == ["succeeded", ["WITH", "WITH", *counted]]
    assert counts["dead"] == ["dead", ["WITH", "WITH", *counted]]


_FUSED_RATED_SCRIPT = """
import json, os
from jobs import clock, engine, services
from jobs.engine.values import Delivery
from jobs.kinds import policy_for
from jobs.models import Job, RateBucket

the_engine = engine.current()
services.fuse_trip(kind="demo.flaky", via="test")
job = the_engine.submitted(
    delayed=False, run_after=None, kind="demo.flaky", queue="default",
    payload={"fail_times": 0, "sleep_seconds": 0},
    max_attempts=policy_for("demo.flaky").max_attempts, enqueued_at=clock.now(),
)
job.save(force_insert=True)
started = the_engine.start(
    Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(), rss_bytes=1)
)
after = clock.now().timestamp()
job = Job.objects.get(id=job.id)
tats = [tat for tat in RateBucket.objects.values_list("tat", flat=True) if tat is not None]
print("HELD=" + json.dumps({
    "started": started is not None, "reason": job.waiting_reason,
    "spent": [tat for tat in tats if tat > after],
}))
"""


@pytest.mark.timeout(300)
def test_a_job_the_fuse_holds_spends_no_rate_slot() -> None:
    # demo.flaky has a fuse, tripped, and a rate of 1 a minute: the start (the general path on
    # PostgreSQL, jobs_rate_admit before the row lock) holds the job fuse_open and gives the
    # rate slot back, so the bucket's next start is not pushed a minute on.
    policy = {"demo.flaky": {"fuse": True, "rate": "1/m"}}
    env = {"JOBS_KIND_OVERRIDES": json.dumps(policy)}
    out = _shell_in_fresh_database(_FUSED_RATED_SCRIPT, "fused_rated", env)
    held = json.loads(next(x for x in out.splitlines() if x.startswith("HELD="))[5:])

    assert held == {"started": False, "reason": "fuse_open", "spent": []}


_KEYED_RATE_SCRIPT = """
import json, os
from jobs import clock, engine
from jobs.engine.values import Delivery
from jobs.kinds import policy_for
from jobs.models import RateBucket
from jobs.rate_gate import rates

the_engine = engine.current()
payloads = [{"fail_times": 0, "sleep_seconds": 0, "account": a} for a in (42, "42", None)]
for payload in payloads:
    job = the_engine.submitted(
        delayed=False, run_after=None, kind="demo.flaky", queue="default", payload=payload,
        max_attempts=policy_for("demo.flaky").max_attempts, enqueued_at=clock.now(),
    )
    job.save(force_insert=True)
    the_engine.start(Delivery(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(), rss_bytes=1))
rate = rates()["demo.flaky"]
print("KEYS=" + json.dumps({
    "pg": sorted(RateBucket.objects.values_list("key", flat=True)),
    "python": sorted(rate.key(p) for p in payloads),
}))
"""


@pytest.mark.timeout(300)
def test_rate_keys_agree_between_postgres_and_python() -> None:
    # jobs_rate_admit keys a bucket by (payload #> path)::text; Python's payload_key (the pacer,
    # the ORM path, the waiting detail) gives the same text: 42 and "42" are two keys in both.
    policy = {"demo.flaky": {"rate": "1/m", "rate_key": "account"}}
    out = _shell_in_fresh_database(
        _KEYED_RATE_SCRIPT, "rate_keys", {"JOBS_KIND_OVERRIDES": json.dumps(policy)}
    )
    keys = json.loads(next(x for x in out.splitlines() if x.startswith("KEYS="))[5:])

    assert keys["pg"] == keys["python"] == ['"42"', "42", "null"]
