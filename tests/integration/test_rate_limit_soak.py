"""Issue 24's two-host acceptance for rate limits (soak: run on demand, `pytest -m soak -s
tests/integration/test_rate_limit_soak.py`; about 2 minutes).

Two worker hosts in network namespaces (tests/integration/multi_host.py), each with two
workers of 4 children (4 workers x 4), and one host with the web and the scheduler (tick
0.1 s, harness.BASE_ENV; its pacer releases held jobs at their reserved starts); Redis,
PostgreSQL. `webhook.deliver` limited to `rate="20/s"` POSTs to a local HTTP server that
notes the time of every request. 2,000 jobs, submitted a quarter faster than the rate: no
sliding 1-second window of the attempts' starts above 20 + burst (at the server, one more
is allowed: the HTTP call's latency jitter, see the assertion); the mean at the server
within 10% of 20/s; all 2,000 succeed with one attempt each, on both hosts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from devstack.services import wait_for
from tests.integration.harness import PlatformFactory, require_postgres
from tests.integration.multi_host import Cluster, build_cluster, start_second_workers
from tests.integration.rate_sampling import (
    mean_rate,
    start_times,
    submit_paced,
    summary,
    worst_window,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]

KIND = "webhook.deliver"
RATE = 20
BURST = 0
JOBS = 2000


class Counter(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 answering 200 to every POST and noting its time."""

    daemon_threads = True

    def __init__(self) -> None:
        self.times: list[float] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: Counter

    def do_POST(self) -> None:
        now = time.time()
        with self.server.lock:
            self.server.times.append(now)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:  # quiet: 2,000 requests
        return


@pytest.fixture(scope="module")
def counter() -> Iterator[Counter]:
    server = Counter()
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="counter")
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def cluster(_logroot: Path, counter: Counter) -> Iterator[Cluster]:
    require_postgres()
    env = {
        "JOBS_KIND_OVERRIDES": json.dumps({KIND: {"rate": f"{RATE}/s", "rate_burst": BURST}}),
        "JOBS_QUEUE_MAX_READY": str(10**6),
        "JOBS_ALLOW_PRIVATE_DESTINATIONS": "true",
    }
    factory = PlatformFactory(logroot=_logroot)
    try:
        started = time.monotonic()
        built = build_cluster(
            factory,
            "redis",
            env=env,
            worker_skews=(0, 0),
            web_hosts=1,
            worker_concurrency=4,
            extra_ports=(counter.port,),
        )
        # A second worker of 4 children on each worker host: 4 workers x 4 on two hosts.
        start_second_workers(built)
        print(f"\ncluster of 3 hosts, 4 workers x 4 up in {time.monotonic() - started:.1f} s")
        yield built
    finally:
        factory.close()


@pytest.mark.timeout(900)
def test_rate_20_per_second_across_two_hosts(cluster: Cluster, counter: Counter) -> None:
    platform = cluster.platform
    payload = {"url": f"http://127.0.0.1:{counter.port}/hook", "body": {"n": 1}}

    # when 2,000 webhook jobs are submitted, a quarter faster than the rate
    began = time.time()
    submit_paced(cluster.client(), KIND, payload, count=JOBS, per_second=1.25 * RATE)
    submitted = time.time() - began

    def done() -> bool:
        count = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE kind = %s AND status = 'succeeded'", (KIND,)
        )
        return bool(count == JOBS)

    try:
        wait_for(done, timeout=300, interval=0.2, what=f"{JOBS} succeeded")
    except TimeoutError as exc:
        rows = platform.rows("SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2")
        raise AssertionError(f"{exc}: {rows}") from None
    took = time.time() - began

    # then no sliding second above rate + burst at the server or in the starts, mean near 20/s
    with counter.lock:
        requests = sorted(counter.times)
    starts = start_times(platform, KIND)
    holds = platform.scalar("SELECT coalesce(sum(deliveries - 1), 0) FROM jobs_job")
    hosts = platform.rows(
        "SELECT split_part(worker_hostname, '@', 2), count(*) FROM jobs_attempt GROUP BY 1"
    )
    print(
        f"rate={RATE}/s burst={BURST}, {JOBS} jobs submitted in {submitted:.1f} s, all done in "
        f"{took:.1f} s\n  server: {summary(requests, burst=BURST)}\n"
        f"  starts: {summary(starts, burst=BURST)}\n  {holds} deliveries held; attempts per "
        f"host {hosts}"
    )
    assert len(requests) == JOBS
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == JOBS
    # The acceptance counts at the server. A request follows its start by a latency whose
    # spread can put 21 in a second there (20, 20, 21, 20 in 4 runs; 21 with a 25 ms
    # JOBS_RATE_DISPATCH_MARGIN): docs/flow-control.md, "At the destination". Not met yet.
    assert worst_window(starts) <= RATE + BURST
    assert worst_window(requests) <= RATE + BURST
    assert mean_rate(requests, burst=BURST) == pytest.approx(RATE, rel=0.1)
    assert len(hosts) == 2
