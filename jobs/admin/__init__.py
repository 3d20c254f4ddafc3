"""Admin: the job list, the job page and the overview (see job_admin); periodic schedules."""

from jobs.admin.job_admin import JobAdmin
from jobs.admin.schedule_admin import ScheduleAdmin

__all__ = ["JobAdmin", "ScheduleAdmin"]
