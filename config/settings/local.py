"""Local development and `make demo`: DEBUG on, a dev-only secret key."""

from config.settings.base import *  # noqa: F403
from config.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="django-insecure-local-only-never-in-production")

# The example app (example/): a kind, Django tasks and views using the
# platform the way a team's own app would. Never in production settings.
INSTALLED_APPS = [*INSTALLED_APPS, "example"]  # noqa: F405
