"""P5: web p99 while CPU-heavy jobs run — separate worker processes vs a thread pool in the web.

One gunicorn as shipped with the overlay settings (bench.baseline), one
worker (2 children). The probe: GET /api/jobs/<id>/ (token auth, one row
read) from 2 keep-alive clients, `probe` requests per phase. Phases per run:
- platform idle / platform loaded: `bench.cpu` jobs of 0.2 s each keep both
  worker children busy during the probe (queue emptied after it);
- in-process idle / in-process loaded: the same 0.2 s burns queued in a
  one-thread pool inside each of the two gunicorn workers (two burners in
  all, as the worker's two children), dropped after the probe.
"""

from __future__ import annotations

import http.client
import json
import time

from bench.figures import Report, Row, Verdict, percentile, ratio
from bench.http_load import http_load
from bench.rig import Options, Rig
from devstack.services import wait_for

BURN = 0.2


def _post(port: int, path: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path)
    body = json.loads(conn.getresponse().read())
    conn.close()
    return body


def _inprocess_load(port: int, count: int) -> None:
    """Queue `count` burns in each gunicorn worker (new connections until both pids answered)."""
    seen: set[int] = set()
    for _ in range(100):
        seen.add(_post(port, f"/bench/inprocess/cpu/?seconds={BURN}&count={count}")["pid"])
        if len(seen) >= 2:
            return
    raise RuntimeError("P5: could not reach both gunicorn workers")


def _inprocess_stop(port: int) -> None:
    idle: set[int] = set()

    def drained() -> bool:
        answer = _post(port, "/bench/inprocess/cpu/?cancel=1")
        if answer["pending"] == 0:
            idle.add(answer["pid"])
        return len(idle) >= 2

    wait_for(drained, timeout=60, interval=0.05, what="in-process pools drained")


def run(opts: Options, report: Report) -> None:
    """Measure P5; rows and verdicts go to `report`."""
    rig = Rig(opts, "p5", settings="bench.baseline.settings")
    rig.start_web()
    rig.stack.start_worker(concurrency=2, timeout=120)
    rig.submit(1, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
    job_id = rig.scalar("SELECT id FROM jobs_job LIMIT 1")
    probe_total = 60 if opts.quick else 600
    # Enough queued work to outlast a loaded probe (2 burners).
    burns = 30 if opts.quick else 200

    def probe() -> float:
        result = http_load(
            rig.web_port,
            "GET",
            f"/api/jobs/{job_id}/",
            total=probe_total,
            clients=2,
            headers=rig.auth,
        )
        if result.errors:
            raise RuntimeError(f"P5: {result.errors} probe requests failed ({rig.logdir})")
        return percentile(result.latencies, 99) * 1000

    def platform_loaded() -> float:
        before = rig.finished_attempts()
        rig.submit(burns, {"kind": "bench.cpu", "payload": {"seconds": BURN}})
        rig.wait_attempts(before + 2, timeout=60)
        p99 = probe()
        keys = rig.redis.keys("default*")
        if keys:
            rig.redis.delete(*keys)
        wait_for(lambda: rig.redis.hlen("unacked") == 0, timeout=60, what="running cpu jobs to end")
        time.sleep(BURN)
        return p99

    def inprocess_loaded() -> float:
        _inprocess_load(rig.web_port, burns // 2)
        time.sleep(BURN)
        p99 = probe()
        _inprocess_stop(rig.web_port)
        return p99

    probe()  # warm-up
    print(f"P5 isolation: {probe_total} probe requests per phase, {BURN} s CPU burns")
    steps = [
        ("platform idle", probe),
        ("platform loaded", platform_loaded),
        ("in-process idle", probe),
        ("in-process loaded", inprocess_loaded),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _ in steps}
    for n in range(opts.runs):
        for name, measure in steps:
            samples[name].append(measure())
            print(f"  run {n + 1}/{opts.runs} {name}: p99 {samples[name][-1]:.1f} ms", flush=True)
    for name, values in samples.items():
        base = {"platform loaded": "platform idle", "in-process loaded": "in-process idle"}.get(
            name, ""
        )
        report.add(Row("P5 web p99", name, "ms", values, baseline=base, higher_is_better=False))
    inproc = ratio(
        report.median("P5 web p99", "in-process loaded"),
        report.median("P5 web p99", "in-process idle"),
    )
    report.verdicts.append(
        Verdict(
            "P5 web p99 with CPU jobs on workers / idle",
            ratio(
                report.median("P5 web p99", "platform loaded"),
                report.median("P5 web p99", "platform idle"),
            ),
            1.5,
            False,
            detail=f"in-process thread pool: {inproc:.2f}",
        )
    )
