"""Helpers of tests/integration/test_multi_host.py: the mixed workload, where a job runs,
and what the killed host wrote last."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.multi_host import Cluster


def running_on(cluster: Cluster, job_id: str, timeout: float = 60) -> str:
    """The worker node running the live attempt of `job_id`, once it runs."""
    row: list[Any] = []

    def running() -> bool:
        row[:] = cluster.platform.rows(
            "SELECT worker_hostname FROM jobs_attempt WHERE job_id = %s AND finished_at IS NULL",
            (job_id,),
        )
        return bool(row)

    wait_for(running, timeout=timeout, interval=0.05, what=f"job {job_id} running")
    return str(row[0][0])


def in_ids(ids: list[str]) -> tuple[list[str]]:
    """`ids` as the one parameter of `= ANY(%s)`."""
    return (ids,)


def mixed_jobs(count: int) -> list[tuple[str, dict[str, Any]]]:
    """`count` jobs: 6 in 10 short sleeps, 3 in 10 flaky (1-2 planned failures), 1 in 10 crash."""
    rng = random.Random(21)
    specs: list[tuple[str, dict[str, Any]]] = []
    for index in range(count):
        slot = index % 10
        if slot < 6:
            seconds = rng.choice((0.05, 0.1, 0.2, 0.4))
            specs.append(("demo.sleep", {"seconds": seconds, "step_seconds": 0.05}))
        elif slot < 9:
            specs.append(("demo.flaky", {"fail_times": rng.choice((1, 2)), "sleep_seconds": 0.05}))
        else:
            specs.append(("demo.crash", {"signal": "SIGKILL"}))
    return specs


def last_rows_of(
    platform: Platform, node: str, killed_at: datetime
) -> tuple[int, list[tuple[Any, ...]]]:
    """(rows `node` finished in the 0.5 s before `killed_at`, its last 4 attempt rows)."""
    racing = int(
        platform.scalar(
            "SELECT count(*) FROM jobs_attempt WHERE worker_hostname = %s"
            " AND finished_at BETWEEN %s - interval '0.5 s' AND %s",
            (node, killed_at, killed_at),
        )
    )
    rows = platform.rows(
        "SELECT outcome, error_type, finished_at - %s FROM jobs_attempt WHERE worker_hostname = %s"
        " ORDER BY finished_at DESC LIMIT 4",
        (killed_at, node),
    )
    return racing, rows


def status_and_outcome_counts(
    platform: Platform, ids: list[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """({job status: count}, {attempt outcome: count}) of the jobs `ids`."""
    statuses = dict(
        platform.rows(
            "SELECT status, count(*) FROM jobs_job WHERE id::text = ANY(%s) GROUP BY status",
            in_ids(ids),
        )
    )
    outcomes = dict(
        platform.rows(
            "SELECT outcome, count(*) FROM jobs_attempt WHERE job_id::text = ANY(%s) GROUP BY 1",
            in_ids(ids),
        )
    )
    return statuses, outcomes
