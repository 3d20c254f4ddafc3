"""The Celery app: settings from Django (CELERY_ namespace), tasks autodiscovered."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("config")
# https://docs.celeryq.dev/en/stable/django/first-steps-with-django.html
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
