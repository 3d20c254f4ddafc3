"""tests/ops/promql.py finds the metric names of the expressions alerts and dashboards use."""

from __future__ import annotations

import pytest

from tests.ops.promql import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (kind) (rate(jobs_retries_total{job=~"$job"}[$__rate_interval]))',
            {"jobs_retries_total"},
        ),
        (
            "max by (job, instance, hostname) (jobs_worker_child_rss_bytes) / on (job, instance, hostname) "
            "group_left () max by (job, instance, hostname) (jobs_worker_max_memory_per_child_bytes > 0) "
            "> scalar(jobs:threshold:worker_memory_ratio)",
            {
                "jobs_worker_child_rss_bytes",
                "jobs_worker_max_memory_per_child_bytes",
                "jobs:threshold:worker_memory_ratio",
            },
        ),
        ("(sum(celery_worker_up) or vector(0)) < 1", {"celery_worker_up"}),
        (
            'histogram_quantile(0.95, sum by (kind, le) (rate(jobs_attempt_duration_seconds_bucket{kind="a b"}[5m])))',
            {"jobs_attempt_duration_seconds_bucket"},
        ),
        ("sum(rate(x_total[5m] offset 1h)) by (queue) unless y_total", {"x_total", "y_total"}),
        ("increase(jobs_workers_lost_total[10m]) > 1e3 and bool 2", {"jobs_workers_lost_total"}),
    ],
)
def test_metric_names_finds_series_not_functions_labels_or_keywords(
    expr: str, names: set[str]
) -> None:
    assert metric_names(expr) == names
