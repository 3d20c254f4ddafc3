"""Celery task states mean what Celery users think: a real Flower sees a storm as retries and failures.

Issue 7, Acceptance: "An integration test submits a storm (a kind that fails
its first 3 attempts, 50 jobs, plus 5 that always fail) and reads Flower's
own API (`/api/tasks`, `/api/workers`) with a real Flower process: RETRY,
FAILURE and SUCCESS counts equal the attempts' outcomes recorded in the
database, exactly." and "`celery_task_succeeded_total` stays flat during a
run where every attempt fails".

One platform and one Flower for the module; Flower is started before any
job so it sees every event.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from celery import Celery

from devstack.processes import Process
from devstack.services import free_port, wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform, PlatformFactory, require_postgres
from tests.integration.telemetry import scrape

FLOWER_AUTH = ("flower", "flower-pass")
# Fast retries and a budget that never defers: the storm takes seconds.
STORM_POLICY = {"max_attempts": 5, "backoff_base": 0.1, "backoff_floor": 0.05, "backoff_cap": 0.5}
# demo.sleep hits its hard limit 2 s in; two attempts, quick retry.
SLEEP_POLICY = {
    "max_attempts": 2,
    "soft_time_limit": 1,
    "hard_time_limit": 2,
    "backoff_base": 0.1,
    "backoff_floor": 0.05,
    "backoff_cap": 0.2,
}
TASK = "jobs.run_attempt"


@dataclass
class FlowerPlatform:
    platform: Platform
    flower: Process
    base: str

    def get(self, path: str, **params: Any) -> Any:
        response = requests.get(
            f"{self.base}{path}", params=params, auth=FLOWER_AUTH, timeout=HTTP_TIMEOUT
        )
        assert response.status_code == 200, response.text[:500]
        return response.json()

    def task_states(self) -> Counter[str]:
        """Flower's own view: {state: tasks} over /api/tasks (every task it knows)."""
        tasks = self.get("/api/tasks", limit=100_000)
        return Counter(task["state"] for task in tasks.values() if task["name"] == TASK)

    def worker_counters(self) -> Counter[str]:
        """Flower's Workers page counters (task-succeeded, task-failed, task-retried, ...) summed."""
        total: Counter[str] = Counter()
        for worker in self.get("/workers", json=1)["data"]:
            total.update({k: v for k, v in worker.items() if k.startswith("task-")})
        return total


@pytest.fixture(scope="module")
def fp(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlowerPlatform]:
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        platform = factory(
            "task_states",
            env={
                "JOBS_KIND_OVERRIDES": json.dumps(
                    {"demo.flaky": STORM_POLICY, "demo.sleep": SLEEP_POLICY}
                ),
                "JOBS_RETRY_BUDGET_RATIO": "100",
            },
        )
        port = free_port()
        db = tmp_path_factory.mktemp("flower") / "flower.db"
        flower = platform.stack.start(
            "flower",
            f"--port={port}",
            env={"FLOWER_BASIC_AUTH": ":".join(FLOWER_AUTH), "FLOWER_DB": str(db)},
        )
        fp = FlowerPlatform(platform=platform, flower=flower, base=f"http://127.0.0.1:{port}")

        def worker_known() -> bool:
            if not flower.alive():
                raise RuntimeError(f"flower exited early:\n{flower.log()[-3000:]}")
            try:
                return bool(fp.get("/workers", json=1)["data"])
            except (requests.RequestException, AssertionError):
                return False

        wait_for(worker_known, timeout=90, interval=0.5, what="flower to see the worker")
        yield fp
    finally:
        factory.close()


def db_states(platform: Platform) -> Counter[str]:
    """The Celery state each attempt should have, from the database alone.

    SUCCESS: a succeeded attempt. FAILURE: a job's last attempt when the job
    is dead. RETRY: any other failed attempt of a job that got another one.
    """
    rows = platform.rows(
        """
        SELECT a.outcome, j.status, a.number = j.attempts_made AS last
        FROM jobs_attempt a JOIN jobs_job j ON j.id = a.job_id
        """
    )
    states: Counter[str] = Counter()
    for outcome, status, last in rows:
        if outcome == "succeeded":
            states["SUCCESS"] += 1
        elif status == "dead" and last:
            states["FAILURE"] += 1
        else:
            states["RETRY"] += 1
    return states


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_flower_counts_of_a_storm_equal_the_attempts_in_the_database(fp: FlowerPlatform) -> None:
    platform = fp.platform
    # given a storm: 50 jobs failing their first 3 attempts, 5 that always fail (5 attempts each)
    flaky = [platform.submit("demo.flaky", {"fail_times": 3}) for _ in range(50)]
    doomed = [platform.submit("demo.flaky", {"fail_times": 100}) for _ in range(5)]

    # when every job has finished
    finished = [platform.wait_job(j, timeout=180) for j in flaky + doomed]
    assert Counter(j["status"] for j in finished) == {"succeeded": 50, "dead": 5}

    # then the database says 150 + 20 retries, 50 successes, 5 failures
    expected = db_states(platform)
    assert expected == {"RETRY": 170, "SUCCESS": 50, "FAILURE": 5}, expected

    # and Flower's /api/tasks has exactly those states, one task per attempt
    def flower_agrees() -> Counter[str] | None:
        states = fp.task_states()
        return states if states == expected else None

    try:
        wait_for(flower_agrees, timeout=60, interval=0.5, what="flower task states")
    except TimeoutError:
        raise AssertionError(f"flower {fp.task_states()} != database {expected}") from None
    # and its Workers page counts the same events: no success for a failed attempt
    counters = fp.worker_counters()
    print("flower figures:", json.dumps({"api_tasks": fp.task_states(), "workers": counters}))
    assert counters["task-succeeded"] == 50, counters
    assert counters["task-retried"] == 170, counters
    assert counters["task-failed"] == 5, counters
    # and a dead job's task page shows the attempt's own exception and the decision
    dead_task = fp.get(f"/api/task/info/{doomed[0]}:5")
    assert dead_task["state"] == "FAILURE", dead_task
    assert dead_task["exception"].startswith("RetryableError("), dead_task
    assert "dead: exhausted after attempt 5 of 5" in dead_task["exception"], dead_task
    retried = fp.get(f"/api/task/info/{doomed[0]}:1")
    assert retried["state"] == "RETRY", retried
    assert "retry: attempt 2 of 5 at " in retried["exception"], retried
    succeeded = fp.get(f"/api/task/info/{flaky[0]}:4")
    assert succeeded["state"] == "SUCCESS", succeeded
    assert "'rss_growth_bytes'" in succeeded["result"], succeeded
    # and /api/workers knows the worker, with its memory rows in MiB
    workers = fp.get("/api/workers", refresh=1)
    assert workers, workers
    stats = next(iter(workers.values()))["stats"]
    assert " MiB RSS" in stats["memory_children"], stats


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_succeeded_counter_stays_flat_while_every_attempt_fails(fp: FlowerPlatform) -> None:
    platform = fp.platform

    def totals() -> dict[str, float]:
        samples = scrape(platform.worker_metrics_url)
        return {
            name: sum(
                value
                for labels, value in samples.series(name).items()
                if dict(labels).get("name") == TASK and dict(labels).get("queue_name") == "default"
            )
            for name in (
                "celery_task_succeeded_total",
                "celery_task_failed_total",
                "celery_task_retried_total",
                "celery_task_runtime_count",
            )
        }

    before = totals()
    # when 10 jobs run 5 attempts each and every attempt fails
    jobs = [platform.submit("demo.flaky", {"fail_times": 100}) for _ in range(10)]
    assert {platform.wait_job(j, timeout=120)["status"] for j in jobs} == {"dead"}

    # then the exporter's counters moved as celery-exporter's would: 40 retries, 10 failures
    def moved() -> dict[str, float] | None:
        after = totals()
        delta = {name: after[name] - before[name] for name in after}
        return delta if delta["celery_task_failed_total"] >= 10 else None

    delta = wait_for(moved, timeout=30, interval=0.3, what="failure counters")
    assert delta == {
        "celery_task_succeeded_total": 0,
        "celery_task_failed_total": 10,
        "celery_task_retried_total": 40,
        "celery_task_runtime_count": 0,
    }, delta
    # and the failures are labelled with the attempt's exception class, as celery-exporter would
    failed = scrape(platform.worker_metrics_url).series("celery_task_failed_total")
    assert any(dict(labels).get("exception") == "RetryableError" for labels in failed), failed


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_attempts_ended_from_outside_and_dropped_deliveries_get_their_states(
    fp: FlowerPlatform,
) -> None:

    platform = fp.platform
    # given a job whose two attempts hit the hard time limit (recorded by the worker's main
    # process), a job whose child is killed 3 times (poison), and a running job cancelled
    unkillable = platform.submit("demo.sleep", {"seconds": 30, "mode": "unkillable"})
    poison = platform.submit("demo.crash", {"signal": "SIGKILL"})
    cancelled = platform.submit("demo.sleep", {"seconds": 30, "step_seconds": 0.05})
    platform.wait_job(cancelled, statuses=frozenset({"running"}), timeout=60)
    response = platform.session.post(platform.url(f"/api/jobs/{cancelled}/cancel/"), timeout=30)
    assert response.status_code == 200, response.text
    assert platform.wait_job(unkillable, timeout=120)["status"] == "dead"
    assert platform.wait_job(poison, timeout=120)["dead_reason"] == "poison"
    # and a duplicate of a finished job's message is delivered again
    done = platform.submit("demo.flaky", {"fail_times": 0})
    assert platform.wait_job(done)["status"] == "succeeded"
    client = Celery(broker=platform.redis.url)
    try:
        client.send_task("jobs.run_attempt", args=[done, 1], queue="default", task_id="dup-1")
    finally:
        client.close()

    # then Flower shows each attempt as Celery users expect
    def state(task_id: str) -> str:
        try:
            return fp.get(f"/api/task/info/{task_id}")["state"]
        except AssertionError:
            return "unknown"

    expected = {
        f"{unkillable}:1": "RETRY",  # hard limit, another attempt follows
        f"{unkillable}:2": "FAILURE",  # hard limit, job dead (exhausted)
        f"{poison}:1": "FAILURE",  # one message, lost 3 times: dead (poison)
        f"{cancelled}:1": "REVOKED",
        "dup-1": "IGNORED",  # dropped unrun: not a success
    }

    def all_seen() -> dict[str, str] | None:
        seen = {task_id: state(task_id) for task_id in expected}
        return seen if seen == expected else None

    try:
        wait_for(all_seen, timeout=60, interval=0.5, what="flower states")
    except TimeoutError:
        seen = {task_id: state(task_id) for task_id in expected}
        raise AssertionError(f"{seen} != {expected}\n{platform.log_tails()}") from None
    failed = fp.get(f"/api/task/info/{unkillable}:2")
    assert failed["exception"].startswith("TimeLimitExceeded("), failed
    lost = fp.get(f"/api/task/info/{poison}:1")
    assert lost["exception"].startswith("WorkerLostError("), lost
    assert "dead: poison" in lost["exception"], lost
