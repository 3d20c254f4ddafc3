"""The anchor's one app: its table, tasks and view."""

from django.apps import AppConfig


class AnchorConfig(AppConfig):
    name = "bench.anchor"
    label = "anchor"
    default_auto_field = "django.db.models.BigAutoField"
