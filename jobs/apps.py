"""App config: loads the built-in kinds and every installed app's `kinds` module at startup."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing the kinds package registers every built-in kind.
        from jobs import checks, db_deadline, kinds, receivers, security_checks  # noqa: F401 - db_deadline: every connection  # noqa: F401 - receivers and checks register
        from jobs.kinds.discovery import autodiscover_kinds, autodiscover_tasks  # apps loaded now
        from jobs.taskbackend import signals as task_signals  # noqa: F401 - Django's task signals
        from observability import signals  # noqa: F401 - connects the telemetry receivers

        # Every installed app's `kinds` module (jobs.kinds.discovery).
        autodiscover_kinds()
        autodiscover_tasks()
