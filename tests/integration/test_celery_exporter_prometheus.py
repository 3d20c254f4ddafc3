"""celery-exporter's queries, on a real Prometheus scraping the platform with the shipped config.

Issue 7, Acceptance: "The same storm against a real Prometheus (Debian's
`prometheus`) scraping with the shipped `prometheus.yml`: queries written
the way celery-exporter's users write them (failure rate = failed /
(failed + succeeded) per task name over 5 minutes; retries per task; queue
length by queue; workers up by hostname; active tasks) return the values
the database says, under the scrape job names a celery-mixin user's default
selectors match; a rule like "task failure rate > 5% for 1m" reaches
`firing` in `/api/v1/alerts` during the storm and stays inactive in a calm
run; `celery_worker_up` for the SIGKILLed worker reads 0 within 60 s."

One platform (two workers: the main one and a "victim" on its own host
name, both consuming `default`; the queue `parked` has no consumer) and one
Prometheus for the module, scraping every second with
platform/prometheus/prometheus.yml rendered for these processes.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from devstack.processes import Process
from devstack.prometheus import PrometheusServer
from devstack.services import free_port, wait_for
from tests.integration.harness import Platform, PlatformFactory, require_postgres

STORM_POLICY = {"max_attempts": 5, "backoff_base": 0.1, "backoff_floor": 0.05, "backoff_cap": 0.5}
TASK = "jobs.run_attempt"
VICTIM_HOST = "victim-host"
SELECTORS = ('job=~"celery|celery-exporter"', 'job=~".*celery.*"')
# How celery-exporter's users write the failure ratio (per task name, 5 minutes).
FAILURE_RATIO = (
    'sum by (name) (increase(celery_task_failed_total{job="celery"}[5m]))'
    ' / (sum by (name) (increase(celery_task_failed_total{job="celery"}[5m]))'
    ' + sum by (name) (increase(celery_task_succeeded_total{job="celery"}[5m])))'
)
RULES = {
    "groups": [
        {
            "name": "celery-users",
            "rules": [
                {
                    "alert": "CeleryTaskFailureRateHigh",
                    "expr": f"({FAILURE_RATIO}) > 0.05",
                    "for": "1m",
                    "labels": {"severity": "warning"},
                    "annotations": {"summary": "More than 5% of {{ $labels.name }} failed."},
                }
            ],
        }
    ]
}


@dataclass
class Observed:
    platform: Platform
    victim: Process
    prometheus: PrometheusServer


@pytest.fixture(scope="module")
def obs(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    prometheus: PrometheusServer | None = None
    try:
        platform = factory(
            "exporter_prometheus",
            env={
                "JOBS_KIND_OVERRIDES": json.dumps({"demo.flaky": STORM_POLICY}),
                "JOBS_RETRY_BUDGET_RATIO": "100",
                "JOBS_QUEUES": "default,parked",
            },
            worker=False,
        )
        platform.worker = platform.stack.start_worker("--queues", "default", concurrency=2)
        victim_port = free_port()
        victim = platform.stack.start_worker(
            "--queues",
            "default",
            concurrency=1,
            log_name="victim",
            hostname=f"v@{VICTIM_HOST}",
            env={"JOBS_WORKER_METRICS_PORT": str(victim_port)},
        )
        rules = tmp_path_factory.mktemp("rules") / "celery-users.yml"
        rules.write_text(json.dumps(RULES))  # JSON is YAML
        address = lambda url: url.split("//", 1)[1].split("/", 1)[0]  # noqa: E731
        prometheus = PrometheusServer(
            {
                "celery": [
                    (address(platform.base_url + "/"), {"component": "web"}),
                    (address(platform.worker_metrics_url), {"component": "worker"}),
                    (f"127.0.0.1:{victim_port}", {"component": "worker"}),
                    (address(platform.scheduler_metrics_url), {"component": "scheduler"}),
                ]
            },
            rule_files=[rules],
            scrape_interval="1s",
            evaluation_interval="1s",
        ).start()
        yield Observed(platform=platform, victim=victim, prometheus=prometheus)
    finally:
        if prometheus is not None:
            prometheus.stop()
        factory.close()


def values(result: list[dict], label: str | None = None) -> dict[str, float]:
    """{value of `label` (default: the only label, or ''): value} of an instant-query result."""
    return {
        r["metric"].get(label, "") if label else next(iter(r["metric"].values()), ""): float(
            r["value"][1]
        )
        for r in result
    }


def extrapolated_increase(samples: list[list], start: float, end: float) -> float:
    """increase() of one counter series over [start, end] (unix s), as Prometheus 2.x computes it.

    `samples` are [unix time, "value"] pairs of a range query. The raw
    increase (last - first, counter resets added back) is stretched towards
    the window's edges: fully when a gap is within 1.1 average intervals,
    else by half an interval, and at the start no further than where the
    counter would have been 0 (promql/functions.go, extrapolatedRate).
    """
    times = [float(t) for t, _ in samples]
    points = [float(v) for _, v in samples]
    if len(points) < 2:
        return 0.0
    raw = points[-1] - points[0]
    raw += sum(prev for prev, cur in zip(points, points[1:], strict=False) if cur < prev)
    sampled = times[-1] - times[0]
    average = sampled / (len(points) - 1)
    to_start, to_end = times[0] - start, end - times[-1]
    if raw > 0 and points[0] >= 0:
        to_start = min(to_start, sampled * points[0] / raw)
    threshold = average * 1.1
    stretched = sampled
    stretched += to_start if to_start < threshold else average / 2
    stretched += to_end if to_end < threshold else average / 2
    return raw * stretched / sampled


def db_counts(platform: Platform) -> dict[str, int]:
    """What the database says: attempts by the Celery state they should have."""
    rows = platform.rows(
        """
        SELECT
          count(*) FILTER (WHERE a.outcome = 'succeeded'),
          count(*) FILTER (WHERE a.outcome <> 'succeeded' AND j.status = 'dead'
                           AND a.number = j.attempts_made),
          count(*) FILTER (WHERE a.outcome <> 'succeeded'
                           AND NOT (j.status = 'dead' AND a.number = j.attempts_made))
        FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id
        """
    )
    succeeded, failed, retried = rows[0]
    return {"succeeded": succeeded, "failed": failed, "retried": retried}


def alert_states(prometheus: PrometheusServer, name: str) -> set[str]:
    return {a["state"] for a in prometheus.alerts() if a["labels"].get("alertname") == name}


@pytest.mark.integration
@pytest.mark.timeout(420)
@pytest.mark.slow
def test_celery_exporter_queries_and_alerts_tell_the_storm_as_the_database_does(
    obs: Observed,
) -> None:
    platform, prometheus = obs.platform, obs.prometheus
    # given both workers up, seen under the job name celery-mixin's selectors match
    up = prometheus.wait_for_query(
        'celery_worker_up{job="celery"}', lambda r: len(values(r, "hostname")) == 2, timeout=60
    )
    hosts = values(up, "hostname")
    assert hosts == {VICTIM_HOST: 1.0, next(h for h in hosts if h != VICTIM_HOST): 1.0}, hosts
    for selector in SELECTORS:
        assert len(prometheus.query(f"celery_worker_up{{{selector}}}")) == 2, selector
    assert {r["metric"]["job"] for r in prometheus.query("celery_worker_up")} == {"celery"}

    # when a calm run (20 jobs that succeed) is scraped and the rules evaluated
    calm = [platform.submit("demo.flaky", {"fail_times": 0}) for _ in range(20)]
    assert {platform.wait_job(j)["status"] for j in calm} == {"succeeded"}
    prometheus.wait_for_query(
        'sum(celery_task_succeeded_total{job="celery"})',
        lambda r: values(r) == {"": 20.0},
        timeout=30,
    )
    prometheus.wait_evaluated_after(time.time() + 1)
    # then the failure ratio is 0 and the alert is inactive
    assert values(prometheus.query(FAILURE_RATIO)) == {TASK: 0.0}
    assert alert_states(prometheus, "CeleryTaskFailureRateHigh") == set()

    # when the storm runs: 50 jobs failing their first 3 attempts, 5 failing all 5
    flaky = [platform.submit("demo.flaky", {"fail_times": 3}) for _ in range(50)]
    doomed = [platform.submit("demo.flaky", {"fail_times": 100}) for _ in range(5)]
    statuses = [platform.wait_job(j, timeout=180)["status"] for j in flaky + doomed]
    assert (statuses.count("succeeded"), statuses.count("dead")) == (50, 5)
    expected = db_counts(platform)
    assert expected == {"succeeded": 70, "failed": 5, "retried": 170}, expected

    # then the counters under job="celery" equal the database exactly
    for state, count in expected.items():
        want = {TASK: float(count)}
        prometheus.wait_for_query(
            f'sum by (name) (celery_task_{state}_total{{job="celery"}})',
            lambda r, want=want: values(r) == want,  # type: ignore[misc]
            timeout=30,
        )
    # and the failure ratio over 5 minutes is the database's 5 / (5 + 70), and retries
    # per task over 5 minutes the database's 170, as far as increase() can tell:
    # it extrapolates each series by its own average slope, and series of
    # different ages (the failure series is born at the first death) are
    # extrapolated differently, so a user's ratio reads 0.067-0.09 here (measured;
    # the exact totals are asserted above). What matters to the alert: above 5%.
    ratio = values(prometheus.query(FAILURE_RATIO))[TASK]
    assert 5 / 75 - 0.005 <= ratio <= 5 / 75 * 1.5, ratio
    at = round(time.time(), 3)  # Prometheus keeps milliseconds
    retried = 'celery_task_retried_total{job="celery"}'
    answer = prometheus.api("query", query=f"sum by (name) (increase({retried}[5m]))", time=at)
    retries = values(answer["result"])[TASK]
    windows = prometheus.api("query", query=f"{retried}[5m]", time=at)["result"]
    # the samples behind it end at the database's 170, and the figure is theirs,
    # stretched only by Prometheus's own extrapolation
    assert sum(float(w["values"][-1][1]) for w in windows) == 170.0, windows
    assert retries == pytest.approx(
        sum(extrapolated_increase(w["values"], at - 300, at) for w in windows), rel=1e-6
    ), (retries, windows)
    assert 170 * 0.9 <= retries <= 170 * 1.5, retries
    # and the failure-rate rule goes pending now and fires once it held for 1m
    wait_for(
        lambda: alert_states(prometheus, "CeleryTaskFailureRateHigh") & {"pending", "firing"},
        timeout=30,
        what="failure-rate alert pending",
    )

    # when 7 jobs wait in a queue nobody consumes and a long job runs
    parked = [platform.submit("demo.flaky", {"fail_times": 0}, queue="parked") for _ in range(7)]
    sleeper = platform.submit("demo.sleep", {"seconds": 20, "step_seconds": 0.05})
    platform.wait_job(sleeper, statuses=frozenset({"running"}))
    queued = platform.scalar("SELECT count(*) FROM jobs_job WHERE queue = 'parked'")
    running = platform.scalar("SELECT count(*) FROM jobs_job WHERE status = 'running'")
    assert (queued, running) == (len(parked), 1)
    # then queue length by queue and active tasks say the same
    prometheus.wait_for_query(
        'sum by (queue_name) (celery_queue_length{job="celery"})',
        lambda r: values(r) == {"default": 0.0, "parked": float(queued)},
        timeout=30,
    )
    prometheus.wait_for_query(
        'sum(celery_worker_tasks_active{job="celery"})',
        lambda r: values(r) == {"": float(running)},
        timeout=30,
    )

    # when the victim worker is SIGKILLed, main process and child together
    killed_at = time.monotonic()
    for process in [psutil.Process(obs.victim.pid), *obs.victim.children()]:
        process.send_signal(signal.SIGKILL)
    # then its celery_worker_up reads 0 (not absent) within 60 s; the other stays 1
    prometheus.wait_for_query(
        "celery_worker_up",
        lambda r: values(r, "hostname").get(VICTIM_HOST) == 0.0,
        timeout=60,
    )
    assert time.monotonic() - killed_at <= 60
    assert sorted(values(prometheus.query("celery_worker_up"), "hostname").values()) == [0.0, 1.0]
    assert values(prometheus.query("celery_worker_up == 0"), "hostname") == {VICTIM_HOST: 0.0}
    worker_up_0_after = time.monotonic() - killed_at

    # and the failure-rate alert reaches firing once the ratio held for 1m
    # (awaited last: the worker checks above run during its `for`)
    alert = prometheus.wait_for_alert("CeleryTaskFailureRateHigh", state="firing", timeout=120)
    figures = {
        "database": expected,
        "failure_ratio_5m": round(ratio, 4),
        "retries_5m": round(retries, 2),
        "alert_value": alert.get("value"),
        "worker_up_0_after_seconds": round(worker_up_0_after, 1),
    }
    print("exporter figures:", json.dumps(figures))
