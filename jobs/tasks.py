"""The Celery task that runs one attempt, and the worker-side request that reports its state.

Thin: the runner and services do the work; jobs.task_states maps the
attempt's end to a Celery state. A retry never waits inside the worker as a
delayed Celery message: it waits in the database and the scheduler
publishes it when due (DESIGN.md "Retries").
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import psutil
from billiard.einfo import ExceptionInfo
from billiard.exceptions import WorkerLostError
from celery import Task, signals
from celery.exceptions import TimeLimitExceeded
from celery.utils.saferepr import saferepr
from celery.worker import state as worker_state
from celery.worker.request import Request
from celery.worker.state import task_ready
from django.conf import settings

from config.celery_app import app
from jobs import (
    child_gc,
    db_deadline,
    events,
    runner,
    services,
    spool_drainer,
    state_store,
    task_names,
    task_states,
    worker_shutdown,  # noqa: F401 - a second SIGTERM is a cold shutdown
)
from jobs.attempt_classify import MEMORY_LIMIT_ERROR
from jobs.attempt_errors import AttemptError, error_class
from jobs.cancellation import CancelRelay
from jobs.db import run_with_reconnect
from jobs.memory_guard import MEMORY_LIMIT_EXIT_CODE, watchdog
from jobs.models import AttemptOutcome, Job, JobStatus
from jobs.services import AttemptEnd
from jobs.services.publish_stamps import start_stamp_writer
from jobs.supervisor import supervisor
from observability import task_events

logger = logging.getLogger(__name__)


class AttemptRequest(Request):
    """Worker-side request (the worker's main process) of one attempt message.

    - Every task event it sends also moves the matching celery-exporter
      counter (observability.task_events), so our counters mean exactly
      what celery-exporter's would.
    - REVOKED and IGNORED attempts (jobs.task_states) become task-revoked
      and task-ignored events; the message is acknowledged.
    - A hard time limit or a lost child is recorded here (the child cannot
      record it), through the one retry decision: RETRY when another attempt
      follows, FAILURE when the job is dead. With `reject_on_worker_lost`,
      Celery requeues a message whose child died, forever (celery issues
      9082 and 1628); here a dead job's message is acknowledged instead.
    - A child that ended itself at a hard memory limit (exit status
      jobs.memory_guard.MEMORY_LIMIT_EXIT_CODE) recorded its attempt first;
      its FAILURE or RETRY is reported from that record, not as a lost worker.
    """

    _jobs_reported = False

    def send_event(self, type: str, **fields: Any) -> None:  # noqa: A002 - Celery's signature
        task_events.observe(type, name=self.name, hostname=self.hostname, request=self, **fields)
        super().send_event(type, **fields)

    def on_timeout(self, soft: bool, timeout: float) -> None:
        if soft:
            return super().on_timeout(soft, timeout)
        # billiard reports a hard limit twice: on_failure(TimeLimitExceeded), then here.
        self._hard_time_limit(timeout)
        return None

    def on_failure(
        self, exc_info: ExceptionInfo, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        exc = getattr(exc_info, "exception", None)
        exc = getattr(exc, "exc", exc)
        if isinstance(exc, task_states.AttemptRevoked):
            return self._revoked(str(exc))
        if isinstance(exc, task_states.DeliveryIgnored):
            return self._ignored(str(exc))
        if isinstance(exc, TimeLimitExceeded) and len(self.args) >= 2:
            return self._hard_time_limit(exc.args[0] if exc.args else None)
        if (
            isinstance(exc, WorkerLostError | SystemExit | KeyboardInterrupt)
            and len(self.args) >= 2
        ):
            if self._worker_lost(exc, exc_info):
                return None
        return super().on_failure(
            exc_info, send_failed_event=send_failed_event, return_ok=return_ok
        )

    # -- states ------------------------------------------------------------------

    def _revoked(self, why: str) -> None:
        task_ready(self)
        self.acknowledge()
        self.send_event("task-revoked", terminated=False, signum=None, expired=False)
        signals.task_revoked.send(
            sender=self.task, request=self._context, terminated=False, signum=None, expired=False
        )
        logger.info("attempt revoked task_id=%s: %s", self.id, why)

    def _ignored(self, why: str) -> None:
        task_ready(self)
        self.acknowledge()
        self.send_event("task-ignored")
        logger.info("delivery ignored task_id=%s: %s", self.id, why)

    def _hard_time_limit(self, timeout: float | None) -> None:
        task_ready(self)
        if self._jobs_reported:
            return
        self._jobs_reported = True
        job_id = self.args[0]
        end: AttemptEnd | None
        # The child is still alive here (billiard kills it right after): its RSS
        # is the attempt's "after".
        rss = child_rss(self.worker_pid)
        try:
            end = run_with_reconnect(
                lambda _retry: record_hard_time_limit(
                    job_id=job_id,
                    published_attempt=int(self.args[1]),
                    timeout=timeout,
                    rss_bytes=rss,
                ),
                what=f"recording the hard time limit of job {job_id}",
                within=settings.JOBS_MAIN_DB_RETRY_SECONDS,
            )
        except Exception:
            logger.exception("could not record hard time limit job_id=%s", job_id)
            end = None
        self.acknowledge()
        if end is not None and end.status is None and end.job_status != JobStatus.CANCELLED:
            # The attempt had ended before its timer fired (its result not read
            # yet: this process was held up, e.g. by Celery's soft shutdown
            # sleep). Its own result is discarded by billiard; no event is
            # sent for it. billiard still ends the child: a recycle.
            logger.warning(
                "hard time limit timer of %s[%s] fired after its attempt had ended: not reported;"
                " the child pid %s is replaced",
                self.name,
                self.id,
                self.worker_pid,
            )
            events.child_recycling.send(
                sender=Job, hostname=self.hostname, reason=events.RecycleReason.HARD_TIME_LIMIT
            )
            return
        logger.error("Hard time limit (%ss) exceeded for %s[%s]", timeout, self.name, self.id)
        self._report(end, TimeLimitExceeded(timeout), traceback="")

    def _worker_lost(self, exc: BaseException, exc_info: ExceptionInfo) -> bool:
        """Record a lost child; True when handled here, False to leave it to Celery (requeue)."""
        if self._already_cancelled or self._already_revoked:
            return False  # killed by our own cancel (cold shutdown): Celery leaves it unacked
        job_id = self.args[0]
        if f"exitcode {MEMORY_LIMIT_EXIT_CODE}" in str(exc) and self._memory_limit(job_id):
            return True
        try:
            end = run_with_reconnect(
                lambda _retry: services.attempt_worker_lost(
                    job_id=job_id,
                    attempt=int(self.args[1]),
                    worker_pid=self.worker_pid,
                    message=f"worker lost: {exc}",
                ),
                what=f"recording the lost worker of job {job_id}",
                within=settings.JOBS_MAIN_DB_RETRY_SECONDS,
            )
        except Exception:
            logger.exception("could not record worker loss job_id=%s", job_id)
            return False  # Celery requeues it; attempt_start or the lease sweep records it
        if end.decision is None:
            if end.job_status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING):
                return False  # not this child's attempt: leave the message to Celery (requeue)
            # The job is gone or already terminal: a redelivery could only loop.
            self._ignored(f"worker lost; job {end.job_status or 'gone'}")
            return True
        task_ready(self)
        if end.decision.retries:
            # Back on the queue, announced as RETRY rather than Celery's REJECTED.
            # `_on_reject` is the consumer's hook that Request.reject() calls
            # (celery/worker/request.py); tests/unit/test_task_states.py fails
            # if Celery renames it.
            self._on_reject(logger, self._connection_errors, True)
            self.acknowledged = True
        else:
            logger.warning(
                "job dead after a lost worker job_id=%s reason=%s: acknowledging, not requeueing",
                job_id,
                end.decision.dead_reason,
            )
            self.acknowledge()
        traceback = getattr(exc_info, "traceback", "") or ""
        self._report(end, WorkerLostError(str(exc)), traceback=traceback)
        return True

    def _memory_limit(self, job_id: str) -> bool:
        """Report a child that ended itself at a hard memory limit; True when its end was recorded.

        The child recorded `memory_limit` and the decision before exiting
        (jobs.runner); the message is acknowledged (a retry is the
        scheduler's to publish) and the state is FAILURE or RETRY, with an
        exception named MemoryLimitExceeded.
        """
        try:
            end = run_with_reconnect(
                lambda _retry: services.attempt_memory_limit_end(
                    job_id=job_id, worker_pid=self.worker_pid
                ),
                what=f"reading the memory limit of job {job_id}",
                within=settings.JOBS_MAIN_DB_RETRY_SECONDS,
            )
        except Exception:
            logger.exception("could not read the memory limit of job_id=%s", job_id)
            return False
        if end is None:
            return False
        task_ready(self)
        self.acknowledge()
        exc = error_class(MEMORY_LIMIT_ERROR)(
            f"hard memory limit exceeded; child exited with status {MEMORY_LIMIT_EXIT_CODE}"
        )
        self._report(end, exc, traceback="")
        return True

    def _report(self, end: AttemptEnd | None, exc: BaseException, *, traceback: str) -> None:
        """Send RETRY, FAILURE or REVOKED for an attempt ended from outside its child.

        `end` is None when the end could not be recorded (FAILURE, as Celery
        would report it).
        """
        if end is not None and end.status is None and end.job_status == JobStatus.CANCELLED:
            self.send_event("task-revoked", terminated=True, signum=None, expired=False)
            return
        if end is not None and end.decision is not None:
            exc = task_states.attempt_exception(
                error_type=type(exc).__name__, error_message=str(exc), end=end
            )
            if end.decision.retries:
                self.send_event("task-retried", exception=saferepr(exc), traceback=traceback)
                return
        signals.task_failure.send(
            sender=self.task,
            task_id=self.id,
            exception=exc,
            args=self.args,
            kwargs=self.kwargs,
            traceback=None,
            einfo=None,
        )
        self.send_event("task-failed", exception=saferepr(exc), traceback=traceback)


def record_hard_time_limit(
    *, job_id: str, published_attempt: int, timeout: float | None, rss_bytes: int | None = None
) -> AttemptEnd:
    """Record that the attempt running for a message of `job_id` hit its hard time limit.

    `published_attempt` is the number the message was published for; a
    message redelivered after a worker loss runs a later attempt, so the
    job's current attempt is recorded. `timeout` is the limit in seconds,
    `rss_bytes` the child's resident memory when it was stopped (None if
    unknown). Raises the database's errors.
    """
    current = Job.objects.filter(id=job_id).values_list("attempts_made", flat=True).first()
    return services.attempt_interrupted(
        job_id=job_id,
        attempt=max(published_attempt, current or 0),
        outcome=AttemptOutcome.HARD_TIMEOUT,
        message=f"hard time limit exceeded ({timeout}s)",
        error_type="TimeLimitExceeded",
        rss_bytes=rss_bytes,
    )


def child_rss(pid: int | None) -> int | None:
    """Resident memory (bytes) of process `pid`, or None when it is gone or unknown."""
    if not pid:
        return None
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return None


class AttemptTask(Task):
    """The attempt task's class: its requests are AttemptRequests.

    `collector` is this worker child's garbage collection state
    (jobs.child_gc), made anew at the child's start (freeze_after_fork).
    """

    Request = AttemptRequest
    collector = child_gc.ChildCollector()


# Bound to our app, not `shared_task`: a shared task publishes through the
# process's *current* app, which any other `Celery()` made in the process
# (a library, a test's inspection client) silently replaces.
@app.task(
    name=task_names.RUN_ATTEMPT,
    base=AttemptTask,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # A dead job's FAILURE is logged by the services (WARNING, with reason
    # and last error); Celery logs it at INFO instead of a second traceback.
    throws=(AttemptError,),
)
def run_attempt_task(self: AttemptTask, job_id: str, attempt: int) -> dict[str, Any]:
    """Run the attempt this message was published for (1-based).

    Returns the SUCCESS summary (jobs.task_states.summary) or raises what
    gives the attempt its Celery state: Retry, an AttemptError, AttemptRevoked
    or DeliveryIgnored.
    """
    run = runner.execute_attempt(
        job_id=job_id,
        attempt=int(attempt),
        hostname=self.request.hostname or "",
        collector=self.collector,
        on_progress=functools.partial(task_states.send_progress, self),
    )
    result = task_states.summary(
        job_id=run.job_id,
        attempt=run.attempt,
        outcome=run.end.outcome if run.end else "dropped",
        duration_seconds=run.duration_seconds,
        rss_before_bytes=run.rss_before_bytes,
        rss_after_bytes=run.rss_after_bytes,
    )
    return task_states.raise_for(
        end=run.end,
        report=run.report,
        attempt=run.attempt,
        max_attempts=run.max_attempts,
        result=result,
    )


@signals.worker_process_init.connect
def freeze_after_fork(**_: Any) -> None:
    # What the child inherited is never garbage: keep it out of the full
    # collections that follow failed attempts (jobs.child_gc).
    child_gc.freeze_inherited_objects()
    # This child's own count of failed attempts since its last full collection.
    run_attempt_task.collector = child_gc.ChildCollector()
    # The attempt's own queries may run long; its hard time limit bounds it.
    db_deadline.disable()
    # The child's service threads start at birth, not at its first attempt,
    # so its thread count stays the same over its life: a count that grows
    # is then a leak (bench/storm reads it).
    watchdog.start()
    supervisor.start()
    start_stamp_writer()


def _running_job_ids() -> set[str]:
    """Job ids of the attempts this worker's pool runs now (task ids are "<job id>:<attempt>")."""
    return {request.id.partition(":")[0] for request in list(worker_state.active_requests)}


@signals.worker_ready.connect
def start_outcome_spool_drainer(**_: Any) -> None:
    # Outcomes this host kept on disk while the database was away (jobs.spool_drainer).
    spool_drainer.start()
    if state_store.uses_postgres():
        # Cancellations of the attempts this pool runs, as flag files (jobs.cancellation).
        CancelRelay(active=_running_job_ids).start()
    # The main process's own writes (hard limits, lost children) must not
    # hang its event loop on a silent database (jobs.db_deadline); children
    # forked from now on turn it off again at their start.
    db_deadline.enable()
