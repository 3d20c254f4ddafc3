"""Domain events, sent by jobs.services after the change is committed.

Telemetry subscribes to these (jobs.telemetry); services never
import metrics. Every signal is sent with `sender=Job` and keyword arguments:

- job_submitted(job)
- job_rejected(kind, queue, reason)       reason: a jobs.reasons.RejectReason
- attempt_started(job, attempt)           in the process that runs it
- attempt_finished(job, attempt, decision)
                                          `job` after the change; `decision` is the one
                                          retry-or-dead verdict (jobs.decisions.Decision) on a
                                          failed attempt, None after a success or when the job
                                          had moved on
- job_completed(job)                      the job reached succeeded, dead or cancelled
- attempt_progress(kind, queue, ratio)    a running attempt's progress was written
                                          (jobs.progress; ratio in 0..1, None when the
                                          total is unknown), in the process that runs it
- delivery_dropped(job, reason)           reason: a jobs.reasons.DropReason
- leak_suspected(kind, resource)          resource: a jobs.reasons.LeakResource (worker child)
- message_lost(job)                       a queued job's message vanished from the broker;
                                          the scheduler republishes it
- memory_limit_hit(kind, queue, limit)    limit: a jobs.reasons.Limit (jobs.memory_guard, worker child)
- child_recycling(hostname, reason)       this worker child is about to be replaced
                                          (reason: a RecycleReason)
- jobs_pruned(status, table, rows)        a retention batch deleted `rows` rows of `table`
                                          (jobs_job, jobs_attempt) of jobs in `status`
                                          (jobs.retention), after it committed
"""

from django.dispatch import Signal

# Re-exported: the reason child_recycling carries.
from jobs.reasons import RecycleReason as RecycleReason

job_submitted = Signal()
job_rejected = Signal()
attempt_started = Signal()
attempt_finished = Signal()
job_completed = Signal()
attempt_progress = Signal()
delivery_dropped = Signal()
leak_suspected = Signal()
message_lost = Signal()
memory_limit_hit = Signal()
child_recycling = Signal()
jobs_pruned = Signal()
