"""`manage.py jobs_scheduler`: run the scheduler until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from config.celery_app import app
from config.startup import refuse_on_check_errors
from jobs import db_deadline
from jobs.scheduler import run_scheduler, scheduler_leadership
from jobs.telemetry import process
from jobs.telemetry.exporters import start_scheduler_exporter
from observability import tracing
from observability.multiproc import activate, role_dir
from observability.worker_monitor import WorkerMonitor


class Command(BaseCommand):
    help = (
        "Promote due retries to the broker, republish unpublished jobs, and serve "
        "/metrics with which workers are up. Any number may run; one leads."
    )
    # Checked in handle() instead, to refuse with one line (config.startup)
    # rather than Django's multi-line report.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--interval", type=float, default=None, help="seconds between passes")

    def handle(self, *args: Any, **options: Any) -> None:
        refuse_on_check_errors("scheduler")
        activate(role_dir("scheduler"), wipe_first=True)
        process.start("scheduler")
        # A silent database must not freeze the loop (jobs.db_deadline).
        db_deadline.enable()
        # The central view of which workers are up (a dead worker cannot say so).
        monitor = WorkerMonitor(
            app,
            offline_after=settings.JOBS_WORKER_OFFLINE_AFTER,
            forget_after=settings.JOBS_WORKER_FORGET_AFTER,
        ).start()
        # Any number of schedulers may run; the lease holder leads (jobs.leadership).
        leadership = scheduler_leadership()
        start_scheduler_exporter(monitor, leadership)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            run_scheduler(stop=stop, interval=options["interval"], leadership=leadership)
        finally:
            monitor.stop()
            tracing.shutdown()
