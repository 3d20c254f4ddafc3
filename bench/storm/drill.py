"""The retry-storm drill: the same storm against the platform and a stock Celery worker.

A storm is `jobs` jobs sent at once, each hanging (ended by the soft time
limit, `timeout` seconds) on its first `fail_times` attempts while holding
`buffer_bytes`, with the hanging call in a helper thread when
`leave_thread`. Each side gets its own worker of `concurrency` children on
the same Redis server (a database number each, claimed as `make demo` does),
a short warm-up, a baseline, the storm, and a reading every second until
every job settled or `settle_seconds` passed. The platform side also runs
the scheduler, on a fresh PostgreSQL database (sides.fresh_database). Every
process is started and stopped by pid (devstack.processes); the sides run
one after the other, so neither takes CPU from the other.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack

import psutil

from config.env import env
from devstack.demo import DEFAULT_REDIS_URL, demo_redis
from devstack.processes import Stack
from devstack.services import ensure_redis, wait_for

from .model import STORM_DIR, SideResult, StormConfig
from .probes import Sample, worker_tree
from .sides import PlatformSide, Side, StockSide, fresh_database, platform_env


def _median_tree(pid: int, seconds: float) -> tuple[int, int]:
    """Medians of (RSS bytes, threads) of a worker tree read every 0.25 s for `seconds`."""
    readings = [worker_tree(pid)]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        readings.append(worker_tree(pid))
        time.sleep(0.25)
    return (
        int(statistics.median(r[0] for r in readings)),
        int(statistics.median(r[1] for r in readings)),
    )


def _wait_whole_tree(pid: int, children: int, timeout: float = 60.0) -> None:
    """Wait until the worker `pid` has `children` pool processes and a thread count steady for 1 s.

    A child being replaced (after a time limit, a memory limit or a left
    thread) would otherwise be missing from a reading, or counted before its
    service threads started. Raises TimeoutError after `timeout` seconds.
    """
    root = psutil.Process(pid)
    steady: list[int] = []

    def whole() -> bool:
        if len(root.children()) != children:
            steady.clear()
            return False
        steady.append(worker_tree(pid)[1])
        del steady[:-5]
        return len(steady) == 5 and len(set(steady)) == 1

    wait_for(whole, timeout=timeout, interval=0.25, what=f"{children} steady pool children")


def run_side(
    side: Side,
    config: StormConfig,
    *,
    on_sample: Callable[[str, Sample], None],
    say: Callable[[str], None],
) -> SideResult:
    """Warm up, take the baseline, send the storm and read every second until settled or timed out."""
    # One job a child (prefork hands them out unevenly, but most children get one).
    warm = config.concurrency
    side.submit(warm, config.payload(fail_times=1 if side.name == "platform" else 0))
    wait_for(lambda: side.read().settled >= warm, timeout=120, interval=0.5, what="warm-up")
    side.mark_baseline()
    _wait_whole_tree(side.worker.pid, config.concurrency)
    rss, threads = _median_tree(side.worker.pid, config.baseline_seconds)
    result = SideResult(side.name, config.jobs, baseline_rss=rss, baseline_threads=threads)
    started = time.monotonic()
    say(f"{side.name}: baseline {rss / 1e6:.1f} MB, {threads} threads; sending {config.jobs} jobs")
    side.submit(config.jobs, config.payload())
    while True:
        tick = time.monotonic()
        if not side.worker.alive():
            raise RuntimeError(f"{side.name} worker died:\n{side.worker.log()[-2000:]}")
        rss, threads = worker_tree(side.worker.pid)
        sample = Sample(t=tick - started, rss_bytes=rss, threads=threads, counts=side.read())
        result.samples.append(sample)
        on_sample(side.name, sample)
        if sample.counts.settled >= config.jobs or tick - started > config.settle_seconds:
            break
        time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    result.storm_seconds = time.monotonic() - started
    _wait_whole_tree(side.worker.pid, config.concurrency)
    result.end_rss, result.end_threads = _median_tree(side.worker.pid, config.baseline_seconds)
    result.end = side.read()
    return result


def run_drill(
    config: StormConfig,
    *,
    on_sample: Callable[[str, Sample], None],
    say: Callable[[str], None],
) -> list[SideResult]:
    """Run each side in `config.sides` in turn; returns their results (same order).

    Raises RuntimeError (a process died), TimeoutError (a start or the
    warm-up took too long) or subprocess.CalledProcessError (migrate failed).
    """
    logdir = STORM_DIR / "logs"
    results = []
    with ExitStack() as cleanup:
        server_url, server = ensure_redis(env.str("REDIS_URL", default=DEFAULT_REDIS_URL))
        if server is not None:
            cleanup.callback(server.stop)
        metrics_dir = STORM_DIR / f"metrics-{os.getpid()}"
        cleanup.callback(shutil.rmtree, metrics_dir, ignore_errors=True)
        for name in config.sides:
            redis_url = cleanup.enter_context(demo_redis(server_url))
            with ExitStack() as side_cleanup:
                side: Side
                if name == "platform":
                    database_url = side_cleanup.enter_context(fresh_database(say))
                    stack = Stack(
                        env=platform_env(config, database_url, redis_url, metrics_dir),
                        logdir=logdir,
                    )
                    side_cleanup.callback(stack.stop)
                    say(
                        f"platform: migrating {database_url.split('?')[0]}, starting worker and scheduler"
                    )
                    side = PlatformSide(stack, database_url, config.concurrency)
                else:
                    stack = Stack(env={}, logdir=logdir)
                    side_cleanup.callback(stack.stop)
                    say(f"stock: starting a stock Celery worker on {redis_url}")
                    side = StockSide(stack, redis_url, config)
                side_cleanup.callback(side.close)
                say(f"{name}: warm-up ({config.concurrency} jobs); logs in {logdir}")
                results.append(run_side(side, config, on_sample=on_sample, say=say))
    return results
