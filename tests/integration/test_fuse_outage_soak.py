"""Issue 24's dependency-outage acceptance on two worker hosts (soak: run on demand,
`pytest -m soak -s tests/integration/test_fuse_outage_soak.py`; about 15-20 minutes).

Two worker hosts in network namespaces (tests/integration/multi_host.py), each with two
workers of 4 children, and one web + scheduler host; Redis, PostgreSQL. `webhook.deliver`
POSTs to a local HTTP server (test_fuse.Destination: 503 while down, every request's time
kept), with bench/storm/outage.py's policy, its fuse on or off (one cluster each). A calm
phase (destination up: OUTAGE_JOBS webhook jobs with 100 demo.sleep jobs among them) gives
the other kind's median latency; then the destination refuses for OUTAGE_DOWN_SECONDS
(default 300) while the same submissions go in, then returns. Fuse on: requests after the
trip while down <= cool-downs elapsed + attempts live at the trip, 0 dead, every job
succeeded within 120 s of the return, the other kind's median <= 1.2 x calm. Fuse off:
the same figures printed; only that nothing is lost is asserted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bench.storm.outage import FUSE, OTHER_PAYLOAD, POLICY
from devstack.loopback import LoopbackHTTPServer
from devstack.services import wait_for
from tests.integration.harness import PlatformFactory, require_postgres
from tests.integration.multi_host import Cluster, build_cluster, start_second_workers
from tests.integration.test_fuse import Destination

pytestmark = [pytest.mark.integration, pytest.mark.soak]

KIND = "webhook.deliver"
OTHER = "demo.sleep"
DOWN = float(os.environ.get("OUTAGE_DOWN_SECONDS", "300"))
JOBS = int(os.environ.get("OUTAGE_JOBS", "1000"))
OTHERS = 100
AFTER_RETURN = 120.0
# Seconds between a trip's `opened_at` (read once its fuse row is locked) and its commit.
TRIP_COMMIT = 0.05
TERMINAL = ("succeeded", "dead", "cancelled")


@pytest.fixture(scope="module")
def destination() -> Iterator[tuple[Destination, int]]:
    dest = Destination()
    dest.down = False
    with LoopbackHTTPServer(0, dest.handler()) as server:
        yield dest, server.port


@pytest.fixture(params=["on", "off"])
def case(
    request: pytest.FixtureRequest, _logroot: Path, destination: tuple[Destination, int]
) -> Iterator[tuple[str, Cluster]]:
    require_postgres()
    fused = request.param == "on"
    env = {
        "JOBS_KIND_OVERRIDES": json.dumps({KIND: POLICY | (FUSE if fused else {})}),
        "JOBS_QUEUE_MAX_READY": str(10**6),
        "JOBS_ALLOW_PRIVATE_DESTINATIONS": "true",
    }
    factory = PlatformFactory(logroot=_logroot / f"fuse-{request.param}")
    try:
        built = build_cluster(
            factory,
            "redis",
            env=env,
            worker_skews=(0, 0),
            web_hosts=1,
            worker_concurrency=4,
            extra_ports=(destination[1],),
        )
        start_second_workers(built)
        yield request.param, built
    finally:
        factory.close()


def interleaved(count: int, others: int, payload: dict[str, Any]) -> list[tuple[str, dict]]:
    """`count` webhook jobs with `others` demo.sleep jobs spread among them (as the storm's
    SUBMITTER spreads them)."""
    specs: list[tuple[str, dict]] = []
    step = max(1, count // max(1, others))
    left = others
    for n in range(count):
        specs.append((KIND, payload))
        if n % step == 0 and left > 0:
            specs.append((OTHER, OTHER_PAYLOAD))
            left -= 1
    specs.extend([(OTHER, OTHER_PAYLOAD)] * left)
    return specs


def cooldowns_within(seconds: float) -> int:
    """Probes the fuse's schedule allows in `seconds` after a trip: cool-downs of
    FUSE["fuse_cooldown"], doubling after each failed probe up to FUSE["fuse_cooldown_max"]."""
    cooldown, elapsed, count = float(FUSE["fuse_cooldown"]), 0.0, 0
    while elapsed + cooldown <= seconds:
        elapsed += cooldown
        count += 1
        cooldown = min(2 * cooldown, float(FUSE["fuse_cooldown_max"]))
    return count


def other_median(cluster: Cluster, since: float, until: float) -> float:
    """Median seconds from enqueue to finish of the demo.sleep jobs enqueued in [since, until)."""
    value = cluster.platform.scalar(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM"
        " finished_at - enqueued_at)) FROM jobs_job WHERE kind = %s AND status = 'succeeded'"
        " AND enqueued_at >= to_timestamp(%s) AND enqueued_at < to_timestamp(%s)",
        (OTHER, since, until),
    )
    return float(value) if value is not None else float("nan")


def counts(cluster: Cluster, since: float) -> dict[str, int]:
    """Webhook jobs enqueued since `since`, by status."""
    rows = cluster.platform.rows(
        "SELECT status, count(*) FROM jobs_job WHERE kind = %s"
        " AND enqueued_at >= to_timestamp(%s) GROUP BY 1",
        (KIND, since),
    )
    return {str(status): int(n) for status, n in rows}


@pytest.mark.timeout(int(DOWN) + 1500)
def test_dependency_outage_two_hosts(
    case: tuple[str, Cluster], destination: tuple[Destination, int]
) -> None:
    name, cluster = case
    fused = name == "on"
    dest, port = destination
    platform = cluster.platform
    payload = {"url": f"http://127.0.0.1:{port}/hook", "connect_timeout": 1, "read_timeout": 2}
    specs = interleaved(JOBS, OTHERS, payload)

    # given a calm phase: the destination up, the same submissions, all of them done
    dest.down = False
    calm_from = time.time()
    cluster.submit_many(specs)
    wait_for(lambda: cluster.terminal() >= len(specs), timeout=600, interval=0.25, what="calm done")
    calm_until = time.time()
    calm = other_median(cluster, calm_from, calm_until)

    # when the destination refuses for DOWN seconds while the same submissions go in
    with dest.lock:
        dest.hits.clear()
    dest.down = True
    down_from = time.time()
    down_until = down_from + DOWN
    opened: float | None = None
    live_at_trip = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        submitted = pool.submit(cluster.submit_many, specs)
        if fused:
            trips = "SELECT coalesce(sum(trips), 0) FROM jobs_fuse WHERE kind = %s"
            wait_for(
                lambda: int(platform.scalar(trips, (KIND,))) >= 1,
                timeout=DOWN,
                interval=0.05,
                what="the fuse trips",
            )
            opened = float(
                platform.scalar(
                    "SELECT extract(epoch FROM min(opened_at)) FROM jobs_fuse WHERE kind = %s",
                    (KIND,),
                )
            )
            # Live at the trip: started before it took effect, that is before its commit,
            # a few ms after `opened_at` (TRIP_COMMIT): a start whose statement began in
            # between saw the fuse closed.
            live_at_trip = int(
                platform.scalar(
                    "SELECT count(*) FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id"
                    " WHERE j.kind = %s AND a.started_at <= to_timestamp(%s)"
                    " AND (a.finished_at IS NULL OR a.finished_at > to_timestamp(%s))",
                    (KIND, opened + TRIP_COMMIT, opened),
                )
            )
            around_trip = [
                round(float(r[0]), 3)
                for r in platform.rows(
                    "SELECT extract(epoch FROM a.started_at) - %s FROM jobs_attempt a"
                    " JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = %s"
                    " AND a.started_at BETWEEN to_timestamp(%s) - interval '1 s'"
                    " AND to_timestamp(%s) + interval '1 s' ORDER BY 1",
                    (opened, KIND, opened, opened),
                )
            ]
            print(f"\nattempts started within 1 s of the trip, s after it: {around_trip}")
        submitted.result(timeout=DOWN + 300)
    submit_took = time.time() - down_from
    wait_for(lambda: time.time() >= down_until, timeout=DOWN + 5, interval=0.2, what="outage")
    dead_while_down = counts(cluster, down_from).get("dead", 0)
    dest.down = False
    back = time.time()

    # then: every job terminal, or 120 s after the return
    total = 2 * len(specs)
    try:
        wait_for(
            lambda: cluster.terminal() >= total,
            timeout=AFTER_RETURN,
            interval=0.25,
            what="outage jobs terminal",
        )
    except TimeoutError:
        pass
    waited = time.time() - back
    by_status = counts(cluster, down_from)
    last = platform.scalar(
        "SELECT extract(epoch FROM max(finished_at)) FROM jobs_job WHERE kind = %s"
        " AND enqueued_at >= to_timestamp(%s)",
        (KIND, down_from),
    )
    done_after = float(last) - back if last is not None else float("nan")
    outage = other_median(cluster, down_from, time.time())
    with dest.lock:
        hits = sorted(t for t, code in dest.hits if code == 503)
    after_trip = [t for t in hits if opened is not None and opened <= t < down_until]
    allowed = cooldowns_within(down_until - opened) + live_at_trip if opened is not None else 0
    hosts = platform.rows(
        "SELECT split_part(worker_hostname, '@', 2), count(*) FROM jobs_attempt a"
        " JOIN jobs_job j ON j.id = a.job_id WHERE j.kind = %s GROUP BY 1 ORDER BY 1",
        (KIND,),
    )
    fuse = platform.rows("SELECT destination, state, trips FROM jobs_fuse")
    print(
        f"\nfuse {name}: {JOBS} webhook + {OTHERS} {OTHER} jobs, destination down {DOWN:g} s "
        f"(submitted in {submit_took:.1f} s)\n"
        f"  requests while down: {len(hits)}; after the trip "
        f"{'-' if opened is None else f'{opened - down_from:.1f} s in'}: {len(after_trip)}"
        f" (allowed {allowed}: cool-downs + {live_at_trip} live at the trip)\n"
        f"  webhook jobs by status {by_status}; dead while down {dead_while_down}; "
        f"last finished {done_after:.1f} s after the return (waited {waited:.1f} s)\n"
        f"  {OTHER} median latency calm {calm:.3f} s, during the outage {outage:.3f} s "
        f"(x{outage / calm:.2f})\n  webhook attempts per host {hosts}; fuses {fuse}\n"
        f"  load: {os.getloadavg()}"
    )

    # nothing lost, either way: every outage job counted, each terminal or still retrying
    assert sum(by_status.values()) == JOBS
    assert set(by_status) <= {*TERMINAL, "queued", "retrying", "running"}, by_status
    assert len(hosts) == 2, hosts
    if fused:
        assert len(after_trip) <= allowed, (after_trip, allowed)
        assert by_status.get("dead", 0) == 0, by_status
        assert by_status.get("succeeded", 0) == JOBS, by_status
        assert done_after <= AFTER_RETURN
        assert outage <= 1.2 * calm, (calm, outage)
