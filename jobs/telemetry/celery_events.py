"""celery-exporter's task-sent and task-received counters, from Celery's signals.

task-started/succeeded/failed/retried/revoked/rejected move with the events
the worker's main process sends (observability.task_events,
jobs.tasks.AttemptRequest); Celery sends these two outside the request.
"""

from __future__ import annotations

from typing import Any

from celery import signals as celery_signals

from observability import metrics as m
from observability import task_events
from observability.task_events import host_of


@celery_signals.after_task_publish.connect
def on_publish(
    sender: str | None = None, headers: Any = None, routing_key: str | None = None, **_: Any
) -> None:
    m.celery_task_sent_total.labels(
        sender or m.UNKNOWN, host_of(None), routing_key or m.UNKNOWN
    ).inc()


@celery_signals.task_received.connect
def on_received(request: Any = None, **_: Any) -> None:
    m.celery_task_received_total.labels(
        request.name or m.UNKNOWN,
        host_of(request.hostname),
        task_events.request_queue(request) or m.UNKNOWN,
    ).inc()
