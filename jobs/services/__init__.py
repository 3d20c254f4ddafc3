"""Services: the only writers of job state (re-exported here; one module per concern).

Submit, publish, start and finish attempts, promote retries, sweep the
outbox and expired leases, cancel and requeue. Every state change follows
DESIGN.md ("Job lifecycle", "Retries") and happens inside a transaction that
locks the job row, so concurrent workers, the scheduler and the API never
interleave on one job.
"""

from jobs.services.attempts import (
    attempt_finish,
    attempt_interrupted,
    attempt_start,
    attempt_worker_lost,
)
from jobs.services.lifecycle import job_cancel, job_requeue
from jobs.services.records import RETRYABLE_OUTCOMES, AttemptReport, StartedAttempt, SubmitResult
from jobs.services.submission import job_publish, job_submit, request_fingerprint
from jobs.services.sweeps import leases_expire, outbox_reopen, outbox_sweep, retries_promote_due

__all__ = [
    "AttemptReport",
    "RETRYABLE_OUTCOMES",
    "StartedAttempt",
    "SubmitResult",
    "job_publish",
    "job_submit",
    "request_fingerprint",
    "attempt_finish",
    "attempt_interrupted",
    "attempt_start",
    "attempt_worker_lost",
    "leases_expire",
    "outbox_reopen",
    "outbox_sweep",
    "retries_promote_due",
    "job_cancel",
    "job_requeue",
]
