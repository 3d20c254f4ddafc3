"""The anchor of `python -m bench`: an ordinary Django project with stock Celery and django-celery-results.

What a Django team deploys instead of the platform, set up as Celery's and
django-celery-results' documentation say (settings.py): results in
PostgreSQL (`django-db`, extended), acks late, prefetch 1, task events. One
ordinary table of its own (models.Submission) for P2's hand-written view.
Nothing of the platform is imported. Run by bench/anchor_rig.py:

    DJANGO_SETTINGS_MODULE=bench.anchor.settings celery -A bench.anchor worker --concurrency 2
    gunicorn bench.anchor.wsgi --workers 2 --threads 4
"""

from bench.anchor.celery import app as celery_app

__all__ = ["celery_app"]
