"""Job and Attempt rows: the database is the source of truth for every job.

States follow DESIGN.md ("Job lifecycle"): [delayed ->] queued -> running -> succeeded;
running -> retrying -> queued; running -> dead; any non-terminal -> cancelled.
Only `jobs.services` changes them.
"""

from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from jobs.reasons import PauseScope
from jobs.waiting import CHOICES as WAITING_CHOICES
from jobs.waiting import DETAIL_MAX_CHARS


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    # Waiting for its `run_after` time in the database; promoted to queued by
    # the scheduler (jobs.scheduler), never held as a broker countdown.
    DELAYED = "delayed"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


TERMINAL_STATUSES: frozenset[str] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED}
)


class DeadReason(models.TextChoices):
    EXHAUSTED = "exhausted"  # retryable failures used up max_attempts
    ERROR = "error"  # a non-retryable error
    POISON = "poison"  # the message kept killing its worker
    BUDGET = "budget"  # the kind's retry budget was spent
    MEMORY_LIMIT = "memory_limit"  # an attempt went past the kind's memory limit
    # RabbitMQ dropped the message past its x-delivery-limit (jobs.brokers.rabbitmq)
    DELIVERY_LIMIT = "delivery_limit"


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded"
    ERROR = "error"
    SOFT_TIMEOUT = "soft_timeout"
    HARD_TIMEOUT = "hard_timeout"
    WORKER_LOST = "worker_lost"
    CANCELLED = "cancelled"
    # Stopped by the memory guard (jobs.memory_guard): past the soft limit and
    # stopped on its cancellation flag, or past the hard limit (child replaced).
    MEMORY_LIMIT = "memory_limit"


class Job(models.Model):
    """One unit of background work of a registered kind.

    Timestamps are UTC. `attempts_made` counts Attempt rows started;
    `next_attempt_at` is set while `retrying` or `delayed` (then it is
    `run_after`); `lease_expires_at` bounds how
    long the current attempt may still be alive (hard limit + grace).
    `waiting_reason` / `waiting_detail` say why a held-back job waits
    (jobs.waiting); empty otherwise.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=100)
    queue = models.CharField(max_length=100, default="default")
    # Celery's message priority on Redis: 0 is taken first, 9 last; None
    # publishes without one (served with priority 0). kombu groups them into
    # the sub-queues of its priority_steps (0, 3, 6, 9).
    priority = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(9)]
    )
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=JobStatus, default=JobStatus.QUEUED)
    attempts_made = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField()
    # NULL, not "", when absent: the unique constraint must not match two jobs without a key.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # The earliest start the submitter asked for (None: at once). A job
    # submitted with a later one waits `delayed` until the scheduler queues it.
    run_after = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Broker deliveries that reached a worker (run or dropped), and attempts
    # that ended with the worker process lost: the poison-message count.
    deliveries = models.PositiveIntegerField(default=0)
    worker_losses = models.PositiveIntegerField(default=0)
    # W3C traceparent of the request that submitted the job: every attempt's
    # span joins that trace.
    trace_parent = models.CharField(max_length=64, blank=True, default="")
    # The running (or last) attempt's progress, as its kind reported it
    # (AttemptContext.progress, jobs.progress): `progress_done` of
    # `progress_total` units (None: unknown), written at most every
    # JOBS_PROGRESS_INTERVAL seconds.
    progress_done = models.FloatField(null=True, blank=True)
    progress_total = models.FloatField(null=True, blank=True)
    progress_message = models.CharField(max_length=200, blank=True, default="")
    progress_at = models.DateTimeField(null=True, blank=True)
    # The scheduler that claimed this unpublished row, and until when (the
    # database's clock): no other scheduler publishes it meanwhile
    # (jobs.outbox_claim). Only read while `published_at` is NULL.
    publish_claimed_by = models.CharField(max_length=200, blank=True, default="")
    publish_claimed_until = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    dead_reason = models.CharField(max_length=16, choices=DeadReason, blank=True, default="")
    waiting_reason = models.CharField(
        max_length=32, choices=WAITING_CHOICES, blank=True, default=""
    )
    waiting_detail = models.CharField(max_length=DETAIL_MAX_CHARS, blank=True, default="")
    created_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        # Idempotency keys are scoped per submitter and kind. A unique index
        # treats NULLs as distinct, so jobs without a submitter (management
        # commands, the Python API without a user) get a constraint of their
        # own. Both are partial: jobs without a key never conflict. Created
        # without locking writes (migration 0008). When a user is deleted their
        # jobs' keys are cleared (jobs.receivers), so SET_NULL cannot collide.
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, created_by__isnull=False),
                name="jobs_job_unique_idem_key_per_submitter",
            ),
            models.UniqueConstraint(
                fields=["kind", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, created_by__isnull=True),
                name="jobs_job_unique_idem_key_no_submitter",
            ),
        ]
        indexes = [
            # Scheduler: due retries.
            models.Index(fields=["status", "next_attempt_at"], name="jobs_job_status_next_idx"),
            # Scheduler sweep: queued rows never published; oldest-queued age.
            models.Index(
                fields=["status", "published_at", "enqueued_at"], name="jobs_job_outbox_idx"
            ),
            # List API filters; a user who sees only their own jobs (jobs.ownership).
            models.Index(fields=["created_by", "created_at"], name="jobs_job_owner_created_idx"),
            models.Index(fields=["kind", "status", "created_at"], name="jobs_job_kind_status_idx"),
            models.Index(fields=["status", "created_at"], name="jobs_job_status_created_idx"),
            # Admin list: newest first (Django adds -pk for a stable order), and
            # each list filter with that order, so a filtered page is an index walk.
            models.Index(fields=["created_at", "id"], name="jobs_job_created_idx"),
            models.Index(fields=["kind", "created_at"], name="jobs_job_kind_created_idx"),
            models.Index(fields=["queue", "created_at"], name="jobs_job_queue_created_idx"),
            models.Index(
                fields=["dead_reason", "created_at"],
                condition=~Q(dead_reason=""),
                name="jobs_job_dead_reason_idx",
            ),
            # Admin search by idempotency key alone (the unique constraint leads with kind).
            models.Index(
                fields=["idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="jobs_job_idem_key_idx",
            ),
            # Admin search by error text: a trigram GIN index on PostgreSQL,
            # created by migration 0005 (no model-level equivalent that SQLite accepts).
            # Lost-message check: queued jobs of one queue and priority published
            # before a time. Partial, so its size is the queued backlog, and led by
            # queue and priority, so a backlog in one sub-queue never lengthens the
            # range read for another (jobs.services.lost_messages).
            models.Index(
                fields=["queue", "priority", "published_at"],
                condition=Q(status="queued"),
                name="jobs_job_queued_published_idx",
            ),
            # Jobs held by a pause (jobs.engine.pausing.release_held, every scheduler
            # tick): partial, so its size is the held set, 0 when nothing is paused.
            models.Index(
                fields=["enqueued_at"],
                condition=Q(status="queued", waiting_reason="paused"),
                name="jobs_job_paused_held_idx",
            ),
            # Jobs waiting for a concurrency slot (jobs.concurrency_gate: the start's
            # "older waiter" probe and the leader's release pass): the waiting set only.
            models.Index(
                fields=["kind", "enqueued_at"],
                condition=Q(status="queued", waiting_reason="concurrency_limit"),
                name="jobs_job_concurrency_idx",
            ),
            # Jobs held by an open fuse (jobs.engine.fusing.release, every scheduler tick):
            # the held set only, empty while every fuse is closed.
            models.Index(
                fields=["kind", "enqueued_at"],
                condition=Q(status="queued", waiting_reason="fuse_open"),
                name="jobs_job_fuse_held_idx",
            ),
            # Jobs waiting for a rate limit, by their reserved start (jobs.rate_gate: the
            # start's "older waiter" probe and the leader's paced release).
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="queued", waiting_reason="rate_limit"),
                name="jobs_job_rate_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Attempt(models.Model):
    """One execution of a job. RSS figures are bytes of the worker child."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    worker_hostname = models.CharField(max_length=255, blank=True, default="")
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=AttemptOutcome, blank=True, default="")
    error_type = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    rss_before_bytes = models.BigIntegerField(null=True, blank=True)
    rss_after_bytes = models.BigIntegerField(null=True, blank=True)
    # Seconds the job waits before the next attempt, when this one led to a retry.
    retry_delay_seconds = models.FloatField(null=True, blank=True)
    trace_id = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["job", "number"]
        indexes = [models.Index(fields=["started_at"], name="jobs_attempt_started_idx")]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="jobs_attempt_unique_number")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.job_id}: {self.outcome or 'running'}"


class RateWindow(models.Model):
    """Requests counted for one rate-limit key in one fixed window (jobs.services.rate_windows).

    `window_start` is the window's start in whole seconds since the epoch;
    the row is of no use after `expires_at`, the window's end.
    """

    key = models.CharField(max_length=200)
    window_start = models.BigIntegerField()
    hits = models.PositiveIntegerField(default=0)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "window_start"], name="jobs_ratewindow_unique_key"
            )
        ]
        indexes = [models.Index(fields=["expires_at"], name="jobs_ratewindow_expires_idx")]

    def __str__(self) -> str:
        return f"{self.key} from {self.window_start}: {self.hits}"


class SchedulerLease(models.Model):
    """Which scheduler leads (jobs.leadership): one row per `name`, judged by the database's clock.

    `holder` leads while `expires_at` (the database's now() plus the lease
    length at its last renewal) is in the future; `term` grows by one at each
    change of holder and `acquired_at` is when the holder took it.
    """

    name = models.CharField(max_length=50, primary_key=True)
    holder = models.CharField(max_length=200, blank=True, default="")
    term = models.PositiveBigIntegerField(default=0)
    acquired_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'nobody'} (term {self.term})"


class RetryBudgetWindow(models.Model):
    """One kind's retry-budget counts in one window (jobs.budget_pg; PostgreSQL state store).

    `width` is the window length in seconds and `index` the window's number
    (window n is [n·width, (n + 1)·width) in the database's epoch seconds).
    `firsts`: first attempts started in it; `retries`: retries counted in it;
    `exhausted`: its budget was found spent (the once-per-window log line).
    Rows not touched for the longest deferral plus two windows are deleted
    by the next decision of the kind.
    """

    kind = models.CharField(max_length=100)
    width = models.FloatField()
    index = models.BigIntegerField()
    firsts = models.IntegerField(default=0)
    retries = models.IntegerField(default=0)
    exhausted = models.BooleanField(default=False)
    touched_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "width", "index"], name="jobs_retrybudget_unique_window"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} window {self.index}: {self.retries} retries, {self.firsts} firsts"


class WorkerReport(models.Model):
    """A worker's own report for the admin overview (jobs.worker_reports; PostgreSQL state store).

    `report` is the JSON of observability.worker_report; `reported_at` is the
    database's time of the write, the only clock the overview compares.
    """

    hostname = models.CharField(max_length=255, primary_key=True)
    report = models.TextField()
    reported_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.hostname} at {self.reported_at:%Y-%m-%d %H:%M:%S}"


class Pause(models.Model):
    """A paused kind or queue (jobs.pauses): its jobs stay `queued` and start after the resume.

    One row per (`scope`, `name`) while paused; the resume deletes it (the
    admin History keeps both). `paused_at` is the database's time.
    """

    scope = models.CharField(max_length=8, choices=[(s.value, s.value) for s in PauseScope])
    name = models.CharField(max_length=100)
    paused_at = models.DateTimeField()
    paused_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="jobs_pause_unique_scope_name")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} paused"


# Fuses live in their own module; imported here so Django registers the model.
from jobs.fuse_model import Fuse  # noqa: E402, F401 - registers the model with the app


class RateBucket(models.Model):
    """The GCRA state of one (kind, key) with a rate limit (jobs.gcra, jobs.rate_gate).

    `tat` is the bucket's theoretical arrival time and `plan` the planning cursor (the
    start time the next held job is given), both epoch seconds of the database's clock
    as the engine passes it. `key` is '' for a limit per kind. Written only under the
    (kind, key) lock: PostgreSQL's advisory lock (jobs.rate_sql), SQLite's writer lock.
    """

    kind = models.CharField(max_length=100)
    key = models.TextField(default="", blank=True)
    tat = models.FloatField(null=True)
    plan = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "key"], name="jobs_ratebucket_unique_kind_key")
        ]

    def __str__(self) -> str:
        return f"rate bucket {self.kind} {self.key!r}"


# Periodic schedules live in their own module; imported here so Django registers them.
from jobs.periodic.models import (  # noqa: E402, F401 - registers the models with the app
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleSource,
    ScheduleTick,
)
