"""Admin pages at scale: server time and query count with 100,000 jobs and 300,000 attempts.

    .venv/bin/python -m bench.admin_scale [--jobs 100000] [--repeat 7] [--keep]

Creates a PostgreSQL database of its own (127.0.0.1:5432, user postgres, or
TEST_POSTGRES_URL), migrates it, and fills it inside PostgreSQL with
INSERT ... SELECT over generate_series (no rows cross the wire; ~30 s):
jobs over 30 days plus a burst in the last hour, 3 attempts per job on
average (exactly 3 x jobs), failed attempts with 1.5-5 KB tracebacks. Then
ANALYZE, as autovacuum would. A redis-server of its own is the broker, with
one synthetic worker report, so the overview reads Redis as in production.

Each page is requested through Django's test client in this process
(middleware, view, templates: the server's whole work, no network), as a
superuser, once to warm up and then `--repeat` times; the median time and
the query count (CaptureQueriesContext) are printed. Targets: <= 500 ms and
<= 15 queries per page. The database is dropped afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devstack.postgres import (  # noqa: E402
    POSTGRES_DEFAULT_URL,
    create_database,
    drop_database,
    ensure_postgres,
)
from devstack.services import RedisServer  # noqa: E402

TARGET_MS = 500
TARGET_QUERIES = 15

# One statement per table. `g` numbers the jobs; random() is seeded, so runs match.
JOBS_SQL = """
INSERT INTO jobs_job (
    id, kind, queue, priority, payload, status, attempts_made, max_attempts, idempotency_key,
    request_fingerprint, created_at, enqueued_at, published_at, started_at, finished_at,
    next_attempt_at, lease_expires_at, deliveries, worker_losses, trace_parent, result,
    last_error, dead_reason, waiting_reason, waiting_detail, progress_message, publish_claimed_by,
    created_by_id)
SELECT
    md5('job' || g)::uuid,
    k.kind,
    CASE WHEN g % 10 = 0 THEN 'reports' ELSE 'default' END,
    NULL,
    CASE k.kind
        WHEN 'webhook.deliver' THEN jsonb_build_object(
            'url', 'http://hooks.example.test/orders/' || g, 'body', jsonb_build_object('order', g))
        WHEN 'report.csv_summary' THEN jsonb_build_object(
            'source', 'http://files.example.test/report-' || g || '.csv')
        ELSE jsonb_build_object('fail_times', g % 5, 'sleep_seconds', 0) END,
    s.status,
    1 + g % 5,
    5,
    CASE WHEN g % 4 = 0 THEN 'order-' || g ELSE NULL END,
    md5('fp' || g),
    s.created,
    s.created,
    s.created + interval '5 ms',
    s.created + interval '20 ms',
    CASE WHEN s.status IN ('succeeded', 'dead', 'cancelled')
         THEN s.created + (1 + g % 5) * interval '2 s' END,
    CASE WHEN s.status = 'retrying' THEN now() + interval '30 s' END,
    CASE WHEN s.status = 'running' THEN now() + interval '60 s' END,
    1 + g % 5,
    0,
    '00-' || md5('trace' || g) || '-' || substr(md5('span' || g), 1, 16) || '-01',
    CASE WHEN s.status = 'succeeded' THEN jsonb_build_object('attempt', 1 + g % 5) END,
    CASE WHEN g % 5 > 0 OR s.status IN ('dead', 'retrying') THEN k.error ELSE '' END,
    CASE WHEN s.status = 'dead' THEN (CASE WHEN g % 5 = 4 THEN 'exhausted' ELSE 'error' END)
         ELSE '' END,
    '', '', '', '',
    NULL
FROM (
    SELECT g, random() AS r_kind, random() AS r_status, random() AS r_time
    FROM generate_series(1, {jobs}) AS g
) AS r
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN r.r_status < 0.85 THEN 'succeeded' WHEN r.r_status < 0.93 THEN 'dead'
             WHEN r.r_status < 0.95 THEN 'cancelled' WHEN r.r_status < 0.97 THEN 'retrying'
             WHEN r.r_status < 0.99 THEN 'queued' ELSE 'running' END AS status,
        -- 1 job in 30 in the last hour (a burst), the rest over {days} days.
        CASE WHEN r.g % 30 = 0 THEN now() - r.r_time * interval '1 hour'
             ELSE now() - interval '1 hour' - r.r_time * interval '{days} days' END AS created
) AS s
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN r.r_kind < 0.5 THEN 'webhook.deliver' WHEN r.r_kind < 0.7
             THEN 'report.csv_summary' ELSE 'demo.flaky' END AS kind,
        CASE WHEN r.r_kind < 0.5 THEN
            'RetryableError: POST http://hooks.example.test/orders/' || r.g
            || ' failed: HTTPConnectionPool(host=''hooks.example.test'', port=80): Max retries '
            || 'exceeded (Caused by NewConnectionError(''[Errno 111] Connection refused''))'
             WHEN r.r_kind < 0.7 THEN 'RetryableError: HTTP 503 from http://files.example.test/'
            || 'report-' || r.g || '.csv'
             ELSE 'RetryableError: planned failure ' || (r.g % 5) || ' of ' || (r.g % 5) END
            AS error
) AS k
"""

# Attempt n of job j; the last attempt of a succeeded job succeeded, of a
# running job is unfinished, every other one failed with the job's error.
ATTEMPTS_SQL = """
INSERT INTO jobs_attempt (
    job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome, error_type,
    error_message, traceback, rss_before_bytes, rss_after_bytes, retry_delay_seconds, trace_id)
SELECT
    j.id, n, 'worker-1@bench', 4000 + n, a.started, a.finished, a.outcome,
    CASE WHEN a.outcome = 'error' THEN 'RetryableError' ELSE '' END,
    CASE WHEN a.outcome = 'error' THEN substr(j.last_error, 17) ELSE '' END,
    CASE WHEN a.outcome = 'error' THEN
        'Traceback (most recent call last):' || chr(10)
        || repeat('  File "/app/jobs/kinds/webhook.py", line 212, in run' || chr(10)
                  || '    response = session.post(url, json=body, timeout=timeout)' || chr(10),
                  CASE WHEN j.kind = 'webhook.deliver' THEN 45 ELSE 14 END)
        || j.last_error ELSE '' END,
    60000000 + n * 100000, 60000000 + n * 180000,
    CASE WHEN a.outcome = 'error' AND n < j.attempts_made THEN 0.5 * 2 ^ (n - 1) END,
    substr(j.trace_parent, 4, 32)
FROM jobs_job j
CROSS JOIN LATERAL generate_series(1, j.attempts_made) AS n
CROSS JOIN LATERAL (
    SELECT
        j.created_at + (n - 1) * interval '2 s' + interval '20 ms' AS started,
        CASE WHEN j.status = 'running' AND n = j.attempts_made THEN NULL
             ELSE j.created_at + (n - 1) * interval '2 s' + interval '220 ms' END AS finished,
        CASE WHEN n < j.attempts_made THEN 'error'
             WHEN j.status = 'succeeded' THEN 'succeeded'
             WHEN j.status = 'running' THEN ''
             ELSE 'error' END AS outcome
) AS a
"""


def load(connection: Any, jobs: int, *, days: float = 30) -> float:
    """Fill jobs_job and jobs_attempt (jobs created over the last `days`); returns seconds taken."""
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.42)")
        cursor.execute(JOBS_SQL.replace("{jobs}", str(int(jobs))).replace("{days}", f"{days:g}"))
        cursor.execute(ATTEMPTS_SQL)
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_attempt")
    return time.perf_counter() - started


def measure(client: Any, url: str, repeat: int) -> tuple[float, int, int]:
    """(median ms, queries, status) of GET `url`, after one warm-up request."""
    from django.db import connection  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.test.utils import CaptureQueriesContext  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    client.get(url)
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), len(queries), response.status_code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    admin_url = ensure_postgres(os.environ.get("TEST_POSTGRES_URL", POSTGRES_DEFAULT_URL))
    db_name = f"jobs_bench_admin_{os.getpid()}"
    database_url = create_database(db_name, admin_url=admin_url)
    redis_server = RedisServer().start()
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DJANGO_DEBUG": "false",
            "DJANGO_ALLOWED_HOSTS": "testserver",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": redis_server.url,
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "WARNING",
        }
    )
    try:
        return run(args)
    finally:
        from django.db import connections  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

        connections.close_all()
        redis_server.stop()
        if not args.keep:
            drop_database(db_name, admin_url=admin_url)
        else:
            print(f"kept database {db_name}")


def run(args: argparse.Namespace) -> int:
    import django  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    django.setup()
    from django.contrib.auth.models import User  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.core.management import call_command  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.db import connection  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.test import Client  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    from jobs.broker import broker_client  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from observability import worker_report  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    call_command("migrate", verbosity=0)
    seconds = load(connection, args.jobs)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_job")
        jobs = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM jobs_attempt")
        attempts = cursor.fetchone()[0]
        cursor.execute(
            "SELECT id FROM jobs_job WHERE status = 'dead' AND kind = 'webhook.deliver' "
            "AND attempts_made = 5 ORDER BY created_at DESC LIMIT 1"
        )
        dead_webhook = cursor.fetchone()[0]
    print(f"loaded {jobs:,} jobs and {attempts:,} attempts in {seconds:.1f} s")

    worker_report.write_report(
        broker_client(),
        {
            "hostname": "worker-1@bench",
            "at": time.time(),
            "children": [{"pid": 4001, "rss_bytes": 61 * 2**20, "threads": 3}],
            "main_rss_bytes": 58 * 2**20,
            "max_memory_per_child_bytes": 512 * 2**20,
            "recycled": {"max_tasks": 3},
        },
        ttl=600,
    )
    user = User.objects.create_superuser("bench", "bench@localhost", "bench")
    client = Client()
    client.force_login(user)

    pages = [
        ("list", "/admin/jobs/job/"),
        ("filtered list (status=dead)", "/admin/jobs/job/?status__exact=dead"),
        ("filtered list (kind + queue)", "/admin/jobs/job/?kind=demo.flaky&queue=reports"),
        ("search error text (40% of jobs match)", "/admin/jobs/job/?q=Connection+refused"),
        ("search rare error text (1 job)", "/admin/jobs/job/?q=report-4242.csv"),
        ("search short id", f"/admin/jobs/job/?q={str(dead_webhook)[:8]}"),
        ("job page (5 attempts)", f"/admin/jobs/job/{dead_webhook}/change/"),
        ("overview", "/admin/jobs/job/overview/"),
    ]
    print(f"\n| page | server ms (median of {args.repeat}) | queries | status |")
    print("|---|---:|---:|---:|")
    failed = []
    for name, url in pages:
        ms, queries, status = measure(client, url, args.repeat)
        print(f"| {name} | {ms:.1f} | {queries} | {status} |")
        if ms > TARGET_MS or queries > TARGET_QUERIES or status != 200:
            failed.append(name)
    print(json.dumps({"jobs": jobs, "attempts": attempts, "over_target": failed}))
    if failed:
        print(f"over target ({TARGET_MS} ms, {TARGET_QUERIES} queries): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
