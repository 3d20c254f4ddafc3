"""Local settings with the fresh app installed: the only change a team makes (issue 22, Acceptance)."""

from config.settings.local import *  # noqa: F403
from config.settings.local import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.byow_app"]
