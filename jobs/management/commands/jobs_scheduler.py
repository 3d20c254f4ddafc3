"""`manage.py jobs_scheduler`: run the scheduler until SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from jobs.scheduler import run_scheduler
from observability import tracing
from observability.multiproc import activate, role_dir


class Command(BaseCommand):
    help = "Promote due retries to the broker and republish unpublished jobs."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--interval", type=float, default=None, help="seconds between passes")

    def handle(self, *args: Any, **options: Any) -> None:
        # Its metrics are merged into the web's /metrics.
        activate(role_dir("scheduler"), wipe_first=True)
        tracing.setup(role="scheduler")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            run_scheduler(stop=stop, interval=options["interval"])
        finally:
            tracing.shutdown()
