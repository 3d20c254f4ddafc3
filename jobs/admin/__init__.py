"""Admin: the job list, the job page and the overview (see job_admin)."""

from jobs.admin.job_admin import JobAdmin

__all__ = ["JobAdmin"]
