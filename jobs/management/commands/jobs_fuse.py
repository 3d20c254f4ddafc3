"""`manage.py jobs_fuse list | trip KIND | reset KIND [--destination HOST] [--reason TEXT]`:
the fuses (jobs.services.fuse_ops)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import services
from jobs.errors import JobsError
from jobs.fuse_rules import WHOLE_KIND


class Command(BaseCommand):
    help = (
        "List the fuses, or trip / reset one: an open fuse's jobs wait queued in the database; "
        "a reset lets them start at the scheduler's next tick."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "trip", "reset"])
        parser.add_argument("kind", nargs="?", default="", help="the kind (trip, reset)")
        parser.add_argument(
            "--destination", default=WHOLE_KIND, help='the destination host ("*": the kind)'
        )
        parser.add_argument("--reason", default="", help="kept on the fuse")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for row in services.fuses_list():
                self.stdout.write(
                    f"{row.kind} {row.destination} {row.state} trips={row.trips} "
                    f"probe_due={row.probe_due_at.isoformat() if row.probe_due_at else '-'}"
                )
            return
        if not options["kind"]:
            raise CommandError(f"{options['action']} needs a KIND")
        change = services.fuse_trip if options["action"] == "trip" else services.fuse_reset
        try:
            row = change(
                kind=options["kind"],
                destination=options["destination"],
                reason=options["reason"],
                via="CLI",
            )
        except JobsError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{row.kind} {row.destination} {row.state}")
