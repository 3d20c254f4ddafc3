"""The live outage drill's machinery: a platform, its Prometheus on the shipped rules, an alert log.

Used by tests/integration/test_outage_matrix.py (its docstring gives the
method and the timings). `matrix_platform` builds, for one module: a platform
(harness.py) on its own redis-server and a PostgreSQL server of its own
(devstack.postgres.PostgresServer, so it can be stopped), three workers on
host names matrix-a, -b and -c (each its own /metrics), Flower, and Debian's
Prometheus scraping them with platform/prometheus/prometheus.yml rendered
for localhost and the shipped rules with every `for` x FOR_SCALE; an
`AlertLog` polls its /api/v1/alerts every 0.25 s. Everything is stopped by
pid when the generator closes, and FIGURES is written to ARTIFACT.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.postgres import PostgresServer
from devstack.processes import Process
from devstack.prometheus import PrometheusServer, write_rules
from devstack.prometheus_config import duration_seconds
from devstack.services import free_port, wait_for
from tests.integration.harness import Platform, PlatformFactory
from tests.integration.observing import FLOWER_AUTH, answers, host_port
from tests.ops.tools import require_binary

# Scrapes and evaluations every SCRAPE seconds (scrapes time out after as long): on a
# loaded 2-core machine scrapes of idle processes took up to 1.07 s, and 5-7 of 31
# timed out at 1 s (measured at load 11).
SCRAPE = 2.0
FOR_SCALE = 0.1
# JOBS_WORKER_OFFLINE_AFTER: the heartbeat timeout (30 s shipped), kept under
# TargetDown's scaled `for` (12 s) as 30 s is under its 2 minutes.
OFFLINE_AFTER = 6.0
HOSTS = ("matrix-a", "matrix-b", "matrix-c")
# The retry budget's window (60 s shipped): the calm run's retries share one.
BUDGET_WINDOW = 10
ARTIFACT = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "outage_matrix.md"
FIGURES: dict[str, dict[str, Any]] = {}


@dataclass
class AlertLog:
    """Every alert state Prometheus reports, polled every 0.25 s: (unix time, name, state, labels)."""

    prometheus: PrometheusServer
    seen: list[tuple[float, str, str, dict[str, str]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> AlertLog:
        threading.Thread(target=self._run, name="alert-log", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                alerts = self.prometheus.alerts()
            except Exception:  # Prometheus busy or stopping: the next poll tells
                continue
            now = time.time()
            with self._lock:
                for alert in alerts:
                    labels = alert["labels"]
                    self.seen.append((now, labels["alertname"], alert["state"], labels))

    def between(self, start: float, end: float, *, state: str | None = None) -> list[tuple]:
        with self._lock:
            return [
                entry
                for entry in self.seen
                if start <= entry[0] <= end and (state is None or entry[2] == state)
            ]


@dataclass
class Matrix:
    """The module's processes, its Prometheus (started once the targets are) and alert log."""

    platform: Platform
    postgres: PostgresServer
    web_port: int
    worker_ports: dict[str, int]
    workers: dict[str, Process]
    flower: Process
    alert_for: dict[str, float]
    # the alerts of the outage group (jobs-availability), read from `up` and the probes
    availability: set[str] = field(default_factory=set)
    prometheus: PrometheusServer = field(init=False)
    log: AlertLog = field(init=False)

    def start_worker(self, host: str) -> Process:
        process = self.platform.stack.start_worker(
            "--queues",
            "default",
            concurrency=1,
            timeout=120,
            log_name=f"worker-{host}",
            hostname=f"w@{host}",
            env={"JOBS_WORKER_METRICS_PORT": str(self.worker_ports[host])},
        )
        self.workers[host] = process
        return process

    def start_workers(self, hosts: tuple[str, ...]) -> None:
        with ThreadPoolExecutor(len(hosts)) as pool:
            list(pool.map(self.start_worker, hosts))


def matrix_platform(*, logroot: Path, workdir: Path) -> Iterator[Matrix]:
    """Yield the drill's Matrix (use as a module-scoped fixture's body); stops everything after.

    Fails the test when Prometheus or a private PostgreSQL server cannot be had.
    """
    require_binary("prometheus")
    setup_started = time.monotonic()
    postgres = PostgresServer()
    try:
        postgres.start()
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"cannot start a private PostgreSQL server: {exc}", pytrace=False)
    factory = PlatformFactory(logroot=logroot)
    log: AlertLog | None = None
    try:
        with pytest.MonkeyPatch.context() as patch:
            # the platform's database lives on the server this module stops
            patch.setenv("TEST_POSTGRES_URL", postgres.url)
            platform = factory(
                "outage_matrix",
                worker=False,
                env={
                    "JOBS_QUEUES": "default",
                    "JOBS_WORKER_OFFLINE_AFTER": str(OFFLINE_AFTER),
                    "JOBS_METRICS_PROBE_TIMEOUT": "0.5",
                    # the shipped retry budget (ratio 0.2, floor 3), in 10 s windows
                    "JOBS_RETRY_BUDGET_FLOOR": "3",
                    "JOBS_RETRY_BUDGET_WINDOW": str(BUDGET_WINDOW),
                    "JOBS_KIND_OVERRIDES": json.dumps(
                        {
                            "demo.flaky": {
                                "max_attempts": 4,
                                "backoff_base": 0.2,
                                "backoff_floor": 0.1,
                                "backoff_cap": 0.5,
                            }
                        }
                    ),
                },
            )
        assert platform.web is not None
        web_port = int(host_port(platform.base_url).rsplit(":", 1)[1])
        flower_port = free_port()
        flower = platform.stack.start(
            "flower",
            "--address=127.0.0.1",
            f"--port={flower_port}",
            env={
                "FLOWER_BASIC_AUTH": ":".join(FLOWER_AUTH),
                "FLOWER_DB": str(workdir / "flower.db"),
                # As compose and `make up` run it (prometheus.yml scrapes /flower/metrics).
                "FLOWER_URL_PREFIX": "flower",
            },
        )
        matrix = Matrix(
            platform=platform,
            postgres=postgres,
            web_port=web_port,
            worker_ports={host: free_port() for host in HOSTS},
            workers={},
            flower=flower,
            alert_for={},
        )
        matrix.start_workers(HOSTS)
        wait_for(
            lambda: answers(f"http://127.0.0.1:{flower_port}/flower/healthcheck"),
            timeout=60,
            what="flower",
        )
        rules = write_rules(workdir / "alerts.yml", for_scale=FOR_SCALE)
        groups = yaml.safe_load(rules.read_text())["groups"]
        matrix.alert_for = {
            rule["alert"]: duration_seconds(rule.get("for", "0s"))
            for group in groups
            for rule in group["rules"]
            if "alert" in rule
        }
        matrix.availability = {
            rule["alert"]
            for group in groups
            if group["name"] == "jobs-availability"
            for rule in group["rules"]
            if "alert" in rule
        }
        prometheus = PrometheusServer(
            {
                "celery": [
                    (host_port(platform.base_url), {"component": "web"}),
                    (host_port(platform.scheduler_metrics_url), {"component": "scheduler"}),
                    *[
                        (f"127.0.0.1:{port}", {"component": "worker"})
                        for port in matrix.worker_ports.values()
                    ],
                ],
                "flower": [(f"127.0.0.1:{flower_port}", {})],
            },
            rule_files=[rules],
            scrape_interval=f"{SCRAPE:g}s",
            evaluation_interval=f"{SCRAPE:g}s",
            workdir=workdir / "prometheus",
        )
        factory.exits.callback(prometheus.stop)
        prometheus.start()
        matrix.prometheus = prometheus
        log = matrix.log = AlertLog(prometheus).start()
        FIGURES["setup"] = {"seconds": round(time.monotonic() - setup_started, 1)}
        yield matrix
    finally:
        if log is not None:
            log.stop()
        factory.close()
        postgres.destroy()
        write_figures()


def baseline(m: Matrix, *, timeout: float = 120) -> float:
    """Wait until every target is up, the three workers are up and no alert is active; return when."""
    state: dict[str, Any] = {}

    def healthy() -> bool:
        targets = m.prometheus.targets()
        state["targets"] = [(t["labels"].get("instance"), t["health"]) for t in targets]
        workers = m.prometheus.query("max by (hostname) (celery_worker_up)")
        state["workers"] = {r["metric"].get("hostname"): r["value"][1] for r in workers}
        state["alerts"] = [(a["labels"]["alertname"], a["state"]) for a in m.prometheus.alerts()]
        return (
            len(targets) == 3 + len(HOSTS)
            and all(t["health"] == "up" for t in targets)
            and state["workers"] == dict.fromkeys(HOSTS, "1")
            and not state["alerts"]
        )

    try:
        wait_for(healthy, timeout=timeout, interval=0.25, what="the baseline")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {state}\n{m.platform.log_tails(1500)}") from None
    return time.time()


def target_label(labels: dict[str, str]) -> str:
    """ "web@127.0.0.1:8000" for a target's labels."""
    return f"{labels.get('component') or labels.get('job')}@{labels.get('instance')}"


def first_firing(m: Matrix, name: str, since: float, *, timeout: float) -> tuple[float, dict]:
    """(unix time, labels) of the first poll that saw `name` firing after `since`."""

    def seen() -> tuple[float, dict] | None:
        for t, alertname, _, labels in m.log.between(since, time.time(), state="firing"):
            if alertname == name:
                return t, labels
        return None

    try:
        return wait_for(seen, timeout=timeout, interval=0.1, what=f"{name} firing")
    except TimeoutError as exc:
        active = [(a["labels"], a["state"]) for a in m.prometheus.alerts()]
        raise AssertionError(f"{exc}; active: {active}\n{m.platform.log_tails(1500)}") from None


def wait_gone(m: Matrix, name: str, *, timeout: float = 60) -> float:
    """Wait until no alert `name` is pending or firing; return when."""
    wait_for(
        lambda: all(a["labels"]["alertname"] != name for a in m.prometheus.alerts()),
        timeout=timeout,
        interval=0.1,
        what=f"{name} resolved",
    )
    return time.time()


def kill(process: Process) -> None:
    """SIGKILL a process and its process group (a worker's children, gunicorn's workers)."""
    process.stop(sig=signal.SIGKILL, timeout=5)


def write_figures() -> None:
    """Write FIGURES as a table to ARTIFACT and print it."""
    if not FIGURES:
        return
    lines = [
        "# Outage matrix (tests/integration/test_outage_matrix.py)",
        "",
        f"Scrape and evaluation every {SCRAPE:g} s; every `for` x {FOR_SCALE}; "
        f"JOBS_WORKER_OFFLINE_AFTER {OFFLINE_AFTER:g} s.",
        "",
        "| row | alert | for (s) | bound (s) | fired after (s) | resolved after recovery (s) "
        "| baseline back after (s) | firing seen |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, f in FIGURES.items():
        if name in ("calm", "setup"):
            continue
        lines.append(
            f"| {name} | {f['alert']} x{f['instances']} | {f['for (scaled)']:g} | {f['bound']} "
            f"| {f['fired after']} | {f['resolved after recovery']} | {f['baseline back after']} "
            f"| {', '.join(f['firing seen'])} |"
        )
    for name in ("calm", "setup"):
        if name in FIGURES:
            lines += ["", f"{name}: {FIGURES[name]}"]
    text = "\n".join(lines) + "\n"
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(text)
    print("\n" + text)
