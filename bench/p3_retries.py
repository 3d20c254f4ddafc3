"""P3: `--pending` jobs waiting for a retry — worker RSS and fresh jobs' latency meanwhile.

Stock Celery: `--pending` no-op messages published with countdown=3600
(what `Task.retry(countdown=…)` and `autoretry_for` do); the worker
reserves each ETA message and holds it in memory until due.
Platform: retries wait in the database until the scheduler publishes them.
Ten `demo.flaky` jobs really fail their first attempt (backoff one hour);
the rest of the pending jobs are cloned from one of them in SQL (job row
and its failed attempt row, new ids), which is the state `--pending` real
failures leave, at a fraction of the time.

Per run and system: a fresh worker (main + 2 children, RSS summed, median of
2 s of samples) warmed up by 20 jobs; idle RSS; the latency of 20 fresh
no-op jobs run one at a time (platform: the job's created_at to its
finished_at in the database; stock: publish to the task's own clock);
then the pending retries; RSS and fresh latency again.
"""

from __future__ import annotations

import json
import statistics
import time

import redis

from bench import stock_app
from bench.figures import Report, Row, Verdict, ratio
from bench.processes import MIB, settle, tree_rss
from bench.rig import Options, Rig
from bench.stock_worker import start_stock_worker
from devstack.processes import Stack
from devstack.services import wait_for

FRESH = 20
ENV = {
    "JOBS_KIND_OVERRIDES": json.dumps(
        {"demo.flaky": {"backoff_floor": 3600, "backoff_base": 3600, "backoff_cap": 7200}}
    ),
    "JOBS_RETRY_BUDGET_FLOOR": "1000000",
}


def _fresh(opts: Options) -> int:
    return 5 if opts.quick else FRESH


def _platform_latency(rig: Rig) -> float:
    """Median seconds from created_at to finished_at of fresh jobs submitted one at a time."""
    samples = []
    for _ in range(_fresh(rig.opts)):
        response = rig.submit(1, {"kind": "demo.flaky", "payload": {"fail_times": 0}}, clients=1)
        assert response.count == 1
        job_id = rig.scalar("SELECT id FROM jobs_job ORDER BY created_at DESC LIMIT 1")
        wait_for(
            lambda jid=job_id: (
                rig.scalar("SELECT status FROM jobs_job WHERE id = %s", (jid,)) == "succeeded"
            ),
            timeout=60,
            interval=0.005,
            what="a fresh job",
        )
        samples.append(
            float(
                rig.scalar(
                    "SELECT EXTRACT(EPOCH FROM finished_at - created_at) FROM jobs_job WHERE id = %s",
                    (job_id,),
                )
            )
        )
    return statistics.median(samples)


def _clone_retrying(rig: Rig, count: int) -> None:
    """`count` copies of one retrying job (and its attempt rows), new ids, in SQL."""
    template = rig.scalar("SELECT id FROM jobs_job WHERE status = 'retrying' LIMIT 1")
    job_cols = [r for r in _columns(rig, "jobs_job") if r not in ("id", "idempotency_key")]
    attempt_cols = [r for r in _columns(rig, "jobs_attempt") if r not in ("id", "job_id")]
    cols = ", ".join(job_cols)
    acols = ", ".join(attempt_cols)
    rig.scalar(
        f"""WITH src AS (SELECT * FROM jobs_job WHERE id = %s),
        ids AS (SELECT gen_random_uuid() AS id FROM generate_series(1, %s)),
        made AS (INSERT INTO jobs_job (id, {cols}) SELECT ids.id, {cols} FROM ids, src RETURNING id)
        INSERT INTO jobs_attempt (job_id, {acols})
        SELECT made.id, {", ".join("a." + c for c in attempt_cols)} FROM made,
        (SELECT * FROM jobs_attempt WHERE job_id = %s) a RETURNING 1""",
        (template, count, template),
    )


def _columns(rig: Rig, table: str) -> list[str]:
    names = rig.scalar(
        "SELECT array_agg(column_name::text ORDER BY ordinal_position) "
        "FROM information_schema.columns WHERE table_name = %s",
        (table,),
    )
    return list(names)


def _platform_run(rig: Rig, pending: int) -> tuple[float, float, float, float]:
    """(idle RSS, loaded RSS, idle latency, loaded latency) of one fresh platform worker."""
    rig.scalar(
        "DELETE FROM jobs_attempt WHERE job_id IN (SELECT id FROM jobs_job WHERE status = 'retrying') RETURNING 1"
    )
    rig.scalar("DELETE FROM jobs_job WHERE status = 'retrying' RETURNING 1")
    worker = rig.stack.start_worker(concurrency=2, timeout=120)
    before = rig.finished_attempts()
    rig.submit(10, {"kind": "demo.flaky", "payload": {"fail_times": 1}})
    rig.submit(10, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    rig.wait_attempts(before + 20, timeout=120)
    idle = settle(lambda: tree_rss(worker.pid), seconds=rig.opts.settle)
    idle_latency = _platform_latency(rig)
    _clone_retrying(rig, max(0, pending - 10))
    waiting = rig.scalar("SELECT count(*) FROM jobs_job WHERE status = 'retrying'")
    if waiting < pending:
        raise RuntimeError(f"P3: only {waiting} of {pending} jobs wait for a retry")
    loaded = settle(lambda: tree_rss(worker.pid), seconds=rig.opts.settle)
    loaded_latency = _platform_latency(rig)
    worker.stop()
    rig.stack.processes.remove(worker)
    return idle, loaded, idle_latency, loaded_latency


def _stock_latency(client: redis.Redis, count: int, limit: float) -> tuple[float, bool]:
    """(median seconds from publishing a fresh task to its run, whether one never ran).

    Tasks are published one at a time. A task that has not run after
    `limit` seconds counts as `limit` (a lower bound) and ends the series,
    so a stuck worker cannot stall the whole benchmark.
    """
    samples = []
    for n in range(count):
        key = f"bench:stamp:{time.time_ns()}:{n}"
        stock_app.publish("stock.stamp", 1, args=[time.time(), key])
        deadline = time.monotonic() + limit
        value = None
        while value is None and time.monotonic() < deadline:
            found = client.blpop([key], timeout=1)
            value = found[1] if found else None
        if value is None:
            samples.append(limit)
            return statistics.median(samples), True
        samples.append(float(value))
    return statistics.median(samples), False


def _stock_run(
    stack: Stack, url: str, pending: int, opts: Options
) -> tuple[float, float, float, float]:
    client = redis.Redis.from_url(url)
    client.flushdb()
    stock_app.configure(url, tracked=True)
    worker = start_stock_worker(stack, url, tracked=True, name="stock-p3")
    stock_app.publish("stock.noop_tracked", 20)
    wait_for(
        lambda: client.llen("stock") == 0 and client.hlen("unacked") == 0,
        timeout=60,
        what="warm-up",
    )
    idle = settle(lambda: tree_rss(worker.pid), seconds=opts.settle)
    limit = 20.0 if opts.quick else 60.0
    idle_latency, _ = _stock_latency(client, _fresh(opts), limit)
    # Taken off the queue is not yet received: wait for the worker's log line of each.
    received = worker.log().count("] received")
    stock_app.publish("stock.noop_tracked", pending, countdown=3600)
    wait_for(
        lambda: worker.log().count("] received") >= received + pending,
        timeout=900,
        interval=1,
        what=f"the stock worker holding {pending} ETA messages",
    )
    loaded = settle(lambda: tree_rss(worker.pid), seconds=opts.settle)
    loaded_latency, stuck = _stock_latency(client, _fresh(opts), limit)
    if stuck:
        opts.notes.append(
            f"P3: with {pending} countdown messages held, a fresh stock task had not run after "
            f"{limit:.0f} s; its latency is recorded as {limit:.0f} s (a lower bound)."
        )
    worker.stop()
    stack.processes.remove(worker)
    client.flushdb()
    client.close()
    return idle, loaded, idle_latency, loaded_latency


def run(opts: Options, report: Report) -> None:
    """Measure P3; rows and verdicts go to `report`."""
    rig = Rig(opts, "p3", env=ENV)
    rig.start_web()
    rig.stack.start_scheduler()
    stack = Stack(env={}, logdir=opts.logroot / "p3_stock")
    url = opts.redis_url()
    figures: dict[str, list[tuple[float, float, float, float]]] = {"platform": [], "stock": []}
    print(f"P3 pending retries: {opts.pending}")
    try:
        for n in range(opts.runs):
            for name, measure in (
                ("platform", lambda: _platform_run(rig, opts.pending)),
                ("stock", lambda: _stock_run(stack, url, opts.pending, opts)),
            ):
                idle, loaded, lat0, lat1 = measure()
                figures[name].append((idle, loaded, lat0, lat1))
                print(
                    f"  run {n + 1}/{opts.runs} {name}: RSS {idle / MIB:.1f} → {loaded / MIB:.1f} MiB, "
                    f"fresh latency {lat0 * 1000:.1f} → {lat1 * 1000:.1f} ms",
                    flush=True,
                )
    finally:
        stack.stop()
    for name, runs in figures.items():
        base = "stock" if name == "platform" else ""
        report.add(
            Row(
                "P3 worker RSS growth",
                name,
                "MiB",
                [(b - a) / MIB for a, b, _, _ in runs],
                baseline=base,
                higher_is_better=False,
            )
        )
        report.add(
            Row(
                "P3 worker RSS idle",
                name,
                "MiB",
                [a / MIB for a, _, _, _ in runs],
                baseline=base,
                higher_is_better=False,
            )
        )
        report.add(
            Row(
                "P3 fresh latency idle",
                name,
                "ms",
                [c * 1000 for _, _, c, _ in runs],
                baseline=base,
                higher_is_better=False,
            )
        )
        report.add(
            Row(
                "P3 fresh latency pending",
                name,
                "ms",
                [d * 1000 for _, _, _, d in runs],
                baseline=base,
                higher_is_better=False,
            )
        )
    growth = report.median("P3 worker RSS growth", "platform")
    change = ratio(
        report.median("P3 fresh latency pending", "platform"),
        report.median("P3 fresh latency idle", "platform"),
    )
    report.verdicts += [
        Verdict(
            "P3 platform worker growth, MiB (absolute)",
            growth,
            10,
            False,
            detail=f"stock grew {report.median('P3 worker RSS growth', 'stock'):.1f} MiB",
        ),
        Verdict("P3 fresh latency with pending / idle", change, 1.2, False, low=0.8),
    ]
