"""`manage.py jobs_pause kind|queue NAME [--reason TEXT]`: pause a kind or a queue (jobs.pauses)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import pauses
from jobs.errors import JobsError


class Command(BaseCommand):
    help = "Pause a kind or a queue: its jobs stay queued in the database until jobs_resume."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("scope", help="kind or queue")
        parser.add_argument("name", help="the kind's or the queue's name")
        parser.add_argument("--reason", default="", help="shown on the waiting jobs")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            row, created = pauses.pause(
                scope=options["scope"], name=options["name"], reason=options["reason"], via="CLI"
            )
        except JobsError as exc:
            raise CommandError(str(exc)) from None
        verb = "paused" if created else "already paused"
        self.stdout.write(f"{row.scope} {row.name} {verb} since {row.paused_at.isoformat()}")
