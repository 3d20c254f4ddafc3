"""P2: enqueue under concurrent load — `POST /api/jobs/` vs what a user would write instead.

- platform: `POST /api/jobs/` in one gunicorn as shipped (config/gunicorn.py:
  2 workers × 4 threads) with the overlay settings `bench.baseline.settings`
  (the platform's URLs plus the bare view);
- handwritten: a separate ordinary Django project (bench/anchor) in its own
  gunicorn of the same size, on its own PostgreSQL database: a DRF view,
  token-authenticated, that validates kind and payload, inserts a row in
  its own table (anchor_submission: primary key only) and publishes a
  Celery message on commit (`delay_on_commit`). `startproject`'s
  middleware, none of the platform's;
- bare: a Django view in the platform's gunicorn that only calls `delay()`.
No worker runs; the queues are emptied after each run. `--requests`
requests per run from 8 keep-alive clients, after 50 warm-up requests of each.
"""

from __future__ import annotations

from bench.anchor_rig import QUEUE, Anchor
from bench.figures import Report, Row, Verdict, percentile, ratio
from bench.http_load import LoadResult, http_load
from bench.rig import Options, Rig

BODY = {"kind": "demo.flaky", "payload": {"fail_times": 0}}
PATHS = {"platform": "/api/jobs/", "handwritten": "/submit/", "bare": "/bench/bare/"}


def run(opts: Options, report: Report) -> None:
    """Measure P2; rows and verdicts go to `report`."""
    rig = Rig(opts, "p2", settings="bench.baseline.settings")
    rig.start_web()
    anchor = Anchor(opts, "p2")
    anchor.start_web()
    results: dict[str, list[LoadResult]] = {name: [] for name in PATHS}

    def load(name: str, total: int) -> LoadResult:
        own = name == "handwritten"
        result = http_load(
            anchor.web_port if own else rig.web_port,
            "POST",
            PATHS[name],
            total=total,
            clients=opts.clients,
            body=BODY,
            headers=anchor.auth if own else rig.auth,
        )
        if result.errors:
            raise RuntimeError(
                f"P2 {name}: {result.errors} of {total} requests failed ({rig.logdir})"
            )
        keys = rig.redis.keys("default*")
        if keys:
            rig.redis.delete(*keys)
        anchor.redis.delete(QUEUE)
        return result

    for name in PATHS:
        load(name, 10 if opts.quick else 50)
    print(f"P2 enqueue: {opts.requests} POSTs per run, {opts.clients} clients")
    for n in range(opts.runs):
        for name in PATHS:
            result = load(name, opts.requests)
            results[name].append(result)
            print(
                f"  run {n + 1}/{opts.runs} {name}: {result.rate:.0f} req/s, p50 "
                f"{percentile(result.latencies, 50) * 1000:.1f} ms, p99 "
                f"{percentile(result.latencies, 99) * 1000:.1f} ms",
                flush=True,
            )
    for name, runs in results.items():
        base = "handwritten" if name != "handwritten" else ""
        report.add(Row("P2 rate", name, "req/s", [r.rate for r in runs], baseline=base))
    for q in (50, 99):
        for name, runs in results.items():
            base = "handwritten" if name != "handwritten" else ""
            report.add(
                Row(
                    f"P2 p{q}",
                    name,
                    "ms",
                    [percentile(r.latencies, q) * 1000 for r in runs],
                    baseline=base,
                    higher_is_better=False,
                )
            )
    rate = report.median("P2 rate", "platform")
    # Issue 20: against the hand-written Django app the figure is reported, with no target.
    opts.notes.append(
        "P2 vs the hand-written Django app (bench/anchor: DRF token auth, a row in its own "
        "table, `delay_on_commit`; no target): req/s "
        f"{ratio(rate, report.median('P2 rate', 'handwritten')):.2f}, p50 "
        f"{ratio(report.median('P2 p50', 'platform'), report.median('P2 p50', 'handwritten')):.2f}, "
        f"p99 {ratio(report.median('P2 p99', 'platform'), report.median('P2 p99', 'handwritten')):.2f}"
        " (platform / hand-written)."
    )
    report.verdicts.append(
        Verdict(
            "P2 req/s vs bare delay()", ratio(rate, report.median("P2 rate", "bare")), 0.5, True
        )
    )
