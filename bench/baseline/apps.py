"""Registers the CPU-heavy kind `bench.cpu` (P5) when the overlay settings are in use."""

from django.apps import AppConfig


class BaselineConfig(AppConfig):
    """The overlay app; its `ready()` registers the kind in web and worker alike."""

    name = "bench.baseline"
    label = "bench_baseline"

    def ready(self) -> None:
        from bench.baseline import cpu  # noqa: F401, PLC0415 - registers the kind; needs the app registry ready
