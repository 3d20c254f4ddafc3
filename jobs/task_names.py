"""Names of the platform's Celery tasks: publishers look the task up by name, never import its module.

jobs.tasks registers each under its name on config.celery_app's app;
JobsConfig.ready imports jobs.tasks so the name resolves in every process.
"""

from __future__ import annotations

RUN_ATTEMPT = "jobs.run_attempt"
