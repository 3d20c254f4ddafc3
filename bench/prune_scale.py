"""Retention at scale: prune 1,000,000 old jobs (3,000,000 attempts) beside a P1 drain, then time the admin.

    .venv/bin/python -m bench.prune_scale [--jobs 1000000] [--recent 100000] [--drain 2000]
                                          [--runs 3] [--repeat 5]

One platform (bench.rig: its own PostgreSQL database, redis-server, gunicorn)
is filled inside PostgreSQL (INSERT ... SELECT over generate_series, no rows
over the wire): `--recent` jobs of the last 6 days as bench.admin_scale makes
them (none old enough to prune), and `--jobs` terminal jobs finished 40-400
days ago with exactly 3 attempts each (85% succeeded, 10% dead, 5%
cancelled: every one past its default age). Then ANALYZE.

P1 drains (`--drain` no-op `demo.flaky` jobs submitted through the API, then
a worker as shipped, jobs/s from its "ready" to the last job succeeded) run
in turn without and with `manage.py jobs_prune` running beside them (A B A B
...; the prune is started before the worker and stopped with SIGTERM when
the drain ends, so it carries on next time); the rest of the prune then runs
alone. Then the admin list, a search and a job page (and the API list) are
requested through Django's test client in this process: server time, median
of `--repeat`. Targets: the drain slowed by at most 20%, every page under
500 ms, every job and attempt of the old set gone, none of the recent ones.
The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import admin_scale  # noqa: E402
from bench.rig import Rig, standalone  # noqa: E402
from devstack.services import wait_for  # noqa: E402

SLOWDOWN_LIMIT = 0.20
TARGET_MS = 500
# Recent jobs span this many days: younger than every default age, so none is pruned.
RECENT_DAYS = 6

# Old terminal jobs: ids md5('old' || g), so they never meet admin_scale's md5('job' || g).
OLD_JOBS_SQL = """
INSERT INTO jobs_job (
    id, kind, queue, priority, payload, status, attempts_made, max_attempts, idempotency_key,
    request_fingerprint, created_at, enqueued_at, published_at, started_at, finished_at,
    deliveries, worker_losses, trace_parent, result, last_error, dead_reason, waiting_reason,
    waiting_detail, progress_message, publish_claimed_by, created_by_id)
SELECT
    md5('old' || g)::uuid,
    CASE WHEN g % 2 = 0 THEN 'webhook.deliver' ELSE 'report.csv_summary' END,
    CASE WHEN g % 10 = 0 THEN 'reports' ELSE 'default' END,
    NULL,
    jsonb_build_object('url', 'http://hooks.example.test/orders/' || g),
    s.status, 3, 5, NULL, md5('fp-old' || g),
    s.created, s.created, s.created, s.created + interval '20 ms', s.created + interval '6 s',
    3, 0, '',
    CASE WHEN s.status = 'succeeded' THEN '{"ok": true}'::jsonb END,
    CASE WHEN s.status = 'dead' THEN 'RetryableError: HTTP 503 from receiver ' || (g % 97)
         ELSE '' END,
    CASE WHEN s.status = 'dead' THEN 'exhausted' ELSE '' END,
    '', '', '', '', NULL
FROM generate_series(1, {jobs}) AS g
CROSS JOIN LATERAL (
    SELECT
        CASE WHEN g % 20 < 17 THEN 'succeeded' WHEN g % 20 < 19 THEN 'dead'
             ELSE 'cancelled' END AS status,
        now() - interval '40 days' - ((g::bigint * 7919) % {jobs}) * (interval '360 days' / {jobs})
            AS created
) AS s
"""

OLD_ATTEMPTS_SQL = """
INSERT INTO jobs_attempt (
    job_id, number, worker_hostname, worker_pid, started_at, finished_at, outcome, error_type,
    error_message, traceback, rss_before_bytes, rss_after_bytes, retry_delay_seconds, trace_id)
SELECT
    md5('old' || g)::uuid, n, 'worker-1@bench', 4000 + n,
    a.started, a.started + interval '200 ms', a.outcome,
    CASE WHEN a.outcome = 'error' THEN 'RetryableError' ELSE '' END,
    CASE WHEN a.outcome = 'error' THEN 'HTTP 503 from receiver ' || (g % 97) ELSE '' END,
    CASE WHEN a.outcome = 'error' THEN
        'Traceback (most recent call last):' || chr(10)
        || repeat('  File "/app/jobs/kinds/webhook.py", line 212, in run' || chr(10), 8)
        || 'RetryableError: HTTP 503' ELSE '' END,
    60000000, 60100000, CASE WHEN n < 3 THEN 0.5 * 2 ^ (n - 1) END, ''
FROM generate_series(1, {jobs}) AS g
CROSS JOIN generate_series(1, 3) AS n
CROSS JOIN LATERAL (
    SELECT
        now() - interval '40 days' - ((g::bigint * 7919) % {jobs}) * (interval '360 days' / {jobs})
            + (n - 1) * interval '2 s' AS started,
        CASE WHEN n = 3 AND g % 20 < 17 THEN 'succeeded' ELSE 'error' END AS outcome
) AS a
"""


def fill(rig: Rig, *, old: int, recent: int) -> dict[str, float]:
    """Load the recent and the old set; returns counts and seconds."""
    started = time.perf_counter()
    dsn = rig.database_url.replace("postgres://", "postgresql://", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:

        class Wrapped:  # admin_scale.load wants a Django-like connection.cursor()
            def cursor(self) -> Any:
                return conn.cursor()

        admin_scale.load(Wrapped(), recent, days=RECENT_DAYS)
        conn.execute(OLD_JOBS_SQL.replace("{jobs}", str(int(old))))
        conn.execute(OLD_ATTEMPTS_SQL.replace("{jobs}", str(int(old))))
        conn.execute("ANALYZE jobs_job")
        conn.execute("ANALYZE jobs_attempt")
    return {"fill_seconds": time.perf_counter() - started}


def drained(rig: Rig) -> int:
    """Succeeded drain jobs (demo.flaky): an index range over (kind, status, created_at)."""
    return int(
        rig.scalar(
            "SELECT count(*) FROM jobs_job WHERE kind = 'demo.flaky' AND status = 'succeeded'"
        )
    )


class Pruner:
    """`manage.py jobs_prune --json` in the background, stopped with SIGTERM (it ends its batch)."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.results: list[dict[str, Any]] = []
        self.popen: subprocess.Popen | None = None
        self.log = rig.logdir / "prune.log"

    def start(self) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "manage.py", "jobs_prune", "--json"],
            cwd=ROOT,
            env=self.rig.stack.environ(),
            stdout=subprocess.PIPE,
            stderr=open(self.log, "ab"),  # noqa: SIM115 - owned by the child
            start_new_session=True,
            text=True,
        )

    def stop(self, *, wait: bool = False) -> dict[str, Any]:
        """SIGTERM (unless `wait`: let it finish); its JSON counts."""
        assert self.popen is not None
        if not wait and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
        out, _ = self.popen.communicate(timeout=3600)
        if self.popen.returncode != 0:
            raise RuntimeError(f"jobs_prune exited {self.popen.returncode}; see {self.log}")
        result = json.loads(out.strip().splitlines()[-1])
        self.results.append(result)
        self.popen = None
        return result


def drain(rig: Rig, count: int, pruner: Pruner | None) -> float:
    """Jobs/s of one P1 drain of `count` no-op jobs, with `pruner` running beside it or not."""
    before = drained(rig)
    rig.submit(count, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    if pruner is not None:
        pruner.start()
    worker = rig.stack.start_worker(concurrency=2, timeout=120)
    started = time.perf_counter()
    wait_for(lambda: drained(rig) >= before + count, timeout=1800, interval=0.05, what="drain")
    ended = time.perf_counter()
    worker.stop()
    rig.stack.processes.remove(worker)
    if pruner is not None:
        result = pruner.stop()
        jobs = sum(result["jobs"].values())
        print(f"    beside it: pruned {jobs:,} jobs, longest batch {result['longest_batch_ms']} ms")
    return count / (ended - started)


def load() -> str:
    """The 1-minute load average now, as `uptime` prints it (other work on the machine)."""
    return f"load {os.getloadavg()[0]:.2f}"


def pages(rig: Rig, repeat: int) -> list[tuple[str, float, int, int]]:
    """(name, median ms, queries, status) of the admin pages and the API list, in this process."""
    os.environ.update(
        {**rig.stack.env, "DJANGO_ALLOWED_HOSTS": "testserver", "LOG_LEVEL": "WARNING"}
    )
    import django  # noqa: PLC0415 - after the environment names the rig's database

    django.setup()
    from django.contrib.auth.models import User  # noqa: PLC0415 - after django.setup()
    from django.test import Client  # noqa: PLC0415 - after django.setup()

    dead = rig.scalar(
        "SELECT id FROM jobs_job WHERE status = 'dead' AND kind = 'webhook.deliver' "
        "AND attempts_made = 5 ORDER BY created_at DESC LIMIT 1"
    )
    user = User.objects.create_superuser("prune-bench", "bench@localhost", "bench")
    client = Client()
    client.force_login(user)
    measured = []
    for name, url in (
        ("admin list", "/admin/jobs/job/"),
        ("admin search error text", "/admin/jobs/job/?q=Connection+refused"),
        ("admin search short id", f"/admin/jobs/job/?q={str(dead)[:8]}"),
        ("admin job page (5 attempts)", f"/admin/jobs/job/{dead}/change/"),
        ("API list", "/api/jobs/"),
    ):
        ms, queries, status = admin_scale.measure(client, url, repeat)
        measured.append((name, ms, queries, status))
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="old jobs to prune")
    parser.add_argument("--recent", type=int, default=100_000, help="recent jobs kept")
    parser.add_argument("--drain", type=int, default=2000, help="jobs per P1 drain")
    parser.add_argument("--runs", type=int, default=3, help="drains of each variant")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with standalone("prune_scale_", jobs=args.drain) as opts:
        rig = Rig(opts, "prune")
        rig.start_web()
        return run(rig, args)


def run(rig: Rig, args: argparse.Namespace) -> int:
    filled = fill(rig, old=args.jobs, recent=args.recent)
    jobs_before = int(rig.scalar("SELECT count(*) FROM jobs_job"))
    attempts_before = int(rig.scalar("SELECT count(*) FROM jobs_attempt"))
    print(
        f"filled {jobs_before:,} jobs, {attempts_before:,} attempts in "
        f"{filled['fill_seconds']:.0f} s ({args.jobs:,} old, {args.recent:,} recent)"
    )
    pruner = Pruner(rig)
    alone: list[float] = []
    beside: list[float] = []
    for n in range(args.runs):
        alone.append(drain(rig, args.drain, None))
        print(
            f"  run {n + 1}/{args.runs} drain alone: {alone[-1]:.1f} jobs/s ({load()})", flush=True
        )
        beside.append(drain(rig, args.drain, pruner))
        print(
            f"  run {n + 1}/{args.runs} drain + prune: {beside[-1]:.1f} jobs/s ({load()})",
            flush=True,
        )
    pruner.start()
    pruner.stop(wait=True)
    pruned_jobs = sum(sum(r["jobs"].values()) for r in pruner.results)
    pruned_attempts = sum(sum(r["attempts"].values()) for r in pruner.results)
    longest = max(r["longest_batch_ms"] for r in pruner.results)
    batches = sum(r["batches"] for r in pruner.results)
    prune_seconds = sum(r["seconds"] for r in pruner.results)
    busy_seconds = sum(r["busy_seconds"] for r in pruner.results)
    old_left = int(
        rig.scalar("SELECT count(*) FROM jobs_job WHERE created_at < now() - interval '39 days'")
    )
    slowdown = 1 - statistics.median(beside) / statistics.median(alone)
    # Each beside-drain against the drain alone just before it: less exposed to drift in load.
    paired = [round(1 - b / a, 3) for a, b in zip(alone, beside, strict=True)]
    print(
        f"pruned {pruned_jobs:,} jobs and {pruned_attempts:,} attempts in {batches:,} batches, "
        f"{prune_seconds:.0f} s of pruning ({busy_seconds:.0f} s deleting); "
        f"longest batch {longest} ms; old jobs left {old_left} ({load()})"
    )
    print(
        f"P1 drain: alone {statistics.median(alone):.1f} jobs/s, beside the prune "
        f"{statistics.median(beside):.1f} jobs/s (median of {args.runs}): slowed {slowdown:.1%}; "
        f"per pair {', '.join(f'{p:.1%}' for p in paired)}"
    )
    measured = pages(rig, args.repeat)
    print(f"\n| page (after pruning) | server ms (median of {args.repeat}) | queries | status |")
    print("|---|---:|---:|---:|")
    for name, ms, queries, status in measured:
        print(f"| {name} | {ms:.1f} | {queries} | {status} |")
    slow = [name for name, ms, _, status in measured if ms > TARGET_MS or status != 200]
    failed = []
    if slowdown > SLOWDOWN_LIMIT:
        failed.append(f"drain slowed {slowdown:.1%} > {SLOWDOWN_LIMIT:.0%}")
    if slow:
        failed.append(f"over {TARGET_MS} ms: {', '.join(slow)}")
    if old_left or pruned_jobs != args.jobs or pruned_attempts != 3 * args.jobs:
        failed.append(
            f"pruned {pruned_jobs} jobs / {pruned_attempts} attempts, {old_left} old left"
        )
    summary = {
        "jobs_pruned": pruned_jobs,
        "attempts_pruned": pruned_attempts,
        "batches": batches,
        "longest_batch_ms": longest,
        "prune_seconds": round(prune_seconds, 1),
        "busy_seconds": round(busy_seconds, 1),
        "drain_alone": [round(v, 1) for v in alone],
        "drain_beside": [round(v, 1) for v in beside],
        "slowdown": round(slowdown, 3),
        "slowdown_per_pair": paired,
        "pages_ms": {name: round(ms, 1) for name, ms, _, _ in measured},
        "failed": failed,
    }
    print(json.dumps(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
