"""P4: /metrics scrape time at start and after many recycled children (worker and web).

Worker: `JOBS_WORKER_MAX_TASKS_PER_CHILD=1`, so each of `--recycles` no-op
jobs ends its child and the pool forks another; the worker's /metrics
(its main process merges the children's multiprocess files) is scraped 10
times after a 4-job warm-up and 10 times after the recycles.
Web: gunicorn's workers are ended one at a time (SIGTERM to the worker,
the master forks a replacement) `web_recycles` times (100; a web worker
boots in about 0.5 s, 1,000 would take most of the 20 minutes), and the
web's /metrics is scraped 21 times before and after. One pass (the
recycles are the cost); the rows' samples are the scrapes.

The verdict compares the fastest scrape after the recycles with the
fastest before (the ratio of medians is printed beside it): back-to-back
scrapes of an unchanged metrics directory ranged 3x on the shared machine
(71-236 ms in one `make bench`), and since noise only adds time the fastest
of a series is the steady measure of what a scrape costs (timeit's rule;
tests/integration/test_telemetry_recycling.py judges the same way). The
"before" and "after" series are minutes apart and cannot be interleaved.
"""

from __future__ import annotations

import http.client
import os
import signal
import time

import psutil

from bench.figures import Report, Row, Verdict, ratio
from bench.processes import children
from bench.rig import Options, Rig
from devstack.services import wait_for

SCRAPES = 21


def scrape_ms(port: int, path: str = "/metrics") -> list[float]:
    """SCRAPES timings (ms) of GET `path`, each on a new connection as Prometheus would."""
    samples = []
    for _ in range(SCRAPES):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        samples.append((time.perf_counter() - t0) * 1000)
        conn.close()
        if response.status != 200 or not body:
            raise RuntimeError(f"GET {path} on port {port}: {response.status}")
    return samples


# A worker gunicorn has just forked runs the master's signal handlers until its
# init_process installs its own (after our post_fork hook): a SIGTERM in that window
# is queued for a master loop that never runs there, and the worker never exits.
MIN_WORKER_AGE_SECONDS = 1.0


def recycle_web(master: int, times: int) -> None:
    """End one gunicorn worker at a time, the oldest, waiting for the master to replace it.

    The oldest by start time, not the lowest pid: pids wrap around (pid_max 32768 here),
    and the lowest can be the worker booted a moment ago. A worker younger than
    MIN_WORKER_AGE_SECONDS is waited for first. Raises RuntimeError when the master has
    no workers, TimeoutError when a worker is not replaced within 60 s.
    """
    for _ in range(times):
        workers = [psutil.Process(pid) for pid in children(master)]
        if not workers:
            raise RuntimeError("gunicorn has no workers")
        oldest = min(workers, key=lambda process: process.create_time())
        old, wanted = oldest.pid, len(workers)
        born = oldest.create_time()
        wait_for(
            lambda born=born: time.time() - born >= MIN_WORKER_AGE_SECONDS,
            timeout=10,
            interval=0.02,
            what="the oldest gunicorn worker past its start",
        )
        os.kill(old, signal.SIGTERM)
        wait_for(
            lambda old=old, wanted=wanted: (
                old not in children(master) and len(children(master)) >= wanted
            ),
            timeout=60,
            interval=0.02,
            what="gunicorn replacing a worker",
        )


def run(opts: Options, report: Report) -> None:
    """Measure P4; rows and verdicts go to `report`."""
    rig = Rig(opts, "p4", env={"JOBS_WORKER_MAX_TASKS_PER_CHILD": "1"})
    web = rig.start_web()
    rig.stack.start_worker(concurrency=2, timeout=120)
    rig.submit(4, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    rig.wait_attempts(4, timeout=120)
    print(
        f"P4 scrape: {opts.recycles} worker child recycles, {opts.web_recycles} web worker recycles"
    )
    worker_before = scrape_ms(rig.worker_metrics_port)
    web_before = scrape_ms(rig.web_port)
    # Wait for the web's replacement workers to be serving before each scrape set.
    started = time.monotonic()
    rig.submit(opts.recycles, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    rig.wait_attempts(4 + opts.recycles, timeout=1800)
    print(f"  {opts.recycles} worker recycles in {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    recycle_web(web.pid, opts.web_recycles)
    print(f"  {opts.web_recycles} web recycles in {time.monotonic() - started:.0f} s", flush=True)
    wait_for(lambda: len(children(web.pid)) >= 2, timeout=60, what="web workers")
    scrape_ms(rig.web_port)  # the new workers' first requests
    worker_after = scrape_ms(rig.worker_metrics_port)
    web_after = scrape_ms(rig.web_port)
    for label, before, after in (
        ("worker", worker_before, worker_after),
        ("web", web_before, web_after),
    ):
        report.add(Row(f"P4 {label} /metrics", "at start", "ms", before, higher_is_better=False))
        report.add(
            Row(
                f"P4 {label} /metrics",
                "after recycles",
                "ms",
                after,
                baseline="at start",
                higher_is_better=False,
            )
        )
        print(
            f"  {label} /metrics: {sorted(before)[SCRAPES // 2]:.1f} → {sorted(after)[SCRAPES // 2]:.1f} ms"
        )
    for label, count in (("worker", opts.recycles), ("web", opts.web_recycles)):
        bench = f"P4 {label} /metrics"
        medians = ratio(report.median(bench, "after recycles"), report.median(bench, "at start"))
        report.verdicts.append(
            Verdict(
                f"P4 {label} /metrics after {count} recycles / at start, fastest of {SCRAPES}",
                ratio(report.fastest(bench, "after recycles"), report.fastest(bench, "at start")),
                1.2,
                False,
                detail=f"ratio of medians {medians:.2f}",
            )
        )
