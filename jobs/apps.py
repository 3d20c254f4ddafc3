"""App config: chooses the attempt engine and loads the built-in kinds and every installed app's `kinds` module at startup."""

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    import uuid

    from jobs.engine import Engine


def _publish_released(job_ids: list["uuid.UUID"], claimer: str) -> int:
    """jobs.services.sweeps.publish_claimed, for the engine's concurrency hand-off."""
    from jobs.services.sweeps import publish_claimed  # noqa: PLC0415 - the services import the engine

    return publish_claimed(job_ids=job_ids, claimer=claimer)


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"
    # The attempt engine this process chose in ready() (jobs.engine.current()).
    engine: "Engine"

    def ready(self) -> None:
        from django.db import connection  # noqa: PLC0415 - the database settings are read only now

        from jobs.engine import Engine  # noqa: PLC0415 - the engine imports models

        # The attempt engine's backend, chosen once for this process (jobs.engine); it publishes
        # the jobs a freed concurrency slot is handed to through the services' claimed publish.
        self.engine = Engine.for_vendor(connection.vendor, publish=_publish_released)
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
