"""Issue 24's two-host acceptance for rate limits (soak: run on demand, `pytest -m soak -s
tests/integration/test_rate_limit_soak.py`; about 2 minutes).

Two worker hosts in network namespaces (tests/integration/multi_host.py), each with two
workers of 4 children (4 workers x 4), and one host with the web and the scheduler (tick
0.1 s, harness.BASE_ENV; its pacer releases held jobs at their reserved starts); Redis,
PostgreSQL. `webhook.deliver` limited to `rate="20/s"` POSTs to a local HTTP server that
notes the time of every request (tests/integration/request_clock.py, a process of its own;
each host reaches it through its relay process, tests/integration/relay.py). 2,000 jobs,
submitted a quarter faster than the rate: no sliding 1-second window of the attempts'
starts, nor of the requests at the server, above 20 + burst; the mean at the server within
10% of 20/s; all 2,000 succeed with one attempt each, on both hosts. It prints the spread
of start-to-arrival times.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform, PlatformFactory, require_postgres
from tests.integration.helper_process import HelperProcess
from tests.integration.multi_host import Cluster, build_cluster, start_second_workers
from tests.integration.rate_sampling import (
    mean_rate,
    spread,
    submit_paced,
    summary,
    worst_window,
)

pytestmark = [pytest.mark.integration, pytest.mark.soak]

KIND = "webhook.deliver"
RATE = 20
BURST = 0
JOBS = 2000
WARMUP = 64  # 4 attempts per worker child, before the measured run


class Counter(HelperProcess):
    """tests/integration/request_clock.py in a process of its own on 127.0.0.1:`port`,
    noting each request's arrival in `path`; `close()` kills it by pid."""

    def __init__(self, path: Path) -> None:
        super().__init__("request_clock.py", str(path))
        if not self.ready.isdigit():
            self.close()
            raise RuntimeError(f"the request clock did not start: {self.ready!r}")
        self.path = path
        self.port = int(self.ready)

    def arrivals(self, path: str) -> list[tuple[float, str]]:
        """Every request to `path` so far: (arrival in epoch seconds, its X-Job-Id), by
        arrival."""
        lines = (line.split() for line in self.path.read_text().splitlines())
        return sorted((float(at), job_id) for at, job_id, to in lines if to == path)


@pytest.fixture(scope="module")
def counter(_logroot: Path) -> Iterator[Counter]:
    server = Counter(_logroot / "request-times.txt")
    try:
        yield server
    finally:
        server.close()


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
    url = f"http://127.0.0.1:{counter.port}"

    # given workers that have run attempts (a freshly started cluster's first second is
    # not what a running service sees): WARMUP webhooks to another path, all done
    submit_paced(cluster.client(), KIND, {"url": f"{url}/warm"}, count=WARMUP, per_second=RATE)
    _wait_succeeded(platform, WARMUP)

    # when 2,000 webhook jobs are submitted, a quarter faster than the rate
    began = time.time()
    submit_paced(cluster.client(), KIND, {"url": f"{url}/hook"}, count=JOBS, per_second=1.25 * RATE)
    submitted = time.time() - began
    _wait_succeeded(platform, WARMUP + JOBS)
    took = time.time() - began

    # then no sliding second above rate + burst at the server or in the starts, mean near 20/s
    arrivals = counter.arrivals("/hook")
    requests = [at for at, _ in arrivals]
    started = dict(
        platform.rows(
            "SELECT j.id::text, extract(epoch FROM a.started_at)::float8 FROM jobs_attempt a"
            " JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = %s AND j.payload ->> 'url' = %s",
            (KIND, f"{url}/hook"),
        )
    )
    lags = sorted(at - started[job_id] for at, job_id in arrivals if job_id in started)
    starts = sorted(started.values())
    holds = platform.scalar("SELECT coalesce(sum(deliveries - 1), 0) FROM jobs_job")
    hosts = platform.rows(
        "SELECT split_part(worker_hostname, '@', 2), count(*) FROM jobs_attempt GROUP BY 1"
    )
    print(
        f"rate={RATE}/s burst={BURST}, {JOBS} jobs submitted in {submitted:.1f} s, all done in "
        f"{took:.1f} s\n  server: {summary(requests, burst=BURST)}\n"
        f"  start to arrival (ms): {spread(lags)}\n"
        f"  starts: {summary(starts, burst=BURST)}\n  {holds} deliveries held; attempts per "
        f"host {hosts}"
    )
    assert len(requests) == JOBS
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == WARMUP + JOBS
    # The acceptance counts at the server: docs/flow-control.md, "At the destination".
    assert worst_window(starts) <= RATE + BURST
    assert worst_window(requests) <= RATE + BURST
    assert mean_rate(requests, burst=BURST) == pytest.approx(RATE, rel=0.1)
    assert len(hosts) == 2


def _wait_succeeded(platform: Platform, count: int) -> None:
    def done() -> bool:
        found = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE kind = %s AND status = 'succeeded'", (KIND,)
        )
        return bool(found == count)

    try:
        wait_for(done, timeout=300, interval=0.2, what=f"{count} succeeded")
    except TimeoutError as exc:
        rows = platform.rows("SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2")
        raise AssertionError(f"{exc}: {rows}") from None
