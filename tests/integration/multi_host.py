"""Helpers of tests/integration/test_multi_host.py: a platform spread over network-namespace hosts.

Each `Host` is a network namespace with an address of its own (devstack.netns.PublicHost,
reachable from the machine through a veth pair). Its processes run under
`ip netns exec`, where 127.0.0.1 is the namespace's own loopback: a `Forwarder` (a relay
process the test starts, tests/integration/relay.py) listens there on the ports of
PostgreSQL, Redis and RabbitMQ and relays each connection to the machine's 127.0.0.1,
so every process keeps the platform's usual URLs. Killing a host's processes closes
their connections as a dead machine's would.

A `Cluster` is one platform (database, broker, token: harness.PlatformFactory
with no process of its own) plus worker hosts and web hosts (each web host
also runs a scheduler). Everything is stopped by pid and removed by `close()`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from devstack.netns import PublicHost
from devstack.processes import Process, Stack
from devstack.services import free_port, wait_for
from tests.integration.admin_login import admin_session
from tests.integration.harness import HTTP_TIMEOUT, Platform, PlatformFactory
from tests.integration.helper_process import HelperProcess

SHIM = Path(__file__).with_name("skewed_clock")


class Forwarder(HelperProcess):
    """Listens on 127.0.0.1:`port` inside `host` for each port; relays to the machine's 127.0.0.1.

    A process of its own (tests/integration/relay.py), so the relayed traffic of every
    host does not queue behind the test's interpreter lock (with the relays as threads
    of the test, a worker's statement waited for it: tens of ms under load).
    `close()` kills it, by pid, cutting every relayed connection.
    """

    def __init__(self, host: PublicHost, ports: list[int]) -> None:
        super().__init__("relay.py", host.name, *map(str, ports))
        if self.ready != "ready":
            self.close()
            raise RuntimeError(f"the relay into {host.name} did not start: {self.ready!r}")


@dataclass
class Host:
    """One namespace host: its address, processes (a Stack launched in it) and metrics directory."""

    name: str
    netns: PublicHost
    stack: Stack
    forwarder: Forwarder
    metrics_dir: Path
    metrics_port: int
    env: dict[str, str] = field(default_factory=dict)
    worker: Process | None = None
    web: Process | None = None
    scheduler: Process | None = None
    node: str = ""

    @property
    def address(self) -> str:
        return self.netns.address

    def get(self, url: str) -> str:
        """GET `url` from inside this host (its own 127.0.0.1), the body's text."""
        return self.netns.run(lambda: requests.get(url, timeout=10).text)


@dataclass
class Cluster:
    """One platform on hosts: `workers` (worker hosts) and `webs` (web + scheduler hosts)."""

    platform: Platform
    broker: str
    workers: list[Host] = field(default_factory=list)
    webs: list[Host] = field(default_factory=list)
    clients: list[Platform] = field(default_factory=list)
    worker_concurrency: int = 2
    _turn: itertools.count = field(default_factory=itertools.count)

    # -- the API, round robin over the web hosts ---------------------------------------
    def client(self) -> Platform:
        return self.clients[next(self._turn) % len(self.clients)]

    def submit_many(self, specs: list[tuple[str, dict[str, Any]]], threads: int = 4) -> list[str]:
        """Submit every (kind, payload) through the web hosts in turn; their ids in order."""
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(lambda spec: self.client().submit(*spec), specs))

    def wait_terminal(self, count: int, *, timeout: float) -> float:
        """Wait until `count` jobs are terminal (by the database); seconds waited."""
        started = time.monotonic()
        try:
            wait_for(
                lambda: self.terminal() >= count,
                timeout=timeout,
                interval=0.25,
                what=f"{count} jobs terminal",
            )
        except TimeoutError as exc:
            stuck = self.platform.rows(
                "SELECT id, kind, status, attempts_made, deliveries, worker_losses,"
                " next_attempt_at - now(), lease_expires_at - now(), waiting_reason,"
                " published_at, enqueued_at FROM jobs_job"
                " WHERE status NOT IN ('succeeded', 'dead', 'cancelled') LIMIT 10"
            )
            by_status = self.platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY 1")
            raise AssertionError(f"{exc}: {by_status}; not terminal: {stuck}") from None
        return time.monotonic() - started

    def terminal(self) -> int:
        return int(
            self.platform.scalar(
                "SELECT count(*) FROM jobs_job WHERE status IN ('succeeded', 'dead', 'cancelled')"
            )
        )

    # -- worker hosts ------------------------------------------------------------------
    def start_worker(self, host: Host) -> Process:
        """(Re)start `host`'s worker, node name `host.node`; returns once it is ready."""
        host.worker = host.stack.start_worker(
            concurrency=self.worker_concurrency,
            timeout=180,
            log_name=f"worker-{host.name}",
            hostname=host.node,
        )
        return host.worker

    def heal(self) -> None:
        """Restart every worker host whose worker is not running."""
        for host in self.workers:
            if host.worker is None or not host.worker.alive():
                self.start_worker(host)

    def attempt_counters(self, dead: Host | None = None) -> dict[str, float]:
        """jobs_attempts_total per host: scraped from each live worker's and scheduler's /metrics;
        a host whose worker was killed (`dead`) read from its metrics files left on disk."""
        sums: dict[str, float] = {}
        for host in self.workers:
            if host is dead:
                registry = CollectorRegistry()
                # observability.multiproc: the worker's files are under worker-<node>/.
                MultiProcessCollector(registry, path=str(host.metrics_dir / f"worker-{host.node}"))
                families = list(registry.collect())
            else:
                families = list(
                    text_string_to_metric_families(
                        host.get(f"http://127.0.0.1:{host.metrics_port}/metrics")
                    )
                )
            sums[host.name] = _attempts(families)
        for host in self.webs:
            text = host.get(f"http://127.0.0.1:{host.metrics_port}/metrics")
            sums[host.name] = _attempts(list(text_string_to_metric_families(text)))
        return sums

    def close(self) -> None:
        for host in [*self.workers, *self.webs]:
            host.stack.stop(timeout=5)
            host.forwarder.close()
            host.netns.close()


def _attempts(families: list[Any]) -> float:
    return sum(
        sample.value
        for family in families
        if family.name == "jobs_attempts"
        for sample in family.samples
        if sample.name == "jobs_attempts_total"
    )


def _service_ports(env: dict[str, str]) -> list[int]:
    ports = {5432}
    for key in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        parsed = urlsplit(env[key])
        default = 5672 if parsed.scheme.startswith("amqp") else 6379
        ports.add(parsed.port or default)
    return sorted(ports)


def start_second_workers(cluster: Cluster, *, concurrency: int = 4) -> None:
    """Start a second worker of `concurrency` children on each worker host of `cluster`."""
    for host in cluster.workers:
        host.stack.start_worker(
            concurrency=concurrency,
            timeout=180,
            log_name=f"worker-{host.name}-b",
            hostname=f"{host.name}b@{host.address}",
        )


def build_cluster(
    factory: PlatformFactory,
    broker: str,
    *,
    env: dict[str, str],
    worker_skews: tuple[int, ...] = (0, 0, 0),
    web_hosts: int = 2,
    worker_concurrency: int = 2,
    extra_ports: tuple[int, ...] = (),
) -> Cluster:
    """A platform on `broker` with one worker host per entry of `worker_skews` (its clock's
    offset in seconds, the skewed_clock shim), each worker of `worker_concurrency` children,
    and `web_hosts` hosts running web + scheduler. Every host reaches the machine's
    127.0.0.1 services, and `extra_ports` (a test's own server) too, at its 127.0.0.1."""
    platform = factory(
        f"hosts_{broker[:3]}", env=env, web=False, worker=False, scheduler=False, broker=broker
    )
    cluster = Cluster(platform=platform, broker=broker, worker_concurrency=worker_concurrency)
    base = platform.stack.env
    ports = sorted({*_service_ports(base), *extra_ports})
    factory.exits.callback(cluster.close)

    def make_host(name: str, extra: dict[str, str]) -> Host:
        netns = PublicHost()
        forwarder = Forwarder(netns, ports)
        metrics_dir = platform.stack.logdir / name / "metrics"
        metrics_port = free_port()
        host_env = {
            **base,
            "JOBS_METRICS_DIR": str(metrics_dir),
            "JOBS_WORKER_METRICS_PORT": str(metrics_port),
            "JOBS_SCHEDULER_METRICS_PORT": str(metrics_port),
            **extra,
        }
        stack = Stack(
            env=host_env,
            logdir=platform.stack.logdir / name,
            launcher=["ip", "netns", "exec", netns.name],
        )
        return Host(
            name=name,
            netns=netns,
            stack=stack,
            forwarder=forwarder,
            metrics_dir=metrics_dir,
            metrics_port=metrics_port,
            env=host_env,
        )

    for index, skew in enumerate(worker_skews, start=1):
        extra = {}
        if skew:
            path = os.pathsep.join(p for p in (str(SHIM), os.environ.get("PYTHONPATH", "")) if p)
            extra = {"PYTHONPATH": path, "JOBS_TEST_CLOCK_SKEW": str(skew)}
        host = make_host(f"w{index}", extra)
        host.node = f"w{index}@{host.address}"
        cluster.workers.append(host)
    for index in range(1, web_hosts + 1):
        cluster.webs.append(make_host(f"web{index}", {}))
    allowed = ",".join(["127.0.0.1", "localhost", *(h.address for h in cluster.webs)])
    for host in cluster.webs:
        host.stack.env["DJANGO_ALLOWED_HOSTS"] = allowed

    def start_web(host: Host) -> Process:
        port = free_port()
        host.web = host.stack.start_web(
            port, workers=1, threads=4, timeout=180, address=host.address
        )
        host.scheduler = host.stack.start_scheduler(log_name=f"scheduler-{host.name}")
        client = dataclasses.replace(
            platform,
            base_url=f"http://{host.address}:{port}",
            session=requests.Session(),
            web=host.web,
            scheduler=host.scheduler,
        )
        client.session.headers["Authorization"] = f"Token {platform.token}"
        cluster.clients.append(client)
        return host.web

    with ThreadPoolExecutor(max_workers=5) as pool:
        futures = [pool.submit(cluster.start_worker, h) for h in cluster.workers]
        futures += [pool.submit(start_web, h) for h in cluster.webs]
        for future in futures:
            future.result()
    return cluster


def kill_host(host: Host) -> None:
    """SIGKILL every process of `host`'s worker (its main process and pool children)."""
    assert host.worker is not None
    host.worker.stop(sig=signal.SIGKILL, timeout=5)


def admin_overview(client: Platform) -> str:
    """The admin overview page's HTML, read by a staff user logged in through /admin/login/."""
    session = admin_session(client)
    return session.get(client.url("/admin/jobs/job/overview/"), timeout=HTTP_TIMEOUT).text


def overlap_and_after_success(platform: Platform) -> tuple[int, int, int]:
    """(overlapping attempt pairs, attempts started after a success, jobs with 2+ successes)."""
    overlapping = platform.scalar(
        "SELECT count(*) FROM jobs_attempt a JOIN jobs_attempt b"
        " ON b.job_id = a.job_id AND b.number > a.number"
        " WHERE b.started_at < coalesce(a.finished_at, 'infinity')"
    )
    after = platform.scalar(
        "SELECT count(*) FROM jobs_attempt a JOIN jobs_attempt b"
        " ON b.job_id = a.job_id AND b.number > a.number WHERE a.outcome = 'succeeded'"
    )
    doubles = platform.scalar(
        "SELECT count(*) FROM (SELECT job_id FROM jobs_attempt WHERE outcome = 'succeeded'"
        " GROUP BY job_id HAVING count(*) > 1) d"
    )
    return int(overlapping), int(after), int(doubles)


def json_env(**overrides: dict[str, Any]) -> str:
    return json.dumps(overrides)
