"""The platform's settings plus the benchmark's baseline app and URLs (`python -m bench` only)."""

from config.settings.local import *  # noqa: F403
from config.settings.local import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.baseline.apps.BaselineConfig"]
ROOT_URLCONF = "bench.baseline.urls"
