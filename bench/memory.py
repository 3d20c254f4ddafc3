"""Memory: idle RSS of each platform process against the anchor's and stock Celery's worker.

Per run, fresh processes: the platform's web (gunicorn master and its 2
workers), worker (main and 2 children) and scheduler, on PostgreSQL, after
20 no-op jobs; then the anchor's worker (bench/anchor: Django +
django-celery-results, with CELERY_DB_REUSE_MAX, so its children keep a
database connection as the platform's do; 2 children) after 20 no-op
tasks; then a stock Celery worker (bench.stock_app, tracked, 2 children)
after 20 no-op tasks. Each figure is the median of 2 s of RSS samples (MiB,
shared pages counted in each process, as `ps` shows them).
"""

from __future__ import annotations

import redis

from bench import stock_app
from bench.anchor_rig import QUEUE, REUSE_MAX, Anchor
from bench.figures import Report, Row, Verdict, ratio
from bench.processes import children, settle_rss
from bench.rig import Options, Rig
from bench.stock_worker import start_stock_worker
from devstack.processes import Stack
from devstack.services import wait_for


def _platform(rig: Rig) -> dict[str, list[float]]:
    web = rig.start_web()
    worker = rig.stack.start_worker(concurrency=2, timeout=120)
    scheduler = rig.stack.start_scheduler()
    before = rig.finished_attempts()
    rig.submit(20, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    rig.wait_attempts(before + 20, timeout=120)
    found = settle_rss(
        {
            "web master": [web.pid],
            "web worker": children(web.pid),
            "worker main": [worker.pid],
            "worker child": children(worker.pid),
            "scheduler": [scheduler.pid],
        },
        seconds=rig.opts.settle,
    )
    rig.stack.stop()
    return found


def _stock(stack: Stack, url: str, settle: float) -> dict[str, list[float]]:

    client = redis.Redis.from_url(url)
    stock_app.configure(url, tracked=True)
    worker = start_stock_worker(stack, url, tracked=True, name="stock-memory")
    stock_app.publish("stock.noop_tracked", 20)
    wait_for(
        lambda: client.llen("stock") == 0 and client.hlen("unacked") == 0,
        timeout=60,
        what="warm-up",
    )
    pool = wait_for(
        lambda: children(worker.pid)[:2] if len(children(worker.pid)) >= 2 else None,
        timeout=60,
        what="stock pool",
    )
    found = settle_rss({"stock main": [worker.pid], "stock child": pool}, seconds=settle)
    stack.stop()
    client.close()
    return found


def _anchor(anchor: Anchor, settle: float) -> dict[str, list[float]]:
    worker = anchor.start_worker(reuse_max=REUSE_MAX, name="anchor-memory")
    anchor.publish("anchor.noop", 20)
    wait_for(
        lambda: anchor.redis.llen(QUEUE) == 0 and anchor.redis.hlen("unacked") == 0,
        timeout=60,
        what="anchor warm-up",
    )
    pool = wait_for(
        lambda: children(worker.pid)[:2] if len(children(worker.pid)) >= 2 else None,
        timeout=60,
        what="anchor pool",
    )
    found = settle_rss({"anchor main": [worker.pid], "anchor child": pool}, seconds=settle)
    anchor.stop(worker)
    return found


def run(opts: Options, report: Report) -> None:
    """Measure idle RSS; rows and the child verdict go to `report`."""
    rig = Rig(opts, "memory")
    anchor = Anchor(opts, "memory")
    stack = Stack(env={}, logdir=opts.logroot / "memory_stock")
    url = opts.redis_url()
    samples: dict[str, list[float]] = {}
    print("Memory: idle RSS")
    for n in range(opts.runs):
        for name, measure in (
            ("platform", lambda: _platform(rig)),
            ("anchor", lambda: _anchor(anchor, opts.settle)),
            ("stock", lambda: _stock(stack, url, opts.settle)),
        ):
            found = measure()
            for key, values in found.items():
                samples.setdefault(key, []).extend(values)
            shown = ", ".join(f"{k} {'/'.join(f'{v:.1f}' for v in vs)}" for k, vs in found.items())
            print(f"  run {n + 1}/{opts.runs} {name}: {shown} MiB", flush=True)
    baselines = {
        "worker main": "anchor main",
        "worker child": "anchor child",
        "anchor main": "stock main",
        "anchor child": "stock child",
    }
    for key, values in samples.items():
        report.add(
            Row(
                "Memory idle RSS",
                key,
                "MiB",
                values,
                baseline=baselines.get(key, ""),
                higher_is_better=False,
            )
        )
    child = report.median("Memory idle RSS", "worker child")
    report.verdicts.append(
        Verdict(
            "Memory idle worker child vs the anchor's child (issue 20)",
            ratio(child, report.median("Memory idle RSS", "anchor child")),
            1.15,
            False,
        )
    )
    report.verdicts.append(
        Verdict(
            "Memory idle worker child vs stock child",
            ratio(
                report.median("Memory idle RSS", "worker child"),
                report.median("Memory idle RSS", "stock child"),
            ),
            1.3,
            False,
        )
    )
