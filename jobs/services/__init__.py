"""Services: the use cases callers ask for (re-exported here; one module per concern).

Submit, publish, start and finish attempts, promote retries, sweep the
outbox and expired leases, republish jobs whose message vanished, cancel,
requeue and retry now (the `_for` variants on behalf of a user, under
jobs.ownership's rule). Every job and attempt row change is the engine's
(jobs.engine: named transitions, DESIGN.md "Job lifecycle", "Retries");
these modules are thin façades over it that add publishing, History and
the cancellation signal.
"""

from jobs.engine.values import (
    RETRYABLE_OUTCOMES,
    AttemptEnd,
    AttemptReport,
    AttemptRun,
    StartedAttempt,
    SubmitResult,
)
from jobs.services.attempt_finish import (
    attempt_finish,
    attempt_interrupted,
    attempt_memory_limit_end,
)
from jobs.services.attempt_start import attempt_start
from jobs.services.audit import job_action_record
from jobs.services.dead_letters import dead_letters_record
from jobs.services.fuse_ops import fuse_release, fuse_reset, fuse_trip, fuses_list
from jobs.services.lifecycle import job_cancel, job_requeue, job_retry_now, requeue_max_attempts
from jobs.services.lost_messages import (
    Suspect,
    SuspectReason,
    lost_message_suspects,
    lost_messages_republish,
)
from jobs.services.outcomes import (
    outcome_spool,
    outcome_spool_local,
    outcomes_drain,
    outcomes_drain_local,
)
from jobs.services.ownership import job_cancel_for, job_requeue_for, job_retry_now_for
from jobs.services.publishing import job_publish, jobs_publish
from jobs.services.submission import job_submit, request_fingerprint
from jobs.services.sweeps import (
    concurrency_release,
    held_release,
    leases_expire,
    outbox_reopen,
    outbox_sweep,
    rate_release,
    retries_promote_due,
)
from jobs.services.worker_loss import attempt_worker_lost

__all__ = [
    "AttemptEnd",
    "AttemptReport",
    "AttemptRun",
    "RETRYABLE_OUTCOMES",
    "StartedAttempt",
    "dead_letters_record",
    "Suspect",
    "SuspectReason",
    "SubmitResult",
    "job_publish",
    "jobs_publish",
    "job_submit",
    "request_fingerprint",
    "attempt_finish",
    "attempt_interrupted",
    "attempt_memory_limit_end",
    "attempt_start",
    "attempt_worker_lost",
    "concurrency_release",
    "fuse_release",
    "fuse_reset",
    "fuse_trip",
    "fuses_list",
    "held_release",
    "rate_release",
    "leases_expire",
    "lost_message_suspects",
    "lost_messages_republish",
    "outbox_reopen",
    "outbox_sweep",
    "retries_promote_due",
    "job_cancel",
    "job_cancel_for",
    "job_requeue",
    "job_requeue_for",
    "job_retry_now",
    "job_retry_now_for",
    "job_action_record",
    "requeue_max_attempts",
    "outcome_spool",
    "outcome_spool_local",
    "outcomes_drain",
    "outcomes_drain_local",
]
