"""Django's task signals, sent from the platform's own events for jobs that run a Django task.

`task_enqueued` is sent by JobsBackend.enqueue in the enqueuing process;
`task_started` when an attempt starts (in the worker child, every attempt:
a retry is the task starting again), `task_finished` when the job reaches a
terminal state (SUCCESSFUL, or FAILED: dead or cancelled), in the process
that ended it. The sender is JobsBackend, as Django's backends send their class.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from jobs import events
from jobs.models import Job
from jobs.taskbackend.backend import JobsBackend
from jobs.taskbackend.compat import task_finished, task_started
from jobs.taskbackend.results import task_of, task_result


def _send(signal: Any, job: Job) -> None:
    task = task_of(job)
    if task is None:
        return
    # The status is the event's (the row may have moved on); the attempts are read now.
    signal.send(JobsBackend, task_result=task_result(job, task))


@receiver(events.attempt_started)
def on_attempt_started(job: Job, **_: Any) -> None:
    _send(task_started, job)


@receiver(events.job_completed)
def on_job_completed(job: Job, **_: Any) -> None:
    _send(task_finished, job)
