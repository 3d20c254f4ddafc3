"""All telemetry receivers: Celery signals and job events, each a few lines that delegate.

Imported once by JobsConfig.ready(), in every process (web, worker main and
children, scheduler). Labels stay low-cardinality: kind, queue, outcome,
reason, exception class; never a job id.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from celery import signals as celery_signals
from django.dispatch import receiver

import observability
from jobs import events
from jobs.decisions import Decision
from jobs.events import RecycleReason
from jobs.kinds.registry import kind_names
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from observability import child_attempts, exporter, memory, task_events, tracing
from observability import metrics as m
from observability.task_events import host_of

logger = logging.getLogger(__name__)

# Limits of this worker's children, captured in the main process before the
# pool forks (CLI flags included), inherited by every child.
_limits: dict[str, int] = {"max_tasks": 0, "max_memory_kb": 0}
_child: dict[str, Any] = {"tasks": 0, "in_flight": set()}
# This worker's host label (celery-exporter's host part of the node name).
_host: dict[str, str | None] = {"name": None}


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
    _host["name"] = host_of(sender)


@celery_signals.worker_ready.connect
def on_worker_ready(sender: Any = None, **_: Any) -> None:
    # The main process records hard limits and lost children: their spans are
    # spooled for its children to export (it forks for its whole life, so it
    # runs no exporter thread: docs/forking.md).
    observability.start("worker", hostname=sender.hostname)
    # Every task counter of the attempt task exists (at 0) from the start, per
    # queue consumed, so rate() and increase() over them are exact from the
    # first attempt on and a failure ratio is 0, not empty, before any failure.
    queues = [queue.name for queue in sender.app.amqp.queues.consume_from.values()]
    for queue in queues or [m.UNKNOWN]:
        task_events.observe(
            "init", name="jobs.run_attempt", hostname=sender.hostname, request=None, queue=queue
        )
    exporter.start_worker_exporter(
        hostname=host_of(sender.hostname), max_memory_kb=_limits["max_memory_kb"]
    )


@celery_signals.worker_process_init.connect
def on_child_start(**_: Any) -> None:
    # First: the baseline of the memory this child owns (jobs.memory_guard).
    memory.mark_fork()
    m.jobs_worker_child_owned_bytes.labels(_host["name"] or host_of(None)).set(memory.owned_bytes())
    _child["tasks"] = 0
    _child["in_flight"] = set()
    child_attempts.initialize(hostname=_host["name"] or host_of(None), kinds=kind_names())
    observability.start("worker-child")


@celery_signals.worker_process_shutdown.connect
def on_child_exit(**_: Any) -> None:
    tracing.shutdown()


@celery_signals.task_postrun.connect
def on_task_postrun(sender: Any = None, task: Any = None, **_: Any) -> None:
    # billiard's recycle rule (billiard/pool.py Worker.workloop): memory first,
    # then the task count. The memory check runs after this receiver and
    # counts itself (jobs.memory_startup.owned_kib); a child it recycles is not
    # counted again here when it also reached max_tasks.
    _child["tasks"] += 1
    hostname = host_of(getattr(task.request, "hostname", None) if task else None)
    owned = memory.owned_bytes()
    m.jobs_worker_child_owned_bytes.labels(_host["name"] or hostname).set(owned)
    if not (_limits["max_tasks"] and _child["tasks"] >= _limits["max_tasks"]):
        return
    limit_kb = _limits["max_memory_kb"]
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


# --- celery-exporter compatible task counters -----------------------------------
# task-started/succeeded/failed/retried/revoked/rejected move with the events the
# worker's main process sends (observability.task_events, jobs.tasks.AttemptRequest).


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


# Outcomes recorded by someone else than the attempt's own child: its span never ended.
ENDED_OUTSIDE = frozenset({AttemptOutcome.HARD_TIMEOUT, AttemptOutcome.WORKER_LOST})


@receiver(events.attempt_finished)
def on_attempt_finished(
    job: Job, attempt: Attempt, decision: Decision | None = None, **_: Any
) -> None:
    kind, queue, outcome = job.kind, job.queue, attempt.outcome
    key = (job.pk, attempt.number)
    if key in _child["in_flight"]:  # this process started it
        _child["in_flight"].discard(key)
        m.jobs_attempts_in_flight.labels(kind, queue).dec()
        child_attempts.observe(
            hostname=_host["name"] or host_of(attempt.worker_hostname),
            node=attempt.worker_hostname,
            kind=kind,
            outcome=outcome,
            job_id=job.pk,
            attempt=attempt.number,
        )
    m.jobs_attempts_total.labels(kind, queue, outcome).inc()
    if attempt.finished_at and attempt.started_at:
        seconds = (attempt.finished_at - attempt.started_at).total_seconds()
        m.jobs_attempt_duration_seconds.labels(kind, queue, outcome).observe(seconds)
    if outcome in ENDED_OUTSIDE and attempt.started_at and attempt.finished_at:
        tracing.attempt_span_ended_outside(
            traceparent=job.trace_parent,
            job_id=job.pk,
            kind=kind,
            attempt=attempt.number,
            queue=queue,
            outcome=outcome,
            started_at=attempt.started_at,
            finished_at=attempt.finished_at,
            attributes=tracing.decision_attributes(decision),
        )
    if outcome == AttemptOutcome.SOFT_TIMEOUT:
        m.jobs_time_limits_hit_total.labels(kind, queue, "soft").inc()
    elif outcome == AttemptOutcome.HARD_TIMEOUT:
        m.jobs_time_limits_hit_total.labels(kind, queue, "hard").inc()
        child_lost(hostname=attempt.worker_hostname, reason=RecycleReason.HARD_TIME_LIMIT)
    elif outcome == AttemptOutcome.WORKER_LOST:
        # Recorded once per lost attempt, by whoever noticed (the worker's main
        # process, a redelivery, the lease sweep); billiard's message names the signal.
        child_lost(
            hostname=attempt.worker_hostname,
            reason=RecycleReason.WORKER_LOST,
            signal_name=signal_of(attempt.error_message),
        )
    # The decision travels with the event (jobs.decisions): never re-derived here.
    if decision is not None and decision.retries:
        m.jobs_retries_total.labels(kind, queue, outcome).inc()
        m.jobs_retry_delay_seconds.labels(kind, queue).observe(decision.delay_seconds)
    if decision is not None:
        _count_budget(kind, queue, decision)
    if attempt.rss_before_bytes is not None and attempt.rss_after_bytes is not None:
        m.jobs_attempt_rss_growth_bytes.labels(kind).observe(
            max(0, attempt.rss_after_bytes - attempt.rss_before_bytes)
        )


def _count_budget(kind: str, queue: str, decision: Decision) -> None:
    # Over budget: exhausted counts every refusal, deferred the ones still retried
    # (the dead ones are jobs_dead_letters_total{reason="budget"}).
    if decision.budget_exhausted:
        m.jobs_retry_budget_exhausted_total.labels(kind, queue).inc()
    if decision.budget_deferred:
        m.jobs_retry_budget_deferred_total.labels(kind, queue).inc()
    if decision.budget_fallback:
        m.jobs_retry_budget_fallback_total.labels(kind, queue).inc()


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
    if reason == "budget":
        # A retry held at its start (jobs.services.attempt_start._held_by_retry_budget):
        # refused by the budget, deferred while its job waits again.
        m.jobs_retry_budget_exhausted_total.labels(job.kind, job.queue).inc()
        if job.status == JobStatus.RETRYING:
            m.jobs_retry_budget_deferred_total.labels(job.kind, job.queue).inc()


@receiver(events.message_lost)
def on_message_lost(job: Job, **_: Any) -> None:
    m.jobs_messages_lost_total.labels(job.kind, job.queue).inc()


@receiver(events.leak_suspected)
def on_leak_suspected(kind: str, resource: str, **_: Any) -> None:
    m.jobs_leak_suspected_total.labels(kind, resource).inc()
