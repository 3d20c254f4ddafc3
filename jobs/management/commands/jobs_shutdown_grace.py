"""`manage.py jobs_shutdown_grace [--check SECONDS]`: the termination grace a worker needs.

Prints the grace (largest hard time limit of the registered kinds, with
JOBS_KIND_OVERRIDES, + a margin: jobs.shutdown_grace). With `--check`, exits
1 with one line when the given grace (a manifest's
`terminationGracePeriodSeconds`) is shorter; run it with the worker's
environment, e.g. in the deployment's CI.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.shutdown_grace import required_grace


class Command(BaseCommand):
    help = "Print the shutdown grace a worker needs; --check SECONDS fails when it is shorter."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check",
            type=float,
            metavar="SECONDS",
            help="a configured grace (terminationGracePeriodSeconds) to check against it",
        )

    def handle(self, *args: Any, check: float | None = None, **options: Any) -> None:
        grace = required_grace()
        if check is not None and check < grace.seconds:
            raise CommandError(f"grace {check:g} s is too short: a worker needs {grace.describe()}")
        self.stdout.write(f"terminationGracePeriodSeconds >= {grace.describe()}")
