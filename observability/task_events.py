"""celery-exporter's task counters, moved by the task events themselves.

celery-exporter (danihodovic/celery-exporter, src/exporter.py
`track_task_event`) counts each task event it receives:
task-started -> celery_task_started_total, task-succeeded ->
celery_task_succeeded_total (and observes `runtime` in
celery_task_runtime), task-failed -> celery_task_failed_total{exception}
(the class name in front of the event's exception repr), task-retried,
task-revoked, task-rejected -> their counters; on the first event of a
label set it adds 0 to the other counters, so a rate over them is 0, not
empty. Labels: name, hostname (host part of the node name), queue_name.

Here the worker's main process calls `observe()` for every event it sends
about an attempt (jobs.tasks.AttemptRequest.send_event), whether or not
events are enabled, so our endpoint moves exactly as celery-exporter would
watching the same worker. task-received is counted by the task_received
signal and task-sent by after_task_publish (jobs.telemetry.celery_events):
Celery sends those two events outside the request. Every counter of a label
set exists at 0 before it moves (jobs.telemetry.series): the first increment
of a failure under a never-seen exception name shows one scrape later.
"""

from __future__ import annotations

import re
import socket
from typing import Any

from observability import metrics as m
from observability.series import KNOWN_EXCEPTIONS, failed_series

_COUNTERS = {
    "task-started": m.celery_task_started_total,
    "task-succeeded": m.celery_task_succeeded_total,
    "task-retried": m.celery_task_retried_total,
    "task-revoked": m.celery_task_revoked_total,
    "task-rejected": m.celery_task_rejected_total,
}
_EXCEPTION_NAME = re.compile(r"^\s*([A-Za-z_][\w.]*)")
_seen: set[tuple[str, str, str]] = set()


def host_of(nodename: str | None) -> str:
    """Host part of a Celery node name ("worker1@box" -> "box"), as celery-exporter labels it."""

    return (nodename or socket.gethostname()).rpartition("@")[2]


def exception_name(exception_repr: str | None) -> str:
    """Class name of an exception from its repr ("ValueError('x')" -> "ValueError"); "" if none.

    celery-exporter's `get_exception_class_name`: a dotted name keeps its last part.
    """
    match = _EXCEPTION_NAME.match(exception_repr or "")
    return match.group(1).rpartition(".")[2] if match else ""


def request_queue(request: Any) -> str | None:
    """The queue a delivered message came from (its routing key), or None."""
    info = getattr(request, "delivery_info", None) or {}
    return info.get("routing_key")


def observe(
    event_type: str,
    *,
    name: str,
    hostname: str | None,
    request: Any,
    queue: str | None = None,
    **fields: Any,
) -> None:
    """Move the celery-exporter counter of task event `event_type` for this task.

    The queue is the request's routing key, or `queue` when there is no
    request. `fields` are the event's fields (`runtime` in seconds for
    task-succeeded, `exception` repr for task-failed). Other event types
    only make sure the label set's counters exist.
    """
    labels = (name or m.UNKNOWN, host_of(hostname), request_queue(request) or queue or m.UNKNOWN)
    if labels not in _seen:
        _seen.add(labels)
        for counter in (*_COUNTERS.values(), m.celery_task_received_total):
            counter.labels(*labels)
        for known in KNOWN_EXCEPTIONS:
            failed_series.expose((*labels, known))
    if event_type == "task-failed":
        failed_series.inc((*labels, exception_name(fields.get("exception"))))
        return
    moved = _COUNTERS.get(event_type)
    if moved is None:
        return
    moved.labels(*labels).inc()
    if event_type == "task-succeeded" and isinstance(fields.get("runtime"), int | float):
        m.celery_task_runtime.labels(*labels).observe(fields["runtime"])
