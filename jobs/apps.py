"""App config: loads the built-in kinds into the registry at startup."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing registers: the kinds, the receivers and checks, db_deadline's hook
        # on every connection, and the telemetry receivers (jobs.telemetry).
        from jobs import (  # noqa: F401, PLC0415 - registrations need the app registry ready
            checks,
            db_deadline,
            kinds,
            receivers,
            security_checks,
        )
        from jobs.telemetry import (  # noqa: F401, PLC0415 - connecting receivers needs the app registry ready
            celery_events,
            job_events,
            worker_events,
        )
