"""`make demo`'s workload command, small: its table, then what it does on purpose and why jobs died.

Issue 19, item 7: the demo's table showed 95 jobs `dead: budget` and 12
`dead: error` with no line saying these were intended, and its shortened
budget deferral was not printed. `manage.py jobs_demo` (what `make demo`
runs) is run here with 20 webhooks instead of 500, with `make demo`'s
settings, against a live platform.

Issue 21: `make demo` itself (python -m devstack demo) on RabbitMQ, with no
Redis reachable: it passes, no log mentions Redis, first attempts start
within 1 s of submission; and with no PostgreSQL either it refuses in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from devstack.demo import DEMO_DIR, DEMO_KIND_OVERRIDES
from devstack.postgres import create_database, drop_database
from devstack.processes import ROOT
from devstack.rabbitmq import Vhost, rabbitmq_reachable
from devstack.services import free_port
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


@pytest.mark.rabbitmq
@pytest.mark.timeout(420)
def test_make_demo_on_rabbitmq_needs_no_redis(tmp_path: Path) -> None:
    """Issue 21: `make demo` on RabbitMQ with no Redis reachable passes, silent about Redis.

    CELERY_BROKER_URL names a vhost of the test's own (amqp://), REDIS_URL a
    closed port, DATABASE_URL a database of the test's own (the demo keeps
    it, so its attempts can be read); the workload is small.
    """
    if not rabbitmq_reachable():
        pytest.skip("no RabbitMQ at 127.0.0.1:5672")
    vhost = Vhost().create()
    admin_url = require_postgres()
    name = f"jobs_it_demo_rabbitmq_{os.getpid()}"
    database_url = create_database(name, admin_url=admin_url)
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JOBS_", "CELERY_"))},
        "CELERY_BROKER_URL": vhost.url,
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "DATABASE_URL": database_url,
        "DEVSTACK_DEMO_WORKLOAD_ARGS": "--webhooks=20 --csv-jobs=1 --csv-mb=0.2",
    }
    try:
        # when the demo runs on RabbitMQ
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "devstack", "demo"],
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            timeout=400,
        )
        took = time.monotonic() - began

        # then it passes, and no log (its own, web, worker, scheduler) mentions Redis
        logs = {p.name: p.read_text(errors="replace") for p in (DEMO_DIR / "logs").glob("*.log")}
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        assert {"web.log", "worker.log", "scheduler.log"} <= set(logs)
        for text in [done.stderr, done.stdout, *logs.values()]:
            assert "redis" not in text.lower(), [
                line for line in text.splitlines() if "redis" in line.lower()
            ][:5]
        assert "| not terminal              |     0 |" in done.stdout, done.stdout
        # and every first attempt started within 1 s of its job's submission (with, for the
        # slowest, how many attempts were running when it was submitted: 8 is a full worker)
        with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM a.started_at - coalesce(j.run_after, j.created_at)),"
                " j.kind, (SELECT count(*) FROM jobs_attempt b WHERE b.started_at <="
                " coalesce(j.run_after, j.created_at) AND coalesce(b.finished_at, 'infinity') >"
                " coalesce(j.run_after, j.created_at))"
                " FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id WHERE a.number = 1"
                " ORDER BY 1"
            ).fetchall()
        delays = [float(row[0]) for row in rows]
        print(
            f"\nmake demo on RabbitMQ, no Redis: {took:.0f} s; {len(delays)} first attempts,"
            f" submission -> start p50 {delays[len(delays) // 2]:.3f} s, max {delays[-1]:.3f} s,"
            f" over 1 s {sum(d > 1.0 for d in delays)}; slowest (s, kind, running then)"
            f" {[(round(float(d), 2), k, n) for d, k, n in rows[-3:]]};"
            f" load {os.getloadavg()[0]:.2f}"
        )
        assert delays
        assert delays[-1] <= 1.0, rows[-5:]
    finally:
        drop_database(name, admin_url=admin_url)
        vhost.delete()


@pytest.mark.rabbitmq
@pytest.mark.timeout(120)
def test_make_demo_on_rabbitmq_without_postgres_refuses_in_one_line() -> None:
    # given RabbitMQ as the demo's broker and no PostgreSQL where it looks
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("JOBS_", "CELERY_"))},
        "DEVSTACK_BROKER": "rabbitmq",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "DATABASE_URL": "",
        "DEVSTACK_POSTGRES_URL": f"postgres://postgres@127.0.0.1:{free_port()}/postgres",
    }
    if not rabbitmq_reachable():
        pytest.skip("no RabbitMQ at 127.0.0.1:5672")

    # when the demo starts
    done = subprocess.run(
        [sys.executable, "-m", "devstack", "demo"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=100,
    )

    # then it refuses with one line naming what is missing, and starts nothing
    assert done.returncode == 1, done.stderr
    failed = [line for line in done.stderr.splitlines() if "demo failed" in line]
    assert len(failed) == 1, done.stderr
    assert "PostgreSQL" in failed[0], failed
    assert "DATABASE_URL" in failed[0], failed
    assert "Traceback" not in done.stderr
    assert "web pid" not in done.stderr
