"""Gunicorn server settings and hooks (`gunicorn config.wsgi --config config/gunicorn.py`)."""

from __future__ import annotations

import os
from typing import Any

from config.env import env

bind = env.str("WEB_BIND", default="127.0.0.1:8000")
workers = env.int("WEB_CONCURRENCY", default=2)
threads = env.int("WEB_THREADS", default=4)
timeout = env.int("WEB_TIMEOUT", default=30)
accesslog = env.str("WEB_ACCESS_LOG", default="-") or None
# The master forks workers for its whole life, so it runs no thread besides
# its main one (DESIGN "Faults", docs/forking.md). Gunicorn's control socket
# for `gunicornc` is an asyncio thread in the master (stopped around each
# fork); we do not use it, and every gunicorn on a host would share its
# default path (~/.gunicorn/gunicorn.ctl).
control_socket_disable = True


def on_starting(server: Any) -> None:
    # Master, before forking workers: an emptied metrics directory for the web.
    from observability.multiproc import activate, role_dir  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    activate(role_dir("web"), wipe_first=True)
    # Then the system checks, before binding or forking: a configuration
    # error stops the server with one line instead of serving with it. This
    # sets Django up in the master (after `activate`, so metrics stay in
    # multiprocess mode); the checks open no database or broker connection.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from config.startup import refuse_on_check_errors  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    refuse_on_check_errors("web")


def post_fork(server: Any, worker: Any) -> None:
    # Tracing starts after fork: a span processor thread made in the master
    # would be dead in every worker (opentelemetry-python-contrib issue 166).
    import django  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    django.setup()
    from jobs import db_deadline  # noqa: PLC0415 - gunicorn loads this file before Django is set up
    from jobs.telemetry import process  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    process.start("web")
    # A silent database must not hold this worker's threads (jobs.db_deadline).
    db_deadline.enable()


def worker_exit(server: Any, worker: Any) -> None:
    from jobs.services.publish_stamps import flush_stamps  # noqa: PLC0415 - gunicorn loads this file before Django is set up
    from observability import tracing  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    # Stamps not written here are redone by the outbox sweep (a duplicate
    # delivery, dropped unrun): cheaper to write them now.
    flush_stamps()
    tracing.shutdown()


def child_exit(server: Any, worker: Any) -> None:
    # The master notices every dead worker, SIGKILLed ones too.
    from prometheus_client import multiprocess  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    from observability.multiproc import multiproc_dir  # noqa: PLC0415 - gunicorn loads this file before Django is set up

    directory = multiproc_dir()
    if directory is not None:
        multiprocess.mark_process_dead(worker.pid, str(directory))
