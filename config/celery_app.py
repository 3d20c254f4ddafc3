"""The Celery app: settings from Django (CELERY_ namespace), tasks autodiscovered."""

import os
from typing import Any

from celery import Celery
from celery.signals import celeryd_init

from config.startup import prepare_worker_memory, refuse_on_check_errors
from jobs import broker_transport
from jobs.telemetry.worker_info import WorkerInfo

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
# Celery's Django fixup runs every system check again at worker_init and
# ignores the result (celery/fixups/django.py validate_models); ours ran at
# celeryd_init and refuses (refuse_bad_configuration below). Its run would
# also import the URL conf (every view, admin, OpenAPI) into the process
# every child is forked from.
os.environ["CELERY_SKIP_CHECKS"] = "1"
# Before any broker connection: failover and write refusal are lost connections.
broker_transport.install()

# Bounded waits on a silent broker: the heartbeat gives up instead of
# retrying for as long as the broker is away, the consumer's reconnection
# back-off is capped (jobs.broker_liveness).
app = Celery("config", events="jobs.broker_liveness:Events", amqp="jobs.broker_liveness:AMQP")
# https://docs.celeryq.dev/en/stable/django/first-steps-with-django.html
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Worker memory in `celery inspect stats` (Flower's worker page); registers `inspect jobs_dump`.
app.steps["worker"].add(WorkerInfo)


@celeryd_init.connect
def refuse_bad_configuration(
    sender: str = "", conf: Any = None, options: Any = None, **_: Any
) -> None:
    # Before the pool forks and any message is taken (a SystemExit passes
    # through Celery's signal dispatch, which swallows only Exception).
    refuse_on_check_errors("worker")
    limit_kb = (options or {}).get("max_memory_per_child") or conf.worker_max_memory_per_child
    prepare_worker_memory(nodename=sender, limit_bytes=int(limit_kb or 0) * 1024)
