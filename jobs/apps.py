"""App config: loads the built-in kinds and every installed app's `kinds` module at startup."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing registers: the built-in kinds, the receivers and checks, db_deadline's hook
        # on every connection, and the telemetry receivers (jobs.telemetry).
        from jobs import (  # noqa: F401, PLC0415 - registrations need the app registry ready
            checks,
            db_deadline,
            receivers,
            security_checks,
            tasks,  # noqa: F401, PLC0415 - registers the attempt task, published by name
        )
        from jobs.kinds import builtin  # noqa: F401, PLC0415 - registering kinds needs the app registry ready
        from jobs.kinds.discovery import (  # noqa: PLC0415 - the app registry is ready only now
            autodiscover_kinds,
            autodiscover_tasks,
        )
        from jobs.periodic import (  # noqa: F401, PLC0415 - registering a check needs the app registry ready
            checks as periodic_checks,
        )
        from jobs.taskbackend import (  # noqa: F401, PLC0415 - connecting receivers needs the app registry ready
            signals as task_signals,
        )
        from jobs.telemetry import (  # noqa: F401, PLC0415 - connecting receivers needs the app registry ready
            celery_events,
            job_events,
            worker_events,
        )

        # Every installed app's `kinds` and `tasks` modules (jobs.kinds.discovery).
        autodiscover_kinds()
        autodiscover_tasks()
