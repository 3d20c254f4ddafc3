"""The outage matrix, drilled live: each outage fires the one alert named for its cause, and resolves.

Issue 19, item 4. Marked `drill` (~4 minutes): left out of `make test`, run by
`.ci/run` and `make drills`. Real processes (tests/integration/outage_drill.py):
gunicorn, three workers on host names matrix-a, -b and -c, the scheduler,
Flower, the platform's own redis-server (the broker) and a PostgreSQL server
of its own; Debian's Prometheus scrapes them with platform/prometheus/
prometheus.yml rendered for localhost and evaluates the shipped rules; alerts
are read from its /api/v1/alerts, polled every 0.25 s for the whole module.

Time is compressed, mechanically and nowhere else: scrapes and evaluations
every SCRAPE (2 s) instead of 15 s, every alert's `for` multiplied by
FOR_SCALE (0.1: 1m -> 6 s, 2m -> 12 s; devstack.prometheus_config.write_rules)
with the expressions untouched, and JOBS_WORKER_OFFLINE_AFTER at 6 s instead
of 30 (the heartbeat timeout the worker rows wait for, kept under TargetDown's
scaled `for`, as 30 s is under its 2 minutes). The same rows at the shipped
timings are checked with promtool (tests/ops/test_outage_matrix_rules.py).

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
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.services import wait_for
from tests.integration.observing import wait_terminal
from tests.integration.outage_drill import (
    BUDGET_WINDOW,
    FIGURES,
    HOSTS,
    OFFLINE_AFTER,
    SCRAPE,
    Matrix,
    baseline,
    first_firing,
    kill,
    matrix_platform,
    target_label,
    wait_gone,
)
from tests.ops.outage_matrix import ROW, Row

# One rule evaluation after the scrape that shows the outage, plus 2 s for the
# 0.25 s polling and load.
SLACK = SCRAPE + 2.0


@pytest.fixture(scope="module")
def matrix(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    yield from matrix_platform(logroot=_logroot, workdir=tmp_path_factory.mktemp("outage-matrix"))


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
        "slowest scrape": {
            target_label(r["metric"]): round(float(r["value"][1]), 3) for r in slowest
        },
        "failed scrapes": {target_label(r["metric"]): r["value"][1] for r in failed},
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
