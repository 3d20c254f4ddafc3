"""celery-exporter counter semantics, the central worker view, and readable trace names (pure logic)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from observability import task_events
from observability.http_spans import name_span_by_route, route_template
from observability.series import failed_series
from observability.worker_monitor import WorkerMonitor, WorkerUpCollector

TASK = "unit.task_events"


def _request(queue: str) -> SimpleNamespace:
    return SimpleNamespace(delivery_info={"routing_key": queue})


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"name": TASK, "queue_name": "q1", **labels})


def test_observe_moves_one_counter_per_event_as_celery_exporter() -> None:
    host = {"hostname": "box"}
    # given the first event of a label set: every counter exists at 0
    task_events.observe("task-started", name=TASK, hostname="w@box", request=_request("q1"))
    assert _sample("celery_task_started_total", **host) == 1
    assert _sample("celery_task_succeeded_total", **host) == 0
    assert _sample("celery_task_failed_total", **host, exception="") == 0
    assert _sample("celery_task_retried_total", **host) == 0

    # when a success, a retry and a failure are sent
    task_events.observe(
        "task-succeeded", name=TASK, hostname="w@box", request=_request("q1"), runtime=0.25
    )
    task_events.observe("task-retried", name=TASK, hostname="w@box", request=_request("q1"))
    task_events.observe(
        "task-failed",
        name=TASK,
        hostname="w@box",
        request=_request("q1"),
        exception="ConnectionRefusedError('refused [dead: exhausted]')",
    )

    # then each moved its own counter once; runtime observed for the success only
    assert _sample("celery_task_succeeded_total", **host) == 1
    assert _sample("celery_task_retried_total", **host) == 1
    assert _sample("celery_task_runtime_count", **host) == 1
    assert _sample("celery_task_runtime_sum", **host) == 0.25
    # and the failure under a never-seen exception is first exposed at 0, counted right
    # after the scrape that read the 0 (so increase() sees it); a known one counts at once
    refused = {**host, "exception": "ConnectionRefusedError"}
    assert _sample("celery_task_failed_total", **refused) == 0
    first, last = failed_series.collectors()
    list(first.collect())
    list(last.collect())
    assert _sample("celery_task_failed_total", **refused) == 1
    task_events.observe(
        "task-failed",
        name=TASK,
        hostname="w@box",
        request=_request("q1"),
        exception="TimeLimitExceeded(2.0)",
    )
    assert _sample("celery_task_failed_total", **host, exception="TimeLimitExceeded") == 1


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("ValueError('x')", "ValueError"),
        ("billiard.exceptions.WorkerLostError('lost')", "WorkerLostError"),
        ("", ""),
        (None, ""),
    ],
)
def test_exception_name_is_the_class_in_front_of_the_repr(text: str | None, name: str) -> None:
    assert task_events.exception_name(text) == name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_worker_monitor_up_while_heartbeating_zero_after_then_forgotten() -> None:
    clock = Clock()
    monitor = WorkerMonitor(app=None, offline_after=30, forget_after=600, clock=clock)
    # given two nodes on host a, one on host b
    monitor.on_event({"type": "worker-online", "hostname": "w1@a"})
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w2@a", "active": 2})
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w3@b", "active": 1})
    assert monitor.snapshot() == {"a": (1, 2), "b": (1, 1)}

    # when b stops heartbeating for 31 s while a's nodes go on
    clock.now += 31
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w2@a", "active": 0})
    # then b reads 0 (not absent) and its active tasks 0
    assert monitor.snapshot() == {"a": (1, 0), "b": (0, 0)}

    # when one node of a goes offline cleanly, a stays up through its other node
    monitor.on_event({"type": "worker-offline", "hostname": "w2@a"})
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w1@a", "active": 0})
    assert monitor.snapshot()["a"] == (1, 0)

    # and after forget_after without any event, b's series is dropped
    clock.now += 600
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w1@a", "active": 0})
    assert monitor.snapshot() == {"a": (1, 0)}


def test_worker_up_collector_exports_zero_for_a_silent_worker() -> None:
    clock = Clock()
    monitor = WorkerMonitor(app=None, offline_after=30, clock=clock)
    monitor.on_event({"type": "worker-heartbeat", "hostname": "w@gone", "active": 3})
    clock.now += 45
    families = {f.name: f for f in WorkerUpCollector(monitor).collect()}
    [up] = families["celery_worker_up"].samples
    [active] = families["celery_worker_tasks_active"].samples
    assert (up.labels, up.value) == ({"hostname": "gone"}, 0)
    assert active.value == 0


@pytest.mark.parametrize(
    ("route", "template"),
    [
        ("api/jobs/$", "/api/jobs/"),
        ("api/jobs/(?P<pk>[0-9a-fA-F]{8}-?[0-9a-fA-F]{4})/cancel/$", "/api/jobs/{pk}/cancel/"),
        ("api/jobs\\.(?P<format>[a-z0-9]+)/?$", "/api/jobs.{format}/"),
        ("admin/jobs/job/<path:object_id>/change/", "/admin/jobs/job/{object_id}/change/"),
        ("(?P<a>(x|y))/b", "/{a}/b"),
        ("^api/", "/api/"),
    ],
)
def test_route_template_is_a_low_cardinality_path_template(route: str, template: str) -> None:
    assert route_template(route) == template


def test_span_named_by_method_and_route() -> None:
    class Span:
        name = "GET ^api/jobs/(?P<pk>[^/.]+)/$"
        attributes: dict[str, str] = {}

        def is_recording(self) -> bool:
            return True

        def set_attribute(self, key: str, value: str) -> None:
            self.attributes[key] = value

        def update_name(self, name: str) -> None:
            self.name = name

    span = Span()
    request = SimpleNamespace(
        method="GET", resolver_match=SimpleNamespace(route="api/jobs/(?P<pk>[^/.]+)/$")
    )
    name_span_by_route(span, request, None)
    assert span.name == "GET /api/jobs/{pk}/"
    assert span.attributes == {"http.route": "/api/jobs/{pk}/"}
