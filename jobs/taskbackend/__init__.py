"""Django's Tasks framework (`TASKS` setting) backed by the job platform: see backend.py."""

from jobs.taskbackend.backend import JobsBackend, JobsTask, platform_priority
from jobs.taskbackend.results import JobsTaskContext

__all__ = ["JobsBackend", "JobsTask", "JobsTaskContext", "platform_priority"]
