"""Issue 21, item 2: shared state in PostgreSQL, with no Redis used for it.

The platforms here keep their state in PostgreSQL (JOBS_STATE_STORE=postgres)
while the broker is still a real Redis: the budget's own Redis URL and
REDIS_URL point at a port where nothing listens, and after the run the
broker's Redis holds no state key and counted none of the state store's
commands. Figures are printed for the report.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from devstack.services import free_port, wait_for
from jobs import budget_lua
from tests.integration.harness import Platform
from tests.integration.test_failure_semantics import attempts
from tests.integration.test_failure_semantics_broker import cancel, wait_attempt_started

# Commands only the Redis state store sends (the budget's counters, cancellation
# flags, worker reports, the outcome spool's list); the budget's script is
# checked by its SHA (kombu runs scripts of its own).
STATE_COMMANDS = {"hincrby", "hmget", "hsetnx", "exists", "rpush", "lpop", "zrevrangebyscore"}
STATE_KEYS = ("jobs:retry-budget:*", "jobs:cancel:*", "jobs:worker-report*", "jobs:outcomes:*")


def _window_with_now_at(fraction: float, *, about: float) -> float:
    """A budget window length (seconds, near `about`) with now `fraction` into its window."""
    now = time.time()
    return (now - fraction * about) / (now // about)


def _state_env(**extra: str) -> dict[str, str]:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    return {
        "JOBS_STATE_STORE": "postgres",
        "REDIS_URL": nowhere,
        "JOBS_RETRY_BUDGET_REDIS_URL": nowhere,
        "JOBS_WORKER_REPORT_INTERVAL": "0.5",
        **extra,
    }


def _assert_no_state_in_redis(platform: Platform) -> dict[str, int]:
    client = redis.Redis.from_url(platform.redis.url)
    for pattern in STATE_KEYS:
        assert client.keys(pattern) == [], pattern
    assert client.script_exists(hashlib.sha1(budget_lua.RESERVE_SCRIPT.encode()).hexdigest()) == [
        False
    ]
    stats = client.info("commandstats")
    sent = {name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()}
    assert not STATE_COMMANDS & set(sent), sent
    return sent


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_state_store_postgres_budget_defers_and_kills_a_storm_with_no_redis_for_state(
    platform_factory: Callable[..., Platform],
) -> None:
    # given one retry per ~1 h window (ratio 0, floor 1) and at most one window of
    # deferral, on a platform whose state is in PostgreSQL; the window's length is
    # picked so that now is 30% into it (windows are epoch-aligned), far from the
    # guard at its end that would count a retry in the next window too
    window = _window_with_now_at(0.3, about=3600.0)
    platform = platform_factory(
        "state_budget",
        env=_state_env(
            JOBS_RETRY_BUDGET_FLOOR="1",
            JOBS_RETRY_BUDGET_RATIO="0",
            JOBS_RETRY_BUDGET_WINDOW=repr(window),
            JOBS_RETRY_BUDGET_MAX_DEFERRAL=repr(window),
            JOBS_KIND_OVERRIDES=json.dumps(
                {
                    "demo.flaky": {
                        "max_attempts": 3,
                        "backoff_base": 0.1,
                        "backoff_floor": 0.1,
                        "backoff_cap": 0.2,
                    }
                }
            ),
        ),
    )
    # when four jobs fail their first attempt at once
    ids = [platform.submit("demo.flaky", {"fail_times": 5}) for _ in range(4)]

    def settled() -> bool:
        rows = platform.rows(
            "SELECT status, waiting_reason FROM jobs_job WHERE id = ANY(%s::uuid[])", (ids,)
        )
        # A retry the budget admitted waits out its backoff (0.1-0.2 s) as retrying/backoff
        # and then runs: not settled until it has (a deferred one waits for the next window).
        return sum(1 for s, _ in rows if s in ("dead", "retrying")) == 4 and all(
            s != "running" and not (s == "retrying" and w == "backoff") for s, w in rows
        )

    wait_for(settled, timeout=90, interval=0.2, what="four jobs decided, the admitted retry run")
    rows = platform.rows(
        "SELECT status, dead_reason, waiting_reason FROM jobs_job WHERE id = ANY(%s::uuid[])",
        (ids,),
    )
    # then one retry runs in this window (and, failing again, finds no slot: dead),
    # one is deferred to the next window by the budget, the others are dead "budget"
    statuses = sorted(f"{s}/{d or w}" for s, d, w in rows)
    print(f"budget on PostgreSQL, 4 failing jobs, 1 retry per window: {statuses}")
    assert statuses == ["dead/budget"] * 3 + ["retrying/retry_budget"], statuses
    windows = platform.rows(
        'SELECT kind, firsts, retries FROM jobs_retrybudgetwindow ORDER BY "index"'
    )
    print(f"budget windows: {windows}")
    assert sum(r for _, _, r in windows) >= 2, windows
    # and the worker's report is in the database, scored by its clock
    wait_for(
        lambda: (
            platform.scalar(
                "SELECT count(*) FROM jobs_workerreport WHERE reported_at > now() - interval '5 s'"
            )
            >= 1
        ),
        timeout=30,
        what="a worker report in PostgreSQL",
    )
    # and no state went through Redis
    sent = _assert_no_state_in_redis(platform)
    print(f"broker Redis commands seen: {sorted(sent)}")


def _cancel_three_running_attempts(platform: Platform) -> list[float]:
    """Cancel three running cooperative attempts; seconds (DB time) from each cancel to its end."""
    stops = []
    for _ in range(3):
        job_id = platform.submit("demo.sleep", {"seconds": 60, "step_seconds": 0.05})
        wait_attempt_started(platform, job_id)
        time.sleep(0.3)  # the attempt is inside the kind's code (not a synchronisation)
        # when it is cancelled through the API
        asked = platform.scalar("SELECT extract(epoch FROM clock_timestamp())")
        assert cancel(platform, job_id)["status"] == "cancelled"
        # then its attempt stops itself (Cancelled, before the abort) within 2 s, by DB time
        (row,) = wait_for(
            lambda job_id=job_id: attempts(
                platform, "WHERE job_id = %s AND finished_at IS NOT NULL", (job_id,)
            ),
            timeout=30,
            interval=0.05,
            what="the cancelled attempt to end",
        )
        ended = platform.scalar(
            "SELECT extract(epoch FROM finished_at) FROM jobs_attempt WHERE job_id = %s", (job_id,)
        )
        assert row["outcome"] == "cancelled", row
        assert row["error_type"] == "Cancelled", row
        stops.append(float(ended) - float(asked))
    return stops


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_state_store_postgres_cancel_stops_a_running_attempt_within_2s(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform whose state is in PostgreSQL, running cooperative jobs
    platform = platform_factory("state_cancel", env=_state_env())
    # when each is cancelled through the API, then it stops within 2 s
    stops = _cancel_three_running_attempts(platform)
    print(f"cancel on PostgreSQL state: attempt ended {[round(s, 2) for s in stops]} s after")
    assert max(stops) < 2.0, stops
    _assert_no_state_in_redis(platform)


@pytest.fixture
def rabbitmq_vhost() -> Iterator[str]:
    """A RabbitMQ vhost of this test's own on 127.0.0.1:5672 (guest), deleted afterwards."""
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl not installed")
    vhost = f"state_{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "add_vhost", vhost], check=True, capture_output=True)
    try:
        subprocess.run(
            ["rabbitmqctl", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
        )
        yield vhost
    finally:
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], check=False, capture_output=True)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_state_store_postgres_on_rabbitmq_runs_retries_cancels_and_reports_workers(
    platform_factory: Callable[..., Platform], rabbitmq_vhost: str
) -> None:
    # given a platform on RabbitMQ whose state is in PostgreSQL (no Redis for state)
    platform = platform_factory(
        "state_rabbit",
        env=_state_env(CELERY_BROKER_URL=f"amqp://guest:guest@127.0.0.1:5672/{rabbitmq_vhost}"),
    )
    # when a job fails once, then succeeds: its retry passes the budget and runs
    flaky = platform.wait_job(platform.submit("demo.flaky", {"fail_times": 1}), timeout=60)
    assert flaky["status"] == "succeeded", flaky
    assert flaky["attempts_made"] == 2, flaky
    # and running attempts are cancelled: each stops within 2 s
    stops = _cancel_three_running_attempts(platform)
    print(f"cancel on RabbitMQ, PostgreSQL state: ended {[round(s, 2) for s in stops]} s after")
    assert max(stops) < 2.0, stops
    # and the worker's report is there for the admin overview
    reported = platform.rows("SELECT hostname FROM jobs_workerreport")
    assert len(reported) == 1, reported


# Run by `manage.py shell` against a platform's database: the Redis store's
# unit scenarios (tests/unit/test_retry_budget.py) on the PostgreSQL store, and
# the statements a successful first attempt costs. Prints one JSON line.
_BUDGET_SCRIPT = r"""
import json, os, time, uuid
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jobs import budget, budget_pg, services
from jobs.budget import BudgetConfig
from jobs.models import Job
from jobs.services import AttemptReport
W = 60.0
T0 = 1_000_000 * W
c = BudgetConfig(window=W, ratio=0.2, floor=3, max_deferral=300.0, key_prefix="unused")
out = {}
for _ in range(50):
    budget.record_first("k", now=T0 + 1, config=c)
answers = [budget.reserve("k", now=T0 + 2, due=T0 + 10, config=c, spread=0.5) for _ in range(14)]
out["ratio"] = [[a.due - T0, a.deferred, a.first_exhaustion, a.used, a.limit] for a in answers]
again = budget.reserve("k", now=T0 + 2, due=T0 + 10, config=c)
out["again"] = [again.deferred, again.first_exhaustion]
floor = [budget.reserve("f", now=T0, due=T0 + 1, config=c, spread=0.0) for _ in range(19)]
out["floor"] = [int(a.due // W) - int(T0 // W) if a.granted else None for a in floor]
edge = budget.reserve("e", now=T0, due=T0 + W - 1, config=c)
with connection.cursor() as cur:
    cur.execute(
        'SELECT "index" - %s, retries FROM jobs_retrybudgetwindow WHERE kind = %s ORDER BY 1',
        [int(T0 // W), "e"],
    )
    out["edge"] = [edge.granted, edge.deferred, cur.fetchall()]
with CaptureQueriesContext(connection) as q:
    budget.reserve("k", now=T0, due=T0 + 1, config=c)
out["reserve_statements"] = len(q.captured_queries)
# A successful first attempt: start and finish with no budget statement of its
# own (the first-attempt count is flushed at most once a second per process).
done = AttemptReport(outcome="succeeded", result={"ok": True})
jobs = [
    Job.objects.create(kind="demo.flaky", queue="default", payload={}, status="queued",
                       max_attempts=3, request_fingerprint=uuid.uuid4().hex)
    for _ in range(50)
]
budget_pg.flush()
started = time.monotonic()
with CaptureQueriesContext(connection) as q:
    for job in jobs:
        s = services.attempt_start(job_id=job.id, attempt=1, hostname="w@h", pid=os.getpid(),
                                   rss_bytes=None)
        services.attempt_finish(job_id=job.id, attempt=1, report=done, started=s)
elapsed = time.monotonic() - started
out["attempt_statements"] = len(q.captured_queries)
out["clock_statements"] = sum("statement_timestamp" in x["sql"] for x in q.captured_queries)
out["budget_statements"] = sum("jobs_retry_budget" in x["sql"] for x in q.captured_queries)
out["elapsed"] = elapsed
# Worker reports are scored by the database's clock: a writer whose own clock
# is 90 s ahead neither hides nor prunes another host's report.
from unittest import mock
from jobs import worker_reports
real = time.time
with mock.patch("time.time", lambda: real() + 90):
    worker_reports.write({"hostname": "ahead@a", "children": []}, ttl=15)
worker_reports.write({"hostname": "plain@b", "children": []}, ttl=15)
with mock.patch("time.time", lambda: real() + 90):
    worker_reports.write({"hostname": "ahead@a", "children": []}, ttl=15)
out["reports"] = sorted(r["hostname"] for r in worker_reports.read(max_age=15))
print("RESULT=" + json.dumps(out))
"""


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_state_store_postgres_budget_rule_and_its_statements(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a platform database with the PostgreSQL state store, nothing running
    platform = platform_factory(
        "state_rule", env=_state_env(), web=False, worker=False, scheduler=False
    )
    # when the budget's scenarios run through the shell
    run = platform.stack.run(["python", "manage.py", "shell", "-c", _BUDGET_SCRIPT], timeout=120)
    line = next(x for x in run.stdout.splitlines() if x.startswith("RESULT="))
    out = json.loads(line.removeprefix("RESULT="))
    # then 50 first attempts allow 0.2 x 50 + 3 = 13 retries at their time; the
    # 14th is deferred into the next window, flagged once as the first refusal
    ratio = out["ratio"]
    assert [r[0] for r in ratio[:13]] == [10.0] * 13
    assert not any(r[1] for r in ratio[:13])
    assert ratio[0][4] == 13
    assert ratio[12][3] == 12
    assert ratio[13][1:3] == [True, True], ratio[13]
    assert 60 <= ratio[13][0] < 120, ratio[13]
    assert out["again"] == [True, False]
    # and with no first attempts, 3 per window for the asked window and the 5
    # within 300 s after it, then refused
    assert out["floor"] == [w for w in range(6) for _ in range(3)] + [None]
    # and a due time at a window's edge takes a slot of both windows
    assert out["edge"] == [True, False, [[0, 1], [1, 1]]]
    # and a decision is one statement
    assert out["reserve_statements"] == 1
    # and 50 successful first attempts cost 2 statements each, plus at most one
    # budget flush per second of the run
    flushes = out["budget_statements"]
    print(
        f"PostgreSQL store: 50 successful first attempts, {out['attempt_statements']} statements "
        f"({flushes} budget flushes, {out['clock_statements']} clock reads) "
        f"in {out['elapsed']:.2f} s"
    )
    assert flushes <= out["elapsed"] + 1
    # (jobs.clock measures the database's clock once per 30 s per process)
    assert out["clock_statements"] <= 1
    assert out["attempt_statements"] == 2 * 50 + flushes + out["clock_statements"]
    # and a host whose clock is 90 s ahead neither hides nor prunes another's report
    assert out["reports"] == ["ahead@a", "plain@b"]
