"""The shipped alerts and dashboards against the live platform and a real Prometheus.

Issue 9, Acceptance: an end-to-end test starts the local stack and a real
Prometheus (Debian), runs a workload with retries, dead jobs and a retry
storm, and asserts: every metric name used in alerts.yml, the Grafana
dashboards and the Grafana alert files exists in the live scrape; every
dashboard panel query returns a non-empty result from that Prometheus;
RetryStorm reaches `firing` in /api/v1/alerts during the storm (test
thresholds and a short `for`), and no alert fires during a calm run.

One platform (web, worker, scheduler, Flower; real Redis and PostgreSQL),
one Prometheus (platform/prometheus/prometheus.yml rendered for localhost,
scraping and evaluating every second) and one Alertmanager (the shipped
route, its webhook pointed at a local sink) serve the whole module. The
calm run comes first (fixture `calm`), the storm after it (fixture `storm`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from devstack.prometheus import write_rules
from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT
from tests.integration.observing import (
    FLOWER_AUTH,
    Observed,
    firing,
    observed_platform,
    wait_terminal,
)
from tests.ops import grafana_queries
from tests.ops.promql import metric_names
from tests.ops.tools import PLATFORM, RULES, alert_rules

# demo.flaky dies after 3 attempts (2 retries each), quickly; demo.sleep hits
# a 1 s soft limit; demo.crash kills its child once and is dead.
POLICIES = {
    "demo.flaky": {
        "max_attempts": 3,
        "backoff_base": 0.2,
        "backoff_floor": 0.1,
        "backoff_cap": 0.5,
    },
    "demo.sleep": {"max_attempts": 1, "soft_time_limit": 1, "hard_time_limit": 3},
    "demo.crash": {"max_attempts": 1},
}
# A small retry budget, so the storm spends it: retries deferred to the next
# 10 s windows, and those that find no slot within 20 s dead with reason budget
# (a retry that starts after its window is held again, so very short windows
# would keep the storm's jobs deferring past the test's deadline).
BUDGET = {
    "JOBS_RETRY_BUDGET_WINDOW": "10",
    "JOBS_RETRY_BUDGET_RATIO": "0.5",
    "JOBS_RETRY_BUDGET_FLOOR": "5",
    "JOBS_RETRY_BUDGET_MAX_DEFERRAL": "20",
}
# Test thresholds: a storm of seconds moves a 5-minute rate less than a real
# one would, so RetryStorm's minimum rate is lowered; every `for` is 2 s, except
# the outage alerts' (read from `up`: a scrape timing out at 1 s on a loaded
# machine is no outage; they are drilled in test_outage_matrix.py), which keep theirs.
TEST_THRESHOLDS = {"retry_storm_min_rate": 0.05}
TEST_FOR = "2s"
KEEP_FOR = ("jobs-availability",)
# Succeeding jobs run as another kind than the storm's: RetryStorm's ratio is per kind,
# and demo.flaky's own successes would dilute the storm's (each failing job wants a retry
# after 2 of its 3 attempts, or after every attempt the retry budget refuses for good).
CALM_KIND = "demo.sleep"
CALM_SECONDS = 6
STORM_JOBS = 20
# Grafana's interval variables, as a 1 s scrape interval makes them.
GRAFANA_INTERVALS = {"$__rate_interval": "2m", "$__interval": "15s", "$__range": "10m"}


@pytest.fixture(scope="module")
def observed(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    """This module's platform, Flower, Prometheus (test thresholds) and Alertmanager."""
    workdir = tmp_path_factory.mktemp("observe")
    rules = write_rules(
        workdir / "alerts.yml",
        thresholds=TEST_THRESHOLDS,
        alert_for=TEST_FOR,
        keep_for_in=KEEP_FOR,
    )
    env = {
        "JOBS_KIND_OVERRIDES": json.dumps(POLICIES),
        "JOBS_QUEUES": "default,tiny",
        "JOBS_QUEUE_MAX_READY_OVERRIDES": "tiny=0",
        # A periodic schedule, so the schedule series the alerts read are scraped (and the
        # calm run shows its ticks page nothing).
        "JOBS_SCHEDULES": json.dumps(
            {"observe-every10": {"kind": "demo.flaky", "payload": {"fail_times": 0}, "every": 10}}
        ),
        **BUDGET,
    }
    yield from observed_platform(
        logroot=_logroot, workdir=workdir, name="observe", env=env, rules=rules
    )


@pytest.fixture(scope="module")
def calm(observed: Observed) -> list[dict[str, Any]]:
    """Run only succeeding jobs; return every alert seen firing meanwhile (should be none)."""
    prometheus, platform = observed.prometheus, observed.platform
    # given every app target scraped and a worker seen up
    prometheus.wait_for_query('sum(up{job="celery", component=~"web|worker"}) == 2', timeout=60)
    prometheus.wait_for_query("sum(celery_worker_up) >= 1", timeout=60)
    prometheus.wait_evaluated_after(time.time() + 1, timeout=30)
    seen: list[dict[str, Any]] = []
    # when a calm workload runs, and for CALM_SECONDS of evaluations after it
    ids = [platform.submit(CALM_KIND, {"seconds": 0}) for _ in range(10)]
    wait_terminal(platform, ids, timeout=60)
    quiet_until = time.time() + CALM_SECONDS

    def watched() -> bool:
        seen.extend(firing(prometheus))
        return prometheus.evaluated_after(quiet_until)

    wait_for(watched, timeout=CALM_SECONDS + 30, interval=0.25, what="calm window")
    return seen


@pytest.fixture(scope="module")
def storm(observed: Observed, calm: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the storm workload; return RetryStorm's firing alert (None if it never fired)."""
    platform, prometheus = observed.platform, observed.prometheus
    # A running attempt cancelled (Celery REVOKED) ...
    cancelled = platform.submit("demo.flaky", {"fail_times": 0, "sleep_seconds": 30})
    platform.wait_job(cancelled, statuses=frozenset({"running"}), timeout=30)
    response = platform.session.post(
        platform.url(f"/api/jobs/{cancelled}/cancel/"), timeout=HTTP_TIMEOUT
    )
    assert response.status_code in (200, 202), response.text
    # ... then the storm, dead jobs, a time limit, a lost child, leaks, refusals.
    ids = [cancelled]
    ids += [platform.submit("demo.flaky", {"fail_times": 10}) for _ in range(STORM_JOBS)]
    ids += [platform.submit(CALM_KIND, {"seconds": 0}) for _ in range(3)]
    ids.append(platform.submit("demo.sleep", {"seconds": 5, "step_seconds": 0.1}))
    ids.append(platform.submit("demo.crash", {"signal": "SIGKILL"}))
    ids += [platform.submit("demo.leak_thread", {"seconds": 3}) for _ in range(2)]
    refused = [
        platform.post_job({"kind": "demo.flaky", "queue": "tiny", "payload": {"fail_times": 0}})
        for _ in range(3)
    ]
    assert {r.status_code for r in refused} == {503}, [r.text for r in refused]
    try:
        alert = prometheus.wait_for_alert("RetryStorm", state="firing", timeout=90)
    except TimeoutError:
        alert = None
    wait_terminal(platform, ids, timeout=180)
    return {"alert": alert, "ids": ids}


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_no_alert_fires_during_a_calm_run(calm: list[dict[str, Any]]) -> None:
    names = sorted({alert["labels"]["alertname"] for alert in calm})
    assert not names, f"alerts fired during the calm run: {names}\n{calm[:3]}"


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_retry_storm_fires_in_prometheus_and_reaches_the_alertmanager_webhook(
    observed: Observed, storm: dict[str, Any]
) -> None:
    alert = storm["alert"]
    assert alert is not None, f"RetryStorm never fired; alerts: {observed.prometheus.alerts()}"
    assert alert["labels"]["kind"] == "demo.flaky"
    assert alert["labels"]["queue"] == "default"
    assert float(alert["value"]) > 0.5
    # The shipped Alertmanager route delivers it to the (loopback) webhook.
    delivered = observed.sink.wait_for_alert("RetryStorm", timeout=60)
    assert delivered["annotations"]["runbook_url"] == "platform/README.md#retrystorm"
    assert delivered["labels"]["severity"] == "warning"


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_every_metric_name_of_alerts_dashboards_and_grafana_alerts_is_in_the_live_scrape(
    observed: Observed, storm: dict[str, Any]
) -> None:
    prometheus = observed.prometheus
    used: dict[str, set[str]] = {}
    for rule in alert_rules(RULES):
        for name in metric_names(rule["expr"]):
            used.setdefault(name, set()).add(f"alerts.yml {rule['alert']}")
    for where, expr in grafana_queries.dashboard_queries() + grafana_queries.alert_queries():
        for name in metric_names(expr):
            used.setdefault(name, set()).add(where)
    wanted = {name for name in used if not name.startswith("jobs:threshold:")}
    assert len(wanted) > 20, wanted
    missing: set[str] = set()

    def all_present() -> bool:
        missing.clear()
        missing.update(wanted - prometheus.metric_names())
        return not missing

    try:
        wait_for(all_present, timeout=30, interval=0.5, what="every used metric name")
    except TimeoutError:
        pass
    assert not missing, {name: sorted(used[name]) for name in sorted(missing)}


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_every_dashboard_panel_query_returns_data_from_prometheus(
    observed: Observed, storm: dict[str, Any]
) -> None:
    prometheus = observed.prometheus
    empty = []
    for where, expr in grafana_queries.dashboard_queries():
        query = grafana_queries.substitute(expr, GRAFANA_INTERVALS)
        try:
            prometheus.wait_for_query(query, timeout=10, interval=0.5)
        except TimeoutError:
            empty.append(f"{where}: {query}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_the_keda_prometheus_query_returns_one_element_from_prometheus(
    observed: Observed, storm: dict[str, Any]
) -> None:
    # KEDA's Prometheus scaler needs a single-element answer (platform/keda/, docs/scaling.md)
    scaled = yaml.safe_load((PLATFORM / "keda" / "scaledobject-prometheus.yaml").read_text())
    (trigger,) = scaled["spec"]["triggers"]
    result = observed.prometheus.wait_for_query(trigger["metadata"]["query"], timeout=30)
    assert len(result) == 1, result
    assert float(result[0]["value"][1]) >= 0


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_grafana_alert_queries_are_valid_promql_on_the_live_prometheus(
    observed: Observed, storm: dict[str, Any]
) -> None:
    for where, expr in grafana_queries.alert_queries():
        observed.prometheus.query(expr)  # raises PrometheusError for invalid PromQL
        assert where


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_prometheus_scrapes_every_target_of_the_shipped_config(observed: Observed) -> None:
    # given the shipped jobs rendered for this platform
    def healthy() -> bool:
        return all(t["health"] == "up" for t in observed.prometheus.targets())

    try:
        wait_for(healthy, timeout=30, interval=0.5, what="every target up")
    except TimeoutError:
        pass
    # then web, worker, scheduler (job celery) and Flower (job flower) are all up
    health = {
        (t["labels"]["job"], t["labels"].get("component", ""), t["health"], t["lastError"])
        for t in observed.prometheus.targets()
    }
    assert {(job, component, h) for job, component, h, _ in health} == {
        ("celery", "web", "up"),
        ("celery", "worker", "up"),
        ("celery", "scheduler", "up"),
        ("flower", "", "up"),
    }, health


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_flower_serves_metrics_without_credentials_and_its_ui_with_them(observed: Observed) -> None:
    # prometheus.yml scrapes Flower without basic auth: Flower 2.x does not ask
    # for it on /metrics. If an upgrade starts asking, this fails first.
    metrics = requests.get(f"{observed.flower_url}/metrics", timeout=HTTP_TIMEOUT)
    assert metrics.status_code == 200
    assert "# TYPE flower_events" in metrics.text, metrics.text[-500:]
    assert requests.get(f"{observed.flower_url}/", timeout=HTTP_TIMEOUT).status_code == 401
    authorised = requests.get(f"{observed.flower_url}/", auth=FLOWER_AUTH, timeout=HTTP_TIMEOUT)
    assert authorised.status_code == 200
