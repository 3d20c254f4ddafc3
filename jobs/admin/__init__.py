"""Admin: the job list, the job page and the overview (see job_admin); periodic schedules;
pauses (pause_admin); fuses (fuse_admin)."""

from jobs.admin.fuse_admin import FuseAdmin
from jobs.admin.job_admin import JobAdmin
from jobs.admin.pause_admin import PauseAdmin
from jobs.admin.schedule_admin import ScheduleAdmin

__all__ = ["FuseAdmin", "JobAdmin", "PauseAdmin", "ScheduleAdmin"]
