"""All telemetry receivers: Celery signals and job events, each a few lines that delegate.

Imported once by JobsConfig.ready(), in every process (web, worker main and
children, scheduler). Labels stay low-cardinality: kind, queue, outcome,
reason, exception class; never a job id.
"""

from __future__ import annotations

import logging
import re
import resource
import socket
from typing import Any

from celery import signals as celery_signals
from django.conf import settings
from django.dispatch import receiver

from jobs import events
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from observability import dumps, exporter, tracing
from observability import metrics as m

logger = logging.getLogger(__name__)

# Limits of this worker's children, captured in the main process before the
# pool forks (CLI flags included), inherited by every child.
_limits: dict[str, int] = {"max_tasks": 0, "max_memory_kb": 0}
_child: dict[str, Any] = {"tasks": 0, "in_flight": set()}


def host_of(nodename: str | None) -> str:
    """Host part of a Celery node name ("worker1@box" -> "box"), as celery-exporter labels it."""
    return (nodename or socket.gethostname()).rpartition("@")[2]


# --- worker lifecycle ----------------------------------------------------------


@celery_signals.celeryd_init.connect
def on_celeryd_init(
    sender: str, instance: Any = None, conf: Any = None, options: Any = None, **_: Any
) -> None:
    options = options or {}
    _limits["max_tasks"] = int(
        options.get("max_tasks_per_child") or conf.worker_max_tasks_per_child or 0
    )
    _limits["max_memory_kb"] = int(
        options.get("max_memory_per_child") or conf.worker_max_memory_per_child or 0
    )
    exporter.prepare_worker_dir(nodename=sender)


@celery_signals.worker_ready.connect
def on_worker_ready(sender: Any = None, **_: Any) -> None:
    exporter.start_worker_exporter(
        hostname=host_of(sender.hostname), max_memory_kb=_limits["max_memory_kb"]
    )


@celery_signals.worker_process_init.connect
def on_child_start(**_: Any) -> None:
    _child["tasks"] = 0
    _child["in_flight"] = set()
    tracing.setup(role="worker")
    # After fork, so tracemalloc counts only this child's allocations.
    frames = settings.JOBS_TRACEMALLOC_FRAMES if settings.JOBS_TRACEMALLOC else 0
    dumps.install_child(tracemalloc_frames=frames)


@celery_signals.worker_process_shutdown.connect
def on_child_exit(**_: Any) -> None:
    tracing.shutdown()


@celery_signals.task_postrun.connect
def on_task_postrun(sender: Any = None, task: Any = None, **_: Any) -> None:
    # Mirror billiard's recycle rule (billiard/pool.py Worker.workloop): peak
    # RSS over the limit first, then the task count.
    _child["tasks"] += 1
    hostname = host_of(getattr(task.request, "hostname", None) if task else None)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if _limits["max_memory_kb"] and peak_kb > _limits["max_memory_kb"]:
        m.jobs_worker_children_recycled_total.labels(hostname, "max_memory").inc()
    elif _limits["max_tasks"] and _child["tasks"] >= _limits["max_tasks"]:
        m.jobs_worker_children_recycled_total.labels(hostname, "max_tasks").inc()


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


# --- celery-exporter compatible task counters -----------------------------------


def _labels(name: str | None, hostname: str | None, queue: str | None) -> tuple[str, str, str]:
    return (name or m.UNKNOWN, host_of(hostname), queue or m.UNKNOWN)


def _request_queue(request: Any) -> str | None:
    info = getattr(request, "delivery_info", None) or {}
    return info.get("routing_key")


@celery_signals.after_task_publish.connect
def on_publish(
    sender: str | None = None, headers: Any = None, routing_key: str | None = None, **_: Any
) -> None:
    m.celery_task_sent_total.labels(*_labels(sender, None, routing_key)).inc()


@celery_signals.task_received.connect
def on_received(request: Any = None, **_: Any) -> None:
    m.celery_task_received_total.labels(
        *_labels(request.name, request.hostname, _request_queue(request))
    ).inc()


@celery_signals.task_prerun.connect
def on_prerun(task: Any = None, **_: Any) -> None:
    m.celery_task_started_total.labels(
        *_labels(task.name, task.request.hostname, _request_queue(task.request))
    ).inc()


@celery_signals.task_success.connect
def on_success(sender: Any = None, **_: Any) -> None:
    req = sender.request
    m.celery_task_succeeded_total.labels(
        *_labels(sender.name, req.hostname, _request_queue(req))
    ).inc()


# Task ids whose failure was counted. Celery 5.7 sends task_failure twice for a
# hard time limit (Request.on_failure, then Request.on_timeout): count it once.
_failed_ids: dict[str, None] = {}


@celery_signals.task_failure.connect
def on_failure(
    sender: Any = None, task_id: str | None = None, exception: BaseException | None = None, **_: Any
) -> None:
    if task_id is not None:
        if task_id in _failed_ids:
            return
        _failed_ids[task_id] = None
        if len(_failed_ids) > 1000:
            del _failed_ids[next(iter(_failed_ids))]
    req = sender.request
    labels = _labels(sender.name, req.hostname, _request_queue(req))
    m.celery_task_failed_total.labels(*labels, type(exception).__name__).inc()


# --- job events -------------------------------------------------------------


@receiver(events.job_submitted)
def on_job_submitted(job: Job, **_: Any) -> None:
    m.jobs_submitted_total.labels(job.kind, job.queue).inc()


@receiver(events.job_rejected)
def on_job_rejected(kind: str, queue: str, reason: str, **_: Any) -> None:
    m.jobs_rejected_total.labels(kind or m.UNKNOWN, queue or m.UNKNOWN, reason).inc()


@receiver(events.attempt_started)
def on_attempt_started(job: Job, attempt: Attempt, **_: Any) -> None:
    m.jobs_attempts_in_flight.labels(job.kind, job.queue).inc()
    _child["in_flight"].add((job.pk, attempt.number))


@receiver(events.attempt_finished)
def on_attempt_finished(job: Job, attempt: Attempt, **_: Any) -> None:
    kind, queue, outcome = job.kind, job.queue, attempt.outcome
    key = (job.pk, attempt.number)
    if key in _child["in_flight"]:  # this process started it
        _child["in_flight"].discard(key)
        m.jobs_attempts_in_flight.labels(kind, queue).dec()
    m.jobs_attempts_total.labels(kind, queue, outcome).inc()
    if attempt.finished_at and attempt.started_at:
        seconds = (attempt.finished_at - attempt.started_at).total_seconds()
        m.jobs_attempt_duration_seconds.labels(kind, queue, outcome).observe(seconds)
        m.celery_task_runtime.labels(
            "jobs.run_attempt", host_of(attempt.worker_hostname), queue
        ).observe(seconds)
    if outcome == AttemptOutcome.SOFT_TIMEOUT:
        m.jobs_time_limits_hit_total.labels(kind, queue, "soft").inc()
    elif outcome == AttemptOutcome.HARD_TIMEOUT:
        m.jobs_time_limits_hit_total.labels(kind, queue, "hard").inc()
        child_lost(hostname=attempt.worker_hostname, reason="hard_time_limit")
    elif outcome == AttemptOutcome.WORKER_LOST:
        # Recorded once per lost attempt, by whoever noticed (the worker's main
        # process, a redelivery, the lease sweep); billiard's message names the signal.
        child_lost(
            hostname=attempt.worker_hostname,
            reason="worker_lost",
            signal_name=signal_of(attempt.error_message),
        )
    if outcome != AttemptOutcome.SUCCEEDED and job.status in (JobStatus.RETRYING, JobStatus.QUEUED):
        m.jobs_retries_total.labels(kind, queue, outcome).inc()
        m.celery_task_retried_total.labels(
            "jobs.run_attempt", host_of(attempt.worker_hostname), queue
        ).inc()
    if attempt.rss_before_bytes is not None and attempt.rss_after_bytes is not None:
        m.jobs_attempt_rss_growth_bytes.labels(kind).observe(
            max(0, attempt.rss_after_bytes - attempt.rss_before_bytes)
        )


@receiver(events.job_completed)
def on_job_completed(job: Job, **_: Any) -> None:
    m.jobs_completed_total.labels(job.kind, job.queue, job.status).inc()
    if job.finished_at and job.created_at:
        seconds = (job.finished_at - job.created_at).total_seconds()
        m.jobs_end_to_end_seconds.labels(job.kind, job.queue, job.status).observe(seconds)
    if job.status == JobStatus.DEAD:
        m.jobs_dead_letters_total.labels(job.kind, job.queue, job.dead_reason or m.UNKNOWN).inc()


@receiver(events.delivery_dropped)
def on_delivery_dropped(job: Job, reason: str, **_: Any) -> None:
    m.jobs_duplicate_deliveries_total.labels(job.kind, job.queue, reason).inc()


@receiver(events.retry_budget_exhausted)
def on_retry_budget_exhausted(job: Job, **_: Any) -> None:
    m.jobs_retry_budget_exhausted_total.labels(job.kind, job.queue).inc()


@receiver(events.leak_suspected)
def on_leak_suspected(kind: str, resource: str, **_: Any) -> None:
    m.jobs_leak_suspected_total.labels(kind, resource).inc()
