"""`manage.py jobs_resume kind|queue NAME`: resume a paused kind or queue (jobs.pauses)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import pauses
from jobs.errors import JobsError


class Command(BaseCommand):
    help = "Resume a paused kind or queue: the scheduler publishes its held jobs at its next tick."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scope", help="kind or queue")
        parser.add_argument("name", help="the kind's or the queue's name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            row = pauses.resume(scope=options["scope"], name=options["name"], via="CLI")
        except JobsError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{row.scope} {row.name} resumed")
