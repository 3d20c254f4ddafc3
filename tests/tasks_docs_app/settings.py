"""Local settings with the documentation examples' app, an `emails` queue and mail kept in memory."""

from config.settings.local import *  # noqa: F403
from config.settings.local import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.tasks_docs_app"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
