"""Schedule and ScheduleTick rows (imported by jobs.models; docs/periodic.md).

A Schedule is cron (with a time zone) or a fixed interval, for a kind or a
Django `@task` (its dotted path is a kind), with a payload and a queue.
`next_tick_at` is the nominal time of its next tick and `next_run_at` that
time plus the tick's jitter: the leader submits the tick's job once the
database's clock passes `next_run_at`. Both None: computed afresh from now
at the next pass (a new, edited or re-enabled schedule). A ScheduleTick is
the claim on one tick: unique per schedule and tick time.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from jobs.reasons import TickOutcome


class MissedPolicy(models.TextChoices):
    """Ticks missed (no leader for a while, a tick later than JOBS_SCHEDULE_MISSED_AFTER)."""

    SKIP = "skip", "skip the missed ticks"
    CATCH_UP = "catch_up", "run once to catch up"


class OverlapPolicy(models.TextChoices):
    """A tick due while the schedule's previous job is still live (not terminal)."""

    SKIP = "skip", "skip the tick while the previous job is live"
    ALLOW = "allow", "allow"


class ScheduleSource(models.TextChoices):
    CODE = "code", "code (settings JOBS_SCHEDULES; read-only here)"
    ADMIN = "admin", "admin"


class Schedule(models.Model):
    """A periodic schedule. Exactly one of `cron` and `interval_seconds` is set."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(
        max_length=100, help_text="A job kind, or a Django @task's dotted path."
    )
    payload = models.JSONField(
        default=dict,
        blank=True,
        help_text='The kind\'s payload; for a @task {"args": [...], "kwargs": {...}}.',
    )
    queue = models.CharField(max_length=100, blank=True, default="", help_text="Empty: the kind's.")
    cron = models.CharField(
        max_length=200, blank=True, default="", help_text="5 fields (or 6 with seconds first)."
    )
    interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="Every N seconds, at multiples of N since the epoch."
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA time zone.")
    enabled = models.BooleanField(default=True)
    missed_policy = models.CharField(
        max_length=16, choices=MissedPolicy, default=MissedPolicy.CATCH_UP
    )
    overlap_policy = models.CharField(
        max_length=16, choices=OverlapPolicy, default=OverlapPolicy.SKIP
    )
    jitter_seconds = models.PositiveIntegerField(
        default=0, help_text="Each tick's job is created up to this many seconds late, at random."
    )
    source = models.CharField(
        max_length=8, choices=ScheduleSource, default=ScheduleSource.ADMIN, editable=False
    )
    next_tick_at = models.DateTimeField(null=True, blank=True, editable=False)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_tick_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_job = models.ForeignKey(
        "jobs.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(interval_seconds__isnull=False))
                | (~Q(cron="") & Q(interval_seconds__isnull=True)),
                name="jobs_schedule_cron_or_interval",
            ),
        ]
        indexes = [models.Index(fields=["enabled", "next_run_at"], name="jobs_schedule_due_idx")]

    def __str__(self) -> str:
        return self.name

    @property
    def timing(self) -> str:
        """The cron expression with its time zone, or `every N s`."""
        if self.cron:
            return f"{self.cron} ({self.timezone})"
        return f"every {self.interval_seconds} s"


class ScheduleTick(models.Model):
    """The claim on one tick of a schedule: one row per (schedule, tick time), never two.

    `missed` counts the earlier ticks this row stands for, which got no job
    of their own (skipped, or folded into this catch-up). `created_at` is the
    database's time of the claim; `due_at` the tick time plus its jitter.
    """

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="ticks")
    tick_at = models.DateTimeField()
    due_at = models.DateTimeField()
    created_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=[(o.value, o.value) for o in TickOutcome])
    missed = models.PositiveIntegerField(default=0)
    job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-tick_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "tick_at"], name="jobs_scheduletick_unique")
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.tick_at:%Y-%m-%d %H:%M:%S}: {self.outcome}"
