"""The outage matrix, drilled live: each outage fires the one alert named for its cause, and resolves.

Issue 19, item 4. Marked `drill` (~4 minutes): left out of `make test`, run by
`.ci/run` and `make drills`. One platform with real processes (harness.py): gunicorn,
three workers on host names matrix-a, -b and -c (each its own /metrics), the
scheduler, Flower, the platform's own redis-server (broker) and a PostgreSQL
server of its own (devstack.postgres.PostgresServer, so it can be stopped).
Debian's Prometheus scrapes them all with platform/prometheus/prometheus.yml
rendered for localhost and evaluates the shipped rules; alerts are read from
its /api/v1/alerts, polled every 0.25 s for the whole module (`AlertLog`).

Time is compressed, mechanically and nowhere else: scrapes and evaluations
every SCRAPE (2 s) instead of 15 s, every alert's `for` multiplied by
FOR_SCALE (0.1: 1m -> 6 s, 2m -> 12 s; devstack.prometheus_config.write_rules)
with the expressions untouched, and JOBS_WORKER_OFFLINE_AFTER at 6 s instead
of 30 (the heartbeat timeout the worker rows wait for, kept under TargetDown's
scaled `for`, as 30 s is under its 2 minutes). The same rows at the shipped
timings are checked with promtool (tests/ops/test_outage_matrix_rules.py).

Scrapes time out after SCRAPE: 2 s, because on a loaded 2-core machine scrapes
of idle processes took up to 1.07 s (5-7 of 31 timed out at 1 s, measured).

Each row: wait for the baseline (every target up, three workers up, no alert
pending or firing); cause the outage; the named alert must fire within
signal delay + `for` + 2 scrape intervals (+ SLACK for one evaluation and the
polling); recover; the alert must be gone; between the outage and the
baseline's return no other alert may fire. The calm row runs three ordinary
flaky jobs against the shipped retry budget (ratio 0.2, floor 3; a 10 s
window so they share one): no alert may fire, and none of the workload's
alerts may even go pending (an `up` alert may, for a scrape that timed out
under load; counted in the figures). Figures go to
var/test-artifacts/outage_matrix.md and the output.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
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
from tests.integration.observing import FLOWER_AUTH, answers, host_port, wait_terminal
from tests.ops.outage_matrix import ROW, Row
from tests.ops.tools import require_binary

SCRAPE = 2.0
FOR_SCALE = 0.1
OFFLINE_AFTER = 6.0
# One rule evaluation after the scrape that shows the outage, plus 2 s for the 0.25 s polling and load.
SLACK = SCRAPE + 2.0
HOSTS = ("matrix-a", "matrix-b", "matrix-c")
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


@pytest.fixture(scope="module")
def matrix(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    require_binary("prometheus")
    setup_started = time.monotonic()
    workdir = tmp_path_factory.mktemp("outage-matrix")
    postgres = PostgresServer()
    try:
        postgres.start()
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"cannot start a private PostgreSQL server: {exc}", pytrace=False)
    factory = PlatformFactory(logroot=_logroot)
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
            lambda: answers(f"http://127.0.0.1:{flower_port}/healthcheck"),
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
        _write_figures()


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


def _target(labels: dict[str, str]) -> str:
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


# --- the outages: (cause, recover) ---------------------------------------------------------


def web_down(m: Matrix) -> Callable[[], None]:
    assert m.platform.web is not None
    kill(m.platform.web)
    # the backlog alerts' inputs are still served, by the scheduler
    m.prometheus.wait_for_query(
        'jobs_queue_oldest_age_seconds{component="scheduler", queue="default"}', timeout=10
    )

    def recover() -> None:
        m.platform.web = m.platform.stack.start_web(m.web_port, workers=2, threads=4, timeout=90)

    return recover


def one_worker_down(m: Matrix) -> Callable[[], None]:
    kill(m.workers[HOSTS[-1]])

    def recover() -> None:
        m.start_worker(HOSTS[-1])

    return recover


def all_workers_down(m: Matrix) -> Callable[[], None]:
    for host in HOSTS:
        kill(m.workers[host])
    return lambda: m.start_workers(HOSTS)


def scheduler_down(m: Matrix) -> Callable[[], None]:
    assert m.platform.scheduler is not None
    kill(m.platform.scheduler)

    def recover() -> None:
        m.platform.scheduler = m.platform.stack.start_scheduler()

    return recover


def broker_down(m: Matrix) -> Callable[[], None]:
    m.platform.redis.stop()

    def recover() -> None:
        m.platform.redis.start()

    return recover


def database_down(m: Matrix) -> Callable[[], None]:
    m.postgres.stop(mode="immediate")

    def recover() -> None:
        m.postgres.start()

    return recover


def target_stops_answering(m: Matrix) -> Callable[[], None]:
    # Flower hangs (SIGSTOP): connections are accepted, no scrape is answered
    m.flower.send_signal(signal.SIGSTOP)
    return lambda: m.flower.send_signal(signal.SIGCONT)


# The broker comes last: for 2 minutes after the scheduler loses the broker, the
# worker alerts hold off (workers reconnect on Celery's backoff), which would
# silence a worker row drilled within that time.
OUTAGES: dict[str, Callable[[Matrix], Callable[[], None]]] = {
    "web": web_down,
    "one_worker": one_worker_down,
    "all_workers": all_workers_down,
    "scheduler": scheduler_down,
    "database": database_down,
    "target": target_stops_answering,
    "broker": broker_down,
}
# What tells each row's alert apart, beyond its name.
LABELS = {
    "one_worker": {"hostname": HOSTS[-1]},
    "target": {"job": "flower"},
}


def signal_delay(row: Row) -> float:
    """Seconds from the outage to the series that shows it, at this module's timings."""
    return OFFLINE_AFTER if row.signal_delay else 0.0


@pytest.mark.integration
@pytest.mark.drill
@pytest.mark.timeout(240)
def test_calm_run_with_a_few_ordinary_retries_pages_nothing(matrix: Matrix) -> None:
    m = matrix
    started = baseline(m)
    # given the start of a retry-budget window, so the retries below share one
    wait_for(
        lambda: 0.5 <= time.time() % BUDGET_WINDOW <= 3,
        timeout=BUDGET_WINDOW + 1,
        interval=0.05,
        what="a budget window's start",
    )
    # when 10 jobs succeed at once and three flaky jobs each fail twice before succeeding
    ids = [m.platform.submit("demo.sleep", {"seconds": 0}) for _ in range(10)]
    ids += [m.platform.submit("demo.flaky", {"fail_times": 2}) for _ in range(3)]
    wait_terminal(m.platform, ids, timeout=90)
    statuses = m.platform.rows("SELECT status, count(*) FROM jobs_job GROUP BY status")
    assert dict(statuses) == {"succeeded": 13}, statuses
    # and the budget (3.6 retries for 3 first attempts in a window) deferred some of the 6 retries
    refused = m.prometheus.wait_for_query(
        "sum(jobs_retry_budget_exhausted_total)",
        lambda r: bool(r) and float(r[0]["value"][1]) >= 1,
        timeout=15,
    )
    # then for 10 s of evaluations after the last job, no alert is even pending
    quiet_until = time.time() + 10
    m.prometheus.wait_evaluated_after(quiet_until, timeout=30)
    seen = sorted({(name, state) for _, name, state, _ in m.log.between(started, time.time())})
    fired = sorted({name for name, state in seen if state == "firing"})
    # A scrape that timed out on this loaded machine makes an `up` alert pending for a
    # scrape or two (counted below); the workload's alerts may not even go pending.
    workload = sorted({name for name, _ in seen if name not in m.availability})
    window = f"{int(time.time() - started) + 1}s"
    slowest = m.prometheus.query(f"max_over_time(scrape_duration_seconds[{window}])")
    failed = m.prometheus.query(f"count_over_time((up == 0)[{window}:])")
    FIGURES["calm"] = {
        "retries refused by the budget": refused[0]["value"][1],
        "alerts seen": seen,
        "seconds": round(time.time() - started, 1),
        "slowest scrape": {_target(r["metric"]): round(float(r["value"][1]), 3) for r in slowest},
        "failed scrapes": {_target(r["metric"]): r["value"][1] for r in failed},
    }
    assert not fired, FIGURES["calm"]
    assert not workload, FIGURES["calm"]


@pytest.mark.integration
@pytest.mark.drill
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(OUTAGES))
def test_outage_fires_the_alert_named_for_its_cause_and_resolves(matrix: Matrix, name: str) -> None:
    m, row = matrix, ROW[name]
    assert row.alert is not None
    alert_for = m.alert_for[row.alert]
    bound = signal_delay(row) + alert_for + 2 * SCRAPE + SLACK
    baseline(m)
    # when the outage starts
    started = time.time()
    recover = OUTAGES[name](m)
    # then its alert fires within signal delay + for + two scrape intervals
    fired_at, labels = first_firing(m, row.alert, started, timeout=bound + 30)
    fired_after = fired_at - started
    for key, value in LABELS.get(name, {}).items():
        assert labels.get(key) == value, labels
    # when it is over
    recover_started = time.time()
    recover()
    recovered = time.time()
    # then the alert resolves, and the platform is back to its baseline
    resolved_at = wait_gone(m, row.alert)
    back_at = baseline(m)
    # and no other alert fired from the outage's start to the baseline's return
    firing = m.log.between(started, back_at, state="firing")
    names = sorted({alertname for _, alertname, _, _ in firing})
    instances = {json.dumps(lbl, sort_keys=True) for _, alertname, _, lbl in firing}
    FIGURES[name] = {
        "alert": row.alert,
        "for (scaled)": alert_for,
        "bound": round(bound, 1),
        "fired after": round(fired_after, 1),
        "recovery took": round(recovered - recover_started, 1),
        "resolved after recovery": round(resolved_at - recovered, 1),
        "baseline back after": round(back_at - recovered, 1),
        "firing seen": names,
        "instances": len(instances),
    }
    assert names == [row.alert], FIGURES[name]
    assert len(instances) == row.instances, sorted(instances)
    assert fired_after <= bound, FIGURES[name]


def _write_figures() -> None:
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
