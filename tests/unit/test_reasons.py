"""jobs.reasons: each vocabulary one enum; its values are Prometheus label values (a contract)."""

from __future__ import annotations

from enum import StrEnum

import pytest
from prometheus_client import REGISTRY

from jobs.kinds import kind_names
from jobs.reasons import (
    AbortReason,
    DropReason,
    FuseState,
    LeakResource,
    Limit,
    PauseScope,
    RecycleReason,
    RejectReason,
    WaitingReason,
)
from jobs.telemetry import series

# The label values alerts, dashboards and the docs read: renaming one breaks them.
CONTRACT: dict[type[StrEnum], list[str]] = {
    AbortReason: ["soft_timeout", "cancelled", "memory_limit"],
    DropReason: ["live", "terminal", "stale", "budget", "paused", "concurrency", "fuse", "rate"],
    FuseState: ["closed", "open", "half_open"],
    PauseScope: ["kind", "queue"],
    WaitingReason: [
        "backoff",
        "retry_after",
        "retry_budget",
        "run_after",
        "paused",
        "backpressure",
        "no_worker",
        "concurrency_limit",
        "rate_limit",
        "fuse_open",
    ],
    RejectReason: ["invalid", "conflict", "queue_full", "too_large", "unauthenticated"],
    RecycleReason: [
        "max_tasks",
        "max_memory",
        "memory_limit",
        "hard_time_limit",
        "worker_lost",
        "aborted",
    ],
    LeakResource: ["threads", "memory"],
    Limit: ["soft", "hard"],
}


@pytest.mark.parametrize("vocabulary", list(CONTRACT), ids=lambda e: e.__name__)
def test_reasons_values_are_the_label_values_in_use(vocabulary: type[StrEnum]) -> None:
    assert [member.value for member in vocabulary] == CONTRACT[vocabulary]


@pytest.mark.parametrize(
    ("family", "label", "vocabulary"),
    [
        ("jobs_rejected_total", "reason", RejectReason),
        ("jobs_duplicate_deliveries_total", "reason", DropReason),
        ("jobs_time_limits_hit_total", "limit", Limit),
        ("jobs_memory_limits_hit_total", "limit", Limit),
        ("jobs_leak_suspected_total", "resource", LeakResource),
        ("jobs_worker_children_recycled_total", "reason", RecycleReason),
    ],
)
def test_reasons_every_member_is_a_series_at_start(
    family: str, label: str, vocabulary: type[StrEnum]
) -> None:
    # given a worker's main process whose telemetry started
    series.initialize("worker", hostname="w@reasons-host")

    # then every member of the vocabulary is a series of its family
    values = {
        sample.labels.get(label)
        for metric in REGISTRY.collect()
        if metric.name == family.removesuffix("_total")
        for sample in metric.samples
    }
    assert kind_names()
    assert set(vocabulary) <= values
