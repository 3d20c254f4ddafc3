"""The Fuse row: one circuit breaker's state per (kind, destination) (jobs.fuse_rules).

Imported by jobs.models so Django registers it. Written by the engine
(jobs.engine.fusing: the start's admission, the finish's counts, the
leader's release) and by the operators' service (jobs.fuses: trip, reset).
"""

from __future__ import annotations

from django.db import models

from jobs.reasons import FuseState


class Fuse(models.Model):
    """A fuse of `kind` for `destination` (a host, or "*" for the whole kind).

    `state` closed / open / half_open; the window (`window_started_at`,
    `attempts`, `failures`, `history`: the last `fuse_window_attempts` ends)
    counts while closed; `probe_due_at` is when an
    open fuse lets one probe start (`opened_at` + `cooldown_seconds`);
    `probe_job_id` and `probe_started_at` name the probe while half-open.
    `trips` counts closed -> open (jobs_fuse_trips_total). `changed_by` and
    `reason` are the last operator's (None / "" when the counts tripped it).
    Times are the database's.
    """

    kind = models.CharField(max_length=100)
    destination = models.CharField(max_length=255, default="*")
    state = models.CharField(
        max_length=9, choices=[(s.value, s.value) for s in FuseState], default=FuseState.CLOSED
    )
    window_started_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    # the window's last ends as bits, the latest lowest, 1 a failure (jobs.fuse_rules)
    history = models.BigIntegerField(default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    probe_due_at = models.DateTimeField(null=True, blank=True)
    cooldown_seconds = models.FloatField(default=0.0)
    probe_job_id = models.UUIDField(null=True, blank=True)
    probe_started_at = models.DateTimeField(null=True, blank=True)
    trips = models.PositiveIntegerField(default=0)
    changed_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=300, blank=True, default="")
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "jobs"
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "destination"], name="jobs_fuse_unique_kind_destination"
            )
        ]

    def __str__(self) -> str:
        return f"fuse {self.kind} {self.destination} {self.state}"
