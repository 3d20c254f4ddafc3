"""The project's Celery app, as Celery's "First steps with Django" writes it."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.anchor.settings")

app = Celery("anchor")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
