"""The Celery app: settings from Django (CELERY_ namespace), tasks autodiscovered."""

import os

from celery import Celery

from observability.worker_info import WorkerInfo

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("config")
# https://docs.celeryq.dev/en/stable/django/first-steps-with-django.html
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Worker memory in `celery inspect stats` (Flower's worker page); registers `inspect jobs_dump`.
app.steps["worker"].add(WorkerInfo)
