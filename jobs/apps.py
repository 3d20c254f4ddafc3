"""App config: loads the built-in kinds into the registry at startup."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing the kinds package registers every built-in kind.
        from jobs import checks, db_deadline, kinds, receivers, security_checks  # noqa: F401 - db_deadline: every connection  # noqa: F401 - receivers and checks register
        from observability import signals  # noqa: F401 - connects the telemetry receivers
