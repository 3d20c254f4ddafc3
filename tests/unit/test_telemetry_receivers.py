"""jobs.telemetry receivers called directly: each moves its samples in the registry (PostHog's habit).

Unsaved rows stand in for the job and attempt (receivers read fields only).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone
from prometheus_client import REGISTRY

from jobs.decisions import Action, Decision
from jobs.models import Attempt, AttemptOutcome, DeadReason, Job, JobStatus
from jobs.reasons import DropReason, LeakResource, Limit, RecycleReason, RejectReason
from jobs.telemetry import job_events, worker_events
from observability import metrics as m

KIND, QUEUE = "demo.flaky", "receivers-queue"


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _job(**fields: object) -> Job:
    return Job(id=uuid.uuid4(), kind=KIND, queue=QUEUE, **fields)


def test_receivers_job_submitted_and_rejected_count_by_kind_and_reason() -> None:
    unknown = {"kind": m.UNKNOWN, "queue": m.UNKNOWN, "reason": "queue_full"}
    before = _sample("jobs_submitted_total", kind=KIND, queue=QUEUE)
    rejected = _sample("jobs_rejected_total", **unknown)

    job_events.on_job_submitted(job=_job())
    job_events.on_job_rejected(kind="", queue="", reason=RejectReason.QUEUE_FULL)

    assert _sample("jobs_submitted_total", kind=KIND, queue=QUEUE) == before + 1
    assert _sample("jobs_rejected_total", **unknown) == rejected + 1


def test_receivers_attempt_finished_counts_outcome_retry_and_delay_from_the_decision() -> None:
    # given a failed attempt whose decision is a retry in 4 s
    now = timezone.now()
    job = _job(status=JobStatus.RETRYING)
    attempt = Attempt(
        job=job,
        number=1,
        outcome=AttemptOutcome.ERROR,
        started_at=now - timedelta(seconds=2),
        finished_at=now,
        worker_hostname="w@receivers",
    )
    decision = Decision(action=Action.RETRY, delay_seconds=4.0)
    labels = {"kind": KIND, "queue": QUEUE, "outcome": "error"}
    retry = {"kind": KIND, "queue": QUEUE, "reason": "error"}
    attempts, retries = (
        _sample("jobs_attempts_total", **labels),
        _sample("jobs_retries_total", **retry),
    )

    # when the receiver gets the event
    job_events.on_attempt_finished(job=job, attempt=attempt, decision=decision)

    # then the attempt, the retry and its delay are counted, nothing re-derived
    assert _sample("jobs_attempts_total", **labels) == attempts + 1
    assert _sample("jobs_retries_total", **retry) == retries + 1
    assert _sample("jobs_retry_delay_seconds_sum", kind=KIND, queue=QUEUE) >= 4.0


def test_receivers_job_completed_dead_counts_a_dead_letter_by_reason() -> None:
    now = timezone.now()
    job = _job(
        status=JobStatus.DEAD,
        dead_reason=DeadReason.EXHAUSTED,
        created_at=now - timedelta(seconds=5),
        finished_at=now,
    )
    labels = {"kind": KIND, "queue": QUEUE, "reason": "exhausted"}
    before = _sample("jobs_dead_letters_total", **labels)

    job_events.on_job_completed(job=job)

    assert _sample("jobs_dead_letters_total", **labels) == before + 1


def test_receivers_delivery_dropped_by_the_budget_counts_exhausted_and_deferred() -> None:
    job = _job(status=JobStatus.RETRYING)
    exhausted = _sample("jobs_retry_budget_exhausted_total", kind=KIND, queue=QUEUE)
    deferred = _sample("jobs_retry_budget_deferred_total", kind=KIND, queue=QUEUE)

    job_events.on_delivery_dropped(job=job, reason=DropReason.BUDGET)

    assert _sample("jobs_retry_budget_exhausted_total", kind=KIND, queue=QUEUE) == exhausted + 1
    assert _sample("jobs_retry_budget_deferred_total", kind=KIND, queue=QUEUE) == deferred + 1
    dropped = {"kind": KIND, "queue": QUEUE, "reason": "budget"}
    assert _sample("jobs_duplicate_deliveries_total", **dropped) >= 1


def test_receivers_worker_events_count_leaks_limits_and_recycles() -> None:
    leak = {"kind": KIND, "resource": "threads"}
    limit = {"kind": KIND, "queue": QUEUE, "limit": "hard"}
    recycled = {"hostname": "receivers-host", "reason": "max_memory"}
    before = (
        _sample("jobs_leak_suspected_total", **leak),
        _sample("jobs_memory_limits_hit_total", **limit),
        _sample("jobs_worker_children_recycled_total", **recycled),
    )

    job_events.on_leak_suspected(kind=KIND, resource=LeakResource.THREADS)
    worker_events.on_memory_limit_hit(kind=KIND, queue=QUEUE, limit=Limit.HARD)
    worker_events.on_child_recycling(hostname="w@receivers-host", reason=RecycleReason.MAX_MEMORY)

    assert (
        _sample("jobs_leak_suspected_total", **leak),
        _sample("jobs_memory_limits_hit_total", **limit),
        _sample("jobs_worker_children_recycled_total", **recycled),
    ) == (before[0] + 1, before[1] + 1, before[2] + 1)


def test_receivers_signal_of_reads_billiard_s_message() -> None:
    assert worker_events.signal_of("Worker exited prematurely: signal 9 (SIGKILL).") == "SIGKILL"
    assert worker_events.signal_of("Worker exited prematurely: exitcode 70.") == "exitcode 70"
    assert worker_events.signal_of("gone") == "unknown"
