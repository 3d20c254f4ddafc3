"""Receivers of a worker's lifecycle: start, children forked and recycled, lost, over a memory limit.

Celery signals (celeryd_init, worker_ready, worker_process_init,
worker_process_shutdown, task_postrun) and the jobs.events child_recycling
and memory_limit_hit; each a few lines that delegate. Labels: hostname
(celery-exporter's host part), reason, kind, queue, limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from celery import signals as celery_signals
from django.dispatch import receiver

from jobs import events, task_names
from jobs.kinds.registry import kind_names
from jobs.reasons import RecycleReason
from jobs.telemetry import child_attempts, exporters, process
from observability import exporter, memory, task_events, tracing
from observability import metrics as m
from observability.task_events import host_of


@dataclass
class WorkerProcess:
    """This worker process's telemetry state (its main process, inherited by each child).

    `max_tasks`, `max_memory_kb`: the children's limits, captured in the main
    process before the pool forks (CLI flags included); `host`: this worker's
    host label; `tasks`: attempts this child ran; `in_flight`: (job id,
    attempt number) started in this process and not yet finished.
    """

    max_tasks: int = 0
    max_memory_kb: int = 0
    host: str | None = None
    tasks: int = 0
    in_flight: set[tuple[Any, int]] = field(default_factory=set)

    @property
    def host_label(self) -> str:
        return self.host or host_of(None)


state = WorkerProcess()


@celery_signals.celeryd_init.connect
def on_celeryd_init(
    sender: str, instance: Any = None, conf: Any = None, options: Any = None, **_: Any
) -> None:
    options = options or {}
    state.max_tasks = int(
        options.get("max_tasks_per_child") or conf.worker_max_tasks_per_child or 0
    )
    state.max_memory_kb = int(
        options.get("max_memory_per_child") or conf.worker_max_memory_per_child or 0
    )
    exporter.prepare_worker_dir(nodename=sender)
    state.host = host_of(sender)


@celery_signals.worker_ready.connect
def on_worker_ready(sender: Any = None, **_: Any) -> None:
    # The main process records hard limits and lost children: their spans are
    # spooled for its children to export (it forks for its whole life, so it
    # runs no exporter thread: docs/forking.md).
    process.start("worker", hostname=sender.hostname)
    # Every task counter of the attempt task exists (at 0) from the start, per
    # queue consumed, so rate() and increase() over them are exact from the
    # first attempt on and a failure ratio is 0, not empty, before any failure.
    queues = [queue.name for queue in sender.app.amqp.queues.consume_from.values()]
    for queue in queues or [m.UNKNOWN]:
        task_events.observe(
            "init", name=task_names.RUN_ATTEMPT, hostname=sender.hostname, request=None, queue=queue
        )
    exporters.start_worker_exporter(
        hostname=host_of(sender.hostname), max_memory_kb=state.max_memory_kb
    )


@celery_signals.worker_process_init.connect
def on_child_start(**_: Any) -> None:
    # First: the baseline of the memory this child owns (jobs.memory_guard).
    memory.mark_fork()
    m.jobs_worker_child_owned_bytes.labels(state.host_label).set(memory.owned_bytes())
    state.tasks = 0
    state.in_flight = set()
    child_attempts.initialize(hostname=state.host_label, kinds=kind_names())
    process.start("worker-child")


@celery_signals.worker_process_shutdown.connect
def on_child_exit(**_: Any) -> None:
    tracing.shutdown()


@celery_signals.task_postrun.connect
def on_task_postrun(sender: Any = None, task: Any = None, **_: Any) -> None:
    # billiard's recycle rule (billiard/pool.py Worker.workloop): memory first,
    # then the task count. The memory check runs after this receiver and
    # counts itself (jobs.memory_startup.owned_kib); a child it recycles is not
    # counted again here when it also reached max_tasks.
    state.tasks += 1
    hostname = host_of(getattr(task.request, "hostname", None) if task else None)
    owned = memory.owned_bytes()
    m.jobs_worker_child_owned_bytes.labels(state.host or hostname).set(owned)
    if not (state.max_tasks and state.tasks >= state.max_tasks):
        return
    limit_kb = state.max_memory_kb
    if limit_kb and owned // 1024 > limit_kb:
        return
    m.jobs_worker_children_recycled_total.labels(hostname, RecycleReason.MAX_TASKS).inc()


@receiver(events.child_recycling)
def on_child_recycling(hostname: str, reason: str, **_: Any) -> None:
    m.jobs_worker_children_recycled_total.labels(host_of(hostname), reason).inc()


@receiver(events.memory_limit_hit)
def on_memory_limit_hit(kind: str, queue: str, limit: str, **_: Any) -> None:
    m.jobs_memory_limits_hit_total.labels(kind, queue, limit).inc()


def child_lost(*, hostname: str, reason: str, signal_name: str | None = None) -> None:
    """Count a child replaced by the main process (hard time limit, worker lost)."""
    m.jobs_worker_children_recycled_total.labels(host_of(hostname), reason).inc()
    if signal_name is not None:
        m.jobs_workers_lost_total.labels(host_of(hostname), signal_name).inc()


def signal_of(exc: BaseException | str) -> str:
    """ "SIGKILL" from "Worker exited prematurely: signal 9 (SIGKILL)", else "exitcode N" or "unknown"."""
    text = str(exc)
    match = re.search(r"\((SIG[A-Z0-9]+)\)", text)
    if match:
        return match.group(1)
    match = re.search(r"exitcode (\d+)", text)
    return f"exitcode {match.group(1)}" if match else "unknown"
