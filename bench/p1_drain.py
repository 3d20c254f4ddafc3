"""P1: drain rate of no-op jobs, and of a storm where every attempt fails and retries.

Per run, in turn (A B C ... A B C ...):
- platform on PostgreSQL (and SQLite): `--jobs` `demo.flaky` jobs (fail_times 0)
  submitted through the API while no worker runs; then a worker as shipped
  (prefork, concurrency 2, INFO logging, job rows, metrics, tracing setup)
  starts; jobs/s from its "ready" line to the last attempt recorded finished.
- stock Celery tracked (acks_late, prefetch 1, events on) and stock defaults:
  the same count of no-op messages published first, then a worker with the
  same concurrency and log level on the same redis-server; jobs/s from
  "ready" to the queue being empty with nothing unacknowledged.
- the anchor (bench/anchor: Django + stock Celery + django-celery-results,
  results in PostgreSQL, acks late, prefetch 1, events) with Celery's
  defaults and with CELERY_DB_REUSE_MAX = 1000 (the platform's value): the
  same count of `anchor.noop` messages published first, then its worker
  (prefork 2, INFO); jobs/s from "ready" to the queue drained.
- storm: jobs/8 jobs failing every attempt, 3 attempts each with zero backoff
  (the platform's retries go through the database and its scheduler; the
  retry budget is lifted so every failure retries), against stock Celery's
  `autoretry_for` with countdown 0 and max_retries 2, bare and in the
  anchor (with CELERY_DB_REUSE_MAX). Attempts/s.

The default size (4,000 jobs) is 2 × max_tasks_per_child (1,000, as
shipped) per child of a 2-child worker, so each child is recycled at least
once in every platform drain; a line says so, or why not, at the end. The
variants no target judges (stock-defaults, anchor-defaults) run a third as
often as the others (at least once), to keep `make bench` in its time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import redis

from bench import stock_app
from bench.anchor_rig import REUSE_MAX, Anchor
from bench.figures import Report, Row, Verdict, interleave, ratio
from bench.rig import Options, Rig
from bench.stock_worker import start_stock_worker
from bench.stock_worker import wait_drained as stock_drained
from devstack.processes import Stack

STORM_ATTEMPTS = 3
# The platform's worker_max_tasks_per_child as shipped (JOBS_WORKER_MAX_TASKS_PER_CHILD).
MAX_TASKS_PER_CHILD = 1000
CHILDREN = 2
# Variants no target is judged by: fewer runs (a third), to keep `make bench` in its time.
INFORMATIONAL = ("stock-defaults", "anchor-defaults")
STORM_ENV = {
    "JOBS_KIND_OVERRIDES": json.dumps(
        {
            "demo.flaky": {
                "max_attempts": STORM_ATTEMPTS,
                "backoff_base": 0,
                "backoff_floor": 0,
                "backoff_cap": 0,
            }
        }
    ),
    # The retry budget would turn most of a storm's retries into dead jobs:
    # lifted, so every failed attempt is followed by another.
    "JOBS_RETRY_BUDGET_RATIO": "1000",
    "JOBS_RETRY_BUDGET_FLOOR": "1000000",
}


def _platform_drain(rig: Rig, jobs: int, *, fail: bool) -> float:
    before = rig.finished_attempts()
    rig.submit(jobs, {"kind": "demo.flaky", "payload": {"fail_times": 100 if fail else 0}})
    scheduler = rig.stack.start_scheduler() if fail else None
    attempts = jobs * (STORM_ATTEMPTS if fail else 1)
    worker = rig.stack.start_worker(concurrency=2, timeout=120)
    started = time.perf_counter()
    ended = rig.wait_attempts(before + attempts, timeout=1800)
    for process in (worker, scheduler):
        if process is not None:
            process.stop()
            rig.stack.processes.remove(process)
    return attempts / (ended - started)


def _stock_drain(stack: Stack, url: str, jobs: int, *, tracked: bool, fail: bool = False) -> float:
    stock_app.configure(url, tracked=tracked)
    task = "stock.fail_tracked" if fail else ("stock.noop_tracked" if tracked else "stock.noop")
    stock_app.publish(task, jobs)
    client = redis.Redis.from_url(url)
    name = "stock-storm" if fail else ("stock-tracked" if tracked else "stock-defaults")
    worker = start_stock_worker(stack, url, tracked=tracked, name=name)
    started = time.perf_counter()
    ended = stock_drained(client, "stock", timeout=1800)
    worker.stop()
    stack.processes.remove(worker)
    client.close()
    return jobs * (STORM_ATTEMPTS if fail else 1) / (ended - started)


def run(opts: Options, report: Report, *, storm: bool = True, success: bool = True) -> None:
    """Measure P1 (and the storm); rows and verdicts go to `report`.

    `success=False` (the storm alone) keeps only the platform's own success
    path on the first database, which the storm is judged against.
    """
    rigs: dict[str, Rig] = {}
    for db in opts.dbs if success else opts.dbs[:1]:
        rig = Rig(opts, "p1", db=db, env=STORM_ENV)
        rigs[db] = rig
        rig.start_web()
    stock_stack = Stack(env={}, logdir=opts.logroot / "p1_stock")
    stock_url = opts.redis_url()
    redis.Redis.from_url(stock_url).flushdb()
    anchor = Anchor(opts, "p1")
    storm_jobs = max(10, opts.jobs // 8)
    steps: list[tuple[str, Callable[[], float]]] = []
    if "postgres" in rigs:
        steps.append(
            ("platform-pg", lambda: _platform_drain(rigs["postgres"], opts.jobs, fail=False))
        )
    if success:
        steps.append(
            ("stock-tracked", lambda: _stock_drain(stock_stack, stock_url, opts.jobs, tracked=True))
        )
        steps.append(
            (
                "stock-defaults",
                lambda: _stock_drain(stock_stack, stock_url, opts.jobs, tracked=False),
            )
        )
        steps.append(
            (
                "anchor-reuse",
                lambda: anchor.drain("anchor.noop", opts.jobs, reuse_max=REUSE_MAX),
            )
        )
        steps.append(
            ("anchor-defaults", lambda: anchor.drain("anchor.noop", opts.jobs, reuse_max=0))
        )
    if "sqlite" in rigs and (success or "postgres" not in rigs):
        steps.append(
            ("platform-sqlite", lambda: _platform_drain(rigs["sqlite"], opts.jobs, fail=False))
        )
    own = "postgres" if "postgres" in rigs else "sqlite"
    if storm:
        steps.append(("platform-storm", lambda: _platform_drain(rigs[own], storm_jobs, fail=True)))
        steps.append(
            (
                "stock-storm",
                lambda: _stock_drain(stock_stack, stock_url, storm_jobs, tracked=True, fail=True),
            )
        )
        steps.append(
            (
                "anchor-storm",
                lambda: anchor.drain(
                    "anchor.fail", storm_jobs, reuse_max=REUSE_MAX, attempts=STORM_ATTEMPTS
                ),
            )
        )
    info_runs = max(1, opts.runs // 3)
    print(
        f"P1 drain: {opts.jobs} no-op jobs, storm {storm_jobs} jobs × {STORM_ATTEMPTS} attempts; "
        f"{', '.join(INFORMATIONAL)} (no target) {info_runs} of {opts.runs} runs"
    )
    try:
        samples = interleave(opts.runs, steps, fewer=dict.fromkeys(INFORMATIONAL, info_runs))
    finally:
        stock_stack.stop()
        anchor.close()
    for name, values in samples.items():
        unit = "attempts/s" if "storm" in name else "jobs/s"
        baseline = {
            "platform-pg": "anchor-reuse",
            "platform-sqlite": "stock-tracked",
            "stock-defaults": "stock-tracked",
            "anchor-reuse": "stock-tracked",
            "anchor-defaults": "anchor-reuse",
            "platform-storm": "anchor-storm",
            "anchor-storm": "stock-storm",
        }.get(name, "")
        report.add(Row("P1", name, unit, values, baseline=baseline))
    tracked = report.median("P1", "stock-tracked")
    if success:
        opts.notes.append(recycling_line(opts.jobs, "sqlite" in rigs))
    if "postgres" in rigs and success:
        platform = report.median("P1", "platform-pg")
        report.verdicts.append(
            Verdict(
                "P1 PostgreSQL vs Django + django-celery-results with CELERY_DB_REUSE_MAX "
                "(issue 20)",
                ratio(platform, report.median("P1", "anchor-reuse")),
                1.0,
                True,
                detail=f"vs its defaults {ratio(platform, report.median('P1', 'anchor-defaults')):.2f}",
            )
        )
        report.verdicts.append(
            Verdict(
                "P1 PostgreSQL vs stock tracked (issue 20)", ratio(platform, tracked), 0.75, True
            )
        )
    if "sqlite" in rigs and success:
        report.verdicts.append(
            Verdict(
                "P1 SQLite vs stock tracked",
                ratio(report.median("P1", "platform-sqlite"), tracked),
                0.6,
                True,
            )
        )
    if storm:
        own_rate = report.median("P1", "platform-pg" if own == "postgres" else "platform-sqlite")
        storm_rate = report.median("P1", "platform-storm")
        report.verdicts.append(
            Verdict(
                f"P1 storm vs own success path ({own}) (issue 20)",
                ratio(storm_rate, own_rate),
                0.6,
                True,
            )
        )
        report.verdicts.append(
            Verdict(
                "P1 storm vs stock autoretry_for (countdown 0)",
                ratio(storm_rate, report.median("P1", "stock-storm")),
                0.5,
                True,
                detail="vs the anchor's autoretry_for "
                f"{ratio(storm_rate, report.median('P1', 'anchor-storm')):.2f}",
            )
        )


def recycling_line(jobs: int, sqlite: bool) -> str:
    """Whether `jobs` per drain reach 2 × max_tasks_per_child in each of the worker's children."""
    per_child = jobs / CHILDREN
    need = 2 * MAX_TASKS_PER_CHILD * CHILDREN
    where = "PostgreSQL and SQLite drains" if sqlite else "PostgreSQL drains"
    if per_child >= 2 * MAX_TASKS_PER_CHILD:
        return (
            f"P1 size: {jobs} jobs ≈ {per_child:.0f} per child ≥ 2 × max_tasks_per_child "
            f"({MAX_TASKS_PER_CHILD}): every child of the platform's worker is recycled "
            f"in the {where} (the anchor and stock Celery ship no per-child limit)."
        )
    return (
        f"P1 size: {jobs} jobs ≈ {per_child:.0f} per child < 2 × max_tasks_per_child "
        f"({MAX_TASKS_PER_CHILD}): child recycling is not reached (it takes {need} jobs; "
        "--quick and a smaller --jobs keep runs short)."
    )
