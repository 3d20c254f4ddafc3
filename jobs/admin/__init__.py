"""Admin: the job list, the job page and the overview (see job_admin); pauses (pause_admin)."""

from jobs.admin.job_admin import JobAdmin
from jobs.admin.pause_admin import PauseAdmin

__all__ = ["JobAdmin", "PauseAdmin"]
