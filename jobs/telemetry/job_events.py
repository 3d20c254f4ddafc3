"""Receivers of the jobs.events domain events: submitted, rejected, attempts, completed, dropped.

Each a few lines that delegate. Labels stay low-cardinality: kind, queue,
outcome, reason; never a job id. The decision travels with
attempt_finished (jobs.decisions): never re-derived here.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from jobs import events
from jobs.decisions import Decision
from jobs.models import Attempt, AttemptOutcome, Job, JobStatus
from jobs.reasons import DropReason, Limit, RecycleReason
from jobs.telemetry import child_attempts
from jobs.telemetry.worker_events import child_lost, signal_of, state
from observability import metrics as m
from observability import tracing
from observability.task_events import host_of


@receiver(events.job_submitted)
def on_job_submitted(job: Job, **_: Any) -> None:
    m.jobs_submitted_total.labels(job.kind, job.queue).inc()


@receiver(events.job_rejected)
def on_job_rejected(kind: str, queue: str, reason: str, **_: Any) -> None:
    m.jobs_rejected_total.labels(kind or m.UNKNOWN, queue or m.UNKNOWN, reason).inc()


@receiver(events.attempt_started)
def on_attempt_started(job: Job, attempt: Attempt, **_: Any) -> None:
    m.jobs_attempts_in_flight.labels(job.kind, job.queue).inc()
    state.in_flight.add((job.pk, attempt.number))


# Outcomes recorded by someone else than the attempt's own child: its span never ended.
ENDED_OUTSIDE = frozenset({AttemptOutcome.HARD_TIMEOUT, AttemptOutcome.WORKER_LOST})


@receiver(events.attempt_finished)
def on_attempt_finished(
    job: Job, attempt: Attempt, decision: Decision | None = None, **_: Any
) -> None:
    kind, queue, outcome = job.kind, job.queue, attempt.outcome
    key = (job.pk, attempt.number)
    if key in state.in_flight:  # this process started it
        state.in_flight.discard(key)
        m.jobs_attempts_in_flight.labels(kind, queue).dec()
        child_attempts.observe(
            record=state.attempt_record,
            hostname=state.host or host_of(attempt.worker_hostname),
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
        m.jobs_time_limits_hit_total.labels(kind, queue, Limit.SOFT).inc()
    elif outcome == AttemptOutcome.HARD_TIMEOUT:
        m.jobs_time_limits_hit_total.labels(kind, queue, Limit.HARD).inc()
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
    if reason == DropReason.BUDGET:
        # A retry held at its start (jobs.engine.backends.orm.OrmBackend.hold):
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


@receiver(events.attempt_progress)
def on_attempt_progress(kind: str, queue: str, ratio: float | None, **_: Any) -> None:
    if ratio is not None:
        m.jobs_attempt_progress_ratio.labels(kind, queue).set(ratio)


@receiver(events.attempt_finished)
def on_attempt_finished_progress(job: Job, **_: Any) -> None:
    # Only a series this process wrote: 0 again, so the gauge shows running attempts alone.
    if (job.kind, job.queue) in m.jobs_attempt_progress_ratio._metrics:
        m.jobs_attempt_progress_ratio.labels(job.kind, job.queue).set(0)


@receiver(events.jobs_pruned)
def on_jobs_pruned(status: str, table: str, rows: int, **_: Any) -> None:
    m.jobs_pruned_total.labels(status, table).inc(rows)
