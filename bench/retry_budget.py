"""The retry budget at scale: a storm bounded per window, and a decision's cost flat in the storm.

    .venv/bin/python -m bench.retry_budget cost              # (b), ~20 s
    .venv/bin/python -m bench.retry_budget storm --minutes 2  # (a), ~6 min

`cost` (issue 11: "The retry budget's decision costs the same (±20%) with
100 and with 100,000 attempts of the kind in the window"): against a real
Redis (REDIS_URL, default 127.0.0.1:6379; keys under a unique prefix,
deleted after), the window is filled as the platform fills it (first
attempts counted with jobs.budget.record_first's HINCRBY, retries as
reserved ones), then `--decisions` decisions (jobs.budget.reserve, one
EVALSHA each) are timed one by one, each undone after its timing so every
one sees the same state. Two regimes per size: within budget (the retry
gets its backoff) and spent (every window ahead full: the script scans
them all and refuses). Prints the median and p90 in microseconds and the
100,000 / 100 ratio.

`storm` (issue 11: "a kind whose dependency always fails, fed 1,000 jobs
per minute: in every 60 s window retries <= 0.2 x first attempts + 3; the
exhausted counter rises; jobs of another kind submitted at the same time
finish as fast as on a calm run (±20%)"): two fresh platforms (web, worker,
scheduler; PostgreSQL and Redis), default budget settings. Each is fed
through the API for `--minutes` minutes with `--rate` demo.flaky jobs per
minute and, at the same time, one demo.sleep job (0.05 s) per second (those
of the first `--warmup` seconds, the platform's start, are not judged). Calm
run: demo.flaky succeeds at once. Storm run: it always fails
(fail_times=10000, 5 attempts, backoff 1-8 s). Judged from the Attempt
rows of demo.flaky: per budget window (epoch-aligned, as jobs.budget
counts them) first attempts, retries started, and the limit. Prints the
windows, the exhausted/deferred counters and dead reasons, and the
end-to-end seconds (created to finished, median and p90) of the
demo.sleep jobs in both runs.

Needs PostgreSQL at 127.0.0.1:5432 (as the integration tests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

from devstack.services import wait_for

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")


def _django() -> None:
    import django  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    django.setup()


# --- (b) the decision's cost ----------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Window:
    """One kind's budget window filled with `attempts` attempts, under a prefix of its own."""

    def __init__(self, client: Any, *, attempts: int, spent: bool) -> None:
        from jobs.budget import BudgetConfig  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

        self.client = client
        self.prefix = f"bench:budget:{uuid.uuid4().hex}:"
        self.config = BudgetConfig(
            window=60.0, ratio=0.2, floor=3, max_deferral=300.0, key_prefix=self.prefix
        )
        index = int(time.time() // self.config.window)
        key = self.config.key(KIND, index)
        # The window as a storm leaves it: 5/6 first attempts, 1/6 retries (at most the limit).
        firsts = attempts * 5 // 6
        pipe = client.pipeline(transaction=False)
        for _ in range(firsts):
            pipe.hincrby(key, "f", 1)  # as jobs.budget.record_first counts them
        pipe.execute()
        client.hset(key, "r", attempts - firsts)
        if spent:
            # Every window a deferral could reach is full: the script scans all and refuses.
            client.hset(key, "r", int(0.2 * firsts + 3) + 1)
            for ahead in range(1, int(self.config.max_deferral // self.config.window) + 3):
                client.hset(self.config.key(KIND, index + ahead), "r", 3)
        # A due time inside the window, away from its edge (no double count).
        self.due = index * self.config.window + 10.0

    def decide(self) -> float:
        """Microseconds of one decision; undone after it, so each sees the same state."""
        from jobs import budget  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

        started = time.perf_counter_ns()
        answer = budget.reserve(
            KIND, now=self.due - 1, due=self.due, config=self.config, client=self.client
        )
        spent = (time.perf_counter_ns() - started) / 1000
        if answer.fallback:
            raise SystemExit("Redis did not answer")
        if answer.granted:
            index = int(answer.due // self.config.window)
            self.client.hincrby(self.config.key(KIND, index), "r", -1)
        return spent

    def close(self) -> None:
        for key in self.client.scan_iter(f"{self.prefix}*"):
            self.client.delete(key)


KIND = "bench.kind"


def cost(args: argparse.Namespace) -> int:

    _django()
    client = redis.Redis.from_url(args.redis_url)
    print(f"uptime: {os.popen('uptime').read().strip()}")
    print(f"{'attempts':>9} {'regime':>8} {'median µs':>10} {'p90 µs':>8}")
    ok = True
    for spent in (False, True):
        small = Window(client, attempts=100, spent=spent)
        large = Window(client, attempts=100_000, spent=spent)
        timings: dict[int, list[float]] = {100: [], 100_000: []}
        try:
            for _ in range(50):  # warm up: script cached, connection open
                small.decide()
                large.decide()
            # Interleaved, so drift in the machine's load hits both alike.
            for _ in range(args.decisions):
                timings[100].append(small.decide())
                timings[100_000].append(large.decide())
        finally:
            small.close()
            large.close()
        regime = "spent" if spent else "within"
        for attempts, values in timings.items():
            print(
                f"{attempts:>9} {regime:>8} {statistics.median(values):>10.1f}"
                f" {_percentile(values, 0.9):>8.1f}"
            )
        ratio = statistics.median(timings[100_000]) / statistics.median(timings[100])
        within = 0.8 <= ratio <= 1.2
        ok &= within
        print(
            f"ratio 100,000 / 100 ({regime}): {ratio:.3f} {'within' if within else 'OUTSIDE'} ±20%"
        )
    print(f"uptime: {os.popen('uptime').read().strip()}")
    return 0 if ok else 1


# --- (a) the storm ----------------------------------------------------------------------

FLAKY_POLICY = {"max_attempts": 5, "backoff_base": 1.0, "backoff_floor": 1.0, "backoff_cap": 8.0}


def _counter(text: str, name: str, **labels: str) -> float:

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _feed(
    platform: Any, *, minutes: float, rate: int, fail: bool, warmup: float
) -> tuple[list[str], int]:
    """Submit `rate` demo.flaky jobs per minute and 1 demo.sleep per second; return sleep ids."""

    flaky = {"fail_times": 10_000 if fail else 0}
    end = time.monotonic() + minutes * 60
    interval = 60.0 / rate
    sleep_ids: list[str] = []
    lock = threading.Lock()
    submitted = 0
    start = time.monotonic()

    def one(kind: str, payload: dict[str, Any]) -> None:
        nonlocal submitted
        at = time.monotonic()
        job_id = platform.submit(kind, payload)
        with lock:
            submitted += 1
            # Jobs of the first `warmup` seconds are not judged: the platform's start.
            if kind == "demo.sleep" and at - start >= warmup:
                sleep_ids.append(job_id)

    with ThreadPoolExecutor(max_workers=8) as pool:
        n = 0
        next_sleep = start
        while (now := time.monotonic()) < end:
            due = start + n * interval
            if now >= next_sleep:
                pool.submit(one, "demo.sleep", {"seconds": 0.05})
                next_sleep += 1.0
            if now >= due:
                pool.submit(one, "demo.flaky", flaky)
                n += 1
            else:
                time.sleep(min(due, next_sleep) - now if min(due, next_sleep) > now else 0)
    return sleep_ids, n


def _end_to_end(platform: Any, ids: list[str]) -> list[float]:
    rows = platform.rows(
        "SELECT extract(epoch FROM finished_at - created_at) FROM jobs_job"
        " WHERE id::text = ANY(%s) AND status = 'succeeded'",
        (ids,),
    )
    return [float(r[0]) for r in rows]


def one_run(
    factory: Any,
    *,
    fail: bool,
    minutes: float,
    rate: int,
    concurrency: int,
    settle: float,
    warmup: float,
) -> dict:

    name = "budget_storm" if fail else "budget_calm"
    platform = factory(
        name,
        env={
            # The defaults, written out: the harness's test platforms retry freely.
            "JOBS_RETRY_BUDGET_WINDOW": "60",
            "JOBS_RETRY_BUDGET_RATIO": "0.2",
            "JOBS_RETRY_BUDGET_FLOOR": "3",
            "JOBS_RETRY_BUDGET_MAX_DEFERRAL": "300",
            "JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": FLAKY_POLICY}),
            "JOBS_QUEUE_MAX_READY": str(10**6),
        },
        worker_concurrency=concurrency,
    )
    before = requests.get(platform.worker_metrics_url, timeout=30).text
    started = time.time()
    print(f"  {name}: feeding {minutes} min; uptime: {os.popen('uptime').read().strip()}")
    sleep_ids, flaky_count = _feed(platform, minutes=minutes, rate=rate, fail=fail, warmup=warmup)
    fed_until = time.time()
    wait_for(
        lambda: len(_end_to_end(platform, sleep_ids)) == len(sleep_ids),
        timeout=300,
        interval=1,
        what="every demo.sleep job finished",
    )
    # Retries of the last minute of feed get their chance: `settle` seconds more.
    time.sleep(max(0.0, fed_until + settle - time.time()) if fail else 0)
    after = requests.get(platform.worker_metrics_url, timeout=30).text
    load = os.popen("uptime").read().strip()
    windows = platform.rows(
        "SELECT floor(extract(epoch FROM a.started_at) / 60)::bigint AS w,"
        " count(*) FILTER (WHERE a.number = 1), count(*) FILTER (WHERE a.number > 1)"
        " FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
        " WHERE j.kind = 'demo.flaky' GROUP BY 1 ORDER BY 1"
    )
    dead = dict(
        platform.rows(
            "SELECT dead_reason, count(*) FROM jobs_job WHERE kind = 'demo.flaky'"
            " AND status = 'dead' GROUP BY 1"
        )
    )
    statuses = dict(
        platform.rows("SELECT status, count(*) FROM jobs_job WHERE kind = 'demo.flaky' GROUP BY 1")
    )
    e2e = _end_to_end(platform, sleep_ids)
    return {
        "name": name,
        "started": started,
        "fed_seconds": fed_until - started,
        "flaky_submitted": flaky_count,
        "sleep_jobs": len(sleep_ids),
        "windows": [(int(w), int(f), int(r)) for w, f, r in windows],
        "dead": dead,
        "statuses": statuses,
        "exhausted": _counter(after, "jobs_retry_budget_exhausted_total", kind="demo.flaky")
        - _counter(before, "jobs_retry_budget_exhausted_total", kind="demo.flaky"),
        "deferred": _counter(after, "jobs_retry_budget_deferred_total", kind="demo.flaky")
        - _counter(before, "jobs_retry_budget_deferred_total", kind="demo.flaky"),
        "fallback": _counter(after, "jobs_retry_budget_fallback_total", kind="demo.flaky")
        - _counter(before, "jobs_retry_budget_fallback_total", kind="demo.flaky"),
        "sleep_e2e_median": statistics.median(e2e),
        "sleep_e2e_p90": _percentile(e2e, 0.9),
        "uptime": load,
    }


def storm(args: argparse.Namespace) -> int:

    from tests.integration.harness import PlatformFactory  # noqa: PLC0415 - import cost: the test harness, only for the live storm

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-budget-") as logroot:
        for fail in (False, True):
            factory = PlatformFactory(logroot=Path(logroot))
            try:
                results.append(
                    one_run(
                        factory,
                        fail=fail,
                        minutes=args.minutes,
                        rate=args.rate,
                        concurrency=args.concurrency,
                        settle=args.settle,
                        warmup=args.warmup,
                    )
                )
            finally:
                factory.close()
    ok = True
    for r in results:
        print(f"\n{r['name']}: {r['flaky_submitted']} demo.flaky and {r['sleep_jobs']} demo.sleep")
        print(f"  fed {r['fed_seconds']:.0f} s; uptime at the end: {r['uptime']}")
        print(f"  {'window start (UTC)':>20} {'first':>6} {'retries':>8} {'limit':>7}")
        for index, firsts, retries in r["windows"]:
            limit = 0.2 * firsts + 3
            flag = "" if retries <= limit else "  OVER"
            ok &= retries <= limit
            at = time.strftime("%H:%M:%S", time.gmtime(index * 60))
            print(f"  {at:>20} {firsts:>6} {retries:>8} {limit:>7.1f}{flag}")
        print(
            f"  exhausted +{r['exhausted']:.0f}, deferred +{r['deferred']:.0f}, "
            f"fallback +{r['fallback']:.0f}; demo.flaky statuses {r['statuses']}, dead {r['dead']}"
        )
        print(
            f"  demo.sleep end to end: median {r['sleep_e2e_median']:.3f} s,"
            f" p90 {r['sleep_e2e_p90']:.3f} s"
        )
    calm, storm_run = results
    ratio = storm_run["sleep_e2e_median"] / calm["sleep_e2e_median"]
    print(f"\nother kind, storm / calm median end to end: {ratio:.2f}")
    ok &= storm_run["exhausted"] > 0 and 0.8 <= ratio <= 1.2
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cost", help="a decision's cost with 100 and 100,000 attempts")
    c.add_argument("--decisions", type=int, default=2000)
    c.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    s = sub.add_parser("storm", help="a storm of --rate failing jobs per minute, and a calm run")
    s.add_argument("--minutes", type=float, default=2.0)
    s.add_argument("--rate", type=int, default=1000)
    s.add_argument("--concurrency", type=int, default=4)
    s.add_argument("--settle", type=float, default=60.0, help="seconds observed after the feed")
    s.add_argument(
        "--warmup",
        type=float,
        default=30.0,
        help="first seconds whose demo.sleep jobs are not judged",
    )
    args = parser.parse_args()
    return cost(args) if args.command == "cost" else storm(args)


if __name__ == "__main__":
    raise SystemExit(main())
