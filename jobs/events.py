"""Domain events, sent by jobs.services after the change is committed.

Telemetry subscribes to these (observability.signals); services never
import metrics. Every signal is sent with `sender=Job` and keyword arguments:

- job_submitted(job)
- job_rejected(kind, queue, reason)       reason: invalid, conflict, queue_full, too_large, unauthenticated
- attempt_started(job, attempt)           in the process that runs it
- attempt_finished(job, attempt)          `job` after the change (retrying or queued again
                                          after a failed attempt means a retry was scheduled)
- job_completed(job)                      the job reached succeeded, dead or cancelled
- delivery_dropped(job, reason)           reason: live, terminal, stale
- retry_budget_exhausted(job)
- leak_suspected(kind, resource)          resource: threads, memory (in the worker child)
"""

from django.dispatch import Signal

job_submitted = Signal()
job_rejected = Signal()
attempt_started = Signal()
attempt_finished = Signal()
job_completed = Signal()
delivery_dropped = Signal()
retry_budget_exhausted = Signal()
leak_suspected = Signal()
