"""`manage.py jobs_prune [--dry-run] [--max-seconds S] [--json]`: delete terminal jobs past retention.

Deletes succeeded, cancelled and dead jobs older than their JOBS_PRUNE_*
ages, with their attempts and History, in batches of at most JOBS_PRUNE_BATCH,
each its own short transaction, resting between batches so that it deletes
at most JOBS_PRUNE_DUTY_CYCLE of the time (jobs.retention, docs/retention.md). `--dry-run`
prints what would go, per status, and deletes nothing. SIGTERM or SIGINT
stops it after the batch in hand; nothing is half-deleted. Exits 1 with one
line when the settings or the options cannot work.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import replace
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import retention


class Command(BaseCommand):
    help = "Delete terminal jobs (and their attempts) older than their JOBS_PRUNE_* ages."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="count what would be pruned, delete nothing"
        )
        parser.add_argument(
            "--max-seconds", type=float, help="stop after this long (the rest waits for next run)"
        )
        parser.add_argument("--batch", type=int, help="jobs per batch (default JOBS_PRUNE_BATCH)")
        parser.add_argument(
            "--pause",
            type=float,
            help="least seconds between batches (default JOBS_PRUNE_PAUSE_SECONDS)",
        )
        parser.add_argument(
            "--duty",
            type=float,
            help="share of time spent deleting, 0.01..1 (default JOBS_PRUNE_DUTY_CYCLE)",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON line of counts")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = retention.Retention.from_settings()
        except retention.RetentionError as exc:
            raise CommandError(str(exc)) from None
        if options["batch"] is not None:
            if not 1 <= options["batch"] <= retention.MAX_BATCH:
                raise CommandError(f"--batch must be 1..{retention.MAX_BATCH} jobs")
            config = replace(config, batch=options["batch"])
        if options["pause"] is not None:
            if not 0 <= options["pause"] <= retention.MAX_PAUSE_SECONDS:
                raise CommandError(f"--pause must be 0..{retention.MAX_PAUSE_SECONDS:g} seconds")
            config = replace(config, pause=options["pause"])
        if options["duty"] is not None:
            if not retention.MIN_DUTY <= options["duty"] <= retention.MAX_DUTY:
                raise CommandError(f"--duty must be {retention.MIN_DUTY:g}..{retention.MAX_DUTY:g}")
            config = replace(config, duty=options["duty"])
        limit = options["max_seconds"]
        if limit is not None and limit <= 0:
            raise CommandError("--max-seconds must be above 0")
        if options["dry_run"]:
            self._preview(config, as_json=options["json"])
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        deadline = None if limit is None else time.monotonic() + limit
        result = retention.prune(
            retention=config,
            should_stop=lambda: (
                stop.is_set() or (deadline is not None and time.monotonic() >= deadline)
            ),
            sleep=stop.wait,
        )
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict()))
            return
        for status, jobs in result.jobs.items():
            self.stdout.write(f"{status}: {jobs:,} jobs, {result.attempts[status]:,} attempts")
        self.stdout.write(
            f"pruned {sum(result.jobs.values()):,} jobs in {result.batches} batches, "
            f"{result.seconds:.1f} s ({result.busy_seconds:.1f} s deleting); longest batch {result.longest_batch_seconds * 1000:.0f} ms"
            + ("; stopped early, the rest waits for the next run" if result.stopped else "")
        )

    def _preview(self, config: retention.Retention, *, as_json: bool) -> None:
        counts = retention.preview(retention=config)
        if as_json:
            self.stdout.write(
                json.dumps({s: {"jobs": j, "attempts": a} for s, (j, a) in counts.items()})
            )
            return
        for status, (jobs, attempts) in counts.items():
            age = config.ages.get(status)
            kept = "kept forever" if age is None else f"older than {retention.format_age(age)}"
            self.stdout.write(f"{status} ({kept}): {jobs:,} jobs, {attempts:,} attempts would go")
        self.stdout.write("dry run: nothing deleted")
