"""A stock Celery app for the retry-storm drill (`manage.py jobs_storm`): Celery's defaults, no Django.

Nothing of the platform is loaded (no supervisor, no memory reports, no
retry scheduler): this is what a team gets from Celery's documentation. The
drill starts it as

    celery -A bench.storm_stock_app -b <redis url> worker --soft-time-limit T --time-limit H

so the broker (its own Redis database) and the time limits come from the
command line.
"""

from __future__ import annotations

from celery import Celery

app = Celery("stock", include=["bench.stock_tasks"])
# Only what keeps the worker quiet at start; everything else is Celery's default
# (prefetch multiplier 4, early acknowledgement, no memory limit per child).
app.conf.broker_connection_retry_on_startup = True
app.conf.task_ignore_result = True
