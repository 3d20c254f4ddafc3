"""`manage.py jobs_storm`: the retry-storm drill, the platform beside stock Celery.

Thin: the drill lives in bench/storm/ (the stock side must never be in
jobs/). It starts its own workers (and the platform's scheduler), prints a
live table with a progress bar, the final table side by side and writes a
PNG. Exit 0 when the platform held (RSS growth at its peak within
--max-growth-mb, no thread left behind, no job lost); otherwise one line on
stderr and exit 1. Needs matplotlib and tqdm (`pip install -e '.[drill]'`).
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

DEFAULTS_NOTE = "defaults finish in under 5 minutes on 2 cores"
ROW_EVERY = 10
# (flag, type, help) of the drill's StormConfig fields set as they are; the
# field is the flag's name (--fail-times -> fail_times).
OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("--jobs", int, "jobs sent at once (N)"),
    ("--fail-times", int, "attempts that time out (K)"),
    ("--buffer-bytes", int, "bytes each attempt holds (B)"),
    ("--thread-seconds", float, "how long a hanging helper runs when nothing stops it"),
    ("--timeout", float, "soft time limit of an attempt (seconds)"),
    ("--concurrency", int, "worker children, the same on both sides"),
    ("--settle-seconds", float, "longest wait for a side's storm to settle"),
    (
        "--baseline-seconds",
        float,
        "how long RSS and threads are read (medians) before and after the storm",
    ),
)


def _field(flag: str) -> str:
    """The StormConfig field (and argparse dest) of `flag`: "--fail-times" -> "fail_times"."""
    return flag[2:].replace("-", "_")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _source_tree() -> bool:
    """Whether the drill's packages are importable (the production image ships neither)."""
    return all(importlib.util.find_spec(name) is not None for name in ("bench", "devstack"))


class Command(BaseCommand):
    help = (
        "Replay the retry-storm incident against the platform and a stock Celery worker; "
        f"print both sides' memory, threads and jobs; write a PNG ({DEFAULTS_NOTE})."
    )

    def add_arguments(self, parser: Any) -> None:
        if not _source_tree():
            return  # handle() says why, in one line
        from bench.storm.model import MB, StormConfig  # noqa: PLC0415 - bench/ is in the source tree only; handle() says so without it

        d = StormConfig()
        for flag, kind, help_text in OPTIONS:
            parser.add_argument(flag, type=kind, default=getattr(d, _field(flag)), help=help_text)
        parser.add_argument(
            "--leave-thread",
            action=argparse.BooleanOptionalAction,
            default=d.leave_thread,
            help="the hanging call runs in a helper thread holding the buffer",
        )
        parser.add_argument(
            "--max-growth-mb",
            type=float,
            default=d.max_growth_bytes / MB,
            help="the platform's bound on worker RSS growth (MB, 10^6 bytes)",
        )
        parser.add_argument("--out", type=Path, default=d.out, help="PNG to write")
        parser.add_argument(
            "--scenario",
            choices=["retry-storm", "outage"],
            default="retry-storm",
            help="retry-storm: the platform beside stock Celery; outage: a destination down "
            "for --down-seconds, webhook.deliver's fuse on and off side by side",
        )
        parser.add_argument(
            "--down-seconds", type=float, default=20.0, help="outage: how long it refuses"
        )
        parser.add_argument(
            "--other-jobs",
            type=int,
            default=20,
            help="outage: jobs of another kind (demo.sleep) sent with the outage's, and as many "
            "alone before it, to compare their latency",
        )
        only = parser.add_mutually_exclusive_group()
        only.add_argument("--platform-only", action="store_true")
        only.add_argument("--stock-only", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if not _source_tree():
            raise CommandError(
                "jobs_storm runs from a source checkout (it needs bench/ and devstack/, "
                "which the production image leaves out): pip install -e '.[drill]'"
            )
        missing = [m for m in ("matplotlib", "tqdm") if importlib.util.find_spec(m) is None]
        if missing:
            raise CommandError(
                f"jobs_storm needs {' and '.join(missing)}: pip install -e '.[drill]'"
            )
        from bench.storm.drill import run_drill  # noqa: PLC0415 - bench/ is in the source tree only; handle() says so without it
        from bench.storm.model import MB, StormConfig  # noqa: PLC0415 - bench/ is in the source tree only; handle() says so without it
        from bench.storm.report import judge, plot, table  # noqa: PLC0415 - bench/ is in the source tree only; handle() says so without it

        sides = (
            ("platform",)
            if options["platform_only"]
            else ("stock",)
            if options["stock_only"]
            else ("platform", "stock")
        )
        config = StormConfig(
            **{_field(flag): options[_field(flag)] for flag, *_ in OPTIONS},
            leave_thread=options["leave_thread"],
            max_growth_bytes=int(options["max_growth_mb"] * MB),
            sides=sides,
            out=Path(options["out"]),
        )
        try:
            config.validate()
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        signal.signal(signal.SIGTERM, _interrupt)
        if options["scenario"] == "outage":
            self._outage(config, options["down_seconds"], options["other_jobs"])
            return
        started = time.monotonic()
        live = LiveTable(self, config.jobs)
        try:
            results = run_drill(config, on_sample=live.sample, say=live.say)
        except KeyboardInterrupt:
            raise CommandError("interrupted; every process the drill started was stopped") from None
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
            detail = f"{exc} {getattr(exc, 'stderr', None) or ''}".strip()
            raise CommandError(f"drill failed: {detail[-800:]}") from None
        finally:
            live.close()
        verdict = judge(results, config)
        path = plot(results, config, config.out)
        self.stdout.write(
            f"\njobs_storm: {config.jobs} jobs, first {config.fail_times} attempts time out after "
            f"{config.timeout:g} s holding {config.buffer_bytes} bytes"
            f"{' and a helper thread' if config.leave_thread else ''}; "
            f"{config.concurrency} children a side; {time.monotonic() - started:.0f} s in all\n"
        )
        self.stdout.write(table(results) + "\n")
        for line in verdict.lines:
            self.stdout.write(line + "\n")
        self.stdout.write(f"plot: {path}\n")
        if not verdict.ok:
            raise CommandError("the platform did not hold: " + verdict.lines[0])

    def _outage(self, config: Any, down_seconds: float, other_jobs: int) -> None:
        """The dependency-outage scenario (bench.storm.outage): its table, fuse on and off."""
        from bench.storm.outage import outage_table, run_outage  # noqa: PLC0415 - bench/ is in the source tree only; handle() says so without it

        started = time.monotonic()

        def say(message: str) -> None:
            self.stderr.write(f"[jobs_storm {time.monotonic() - started:5.1f}s] {message}")

        try:
            results = run_outage(config, down_seconds=down_seconds, say=say, other_jobs=other_jobs)
        except KeyboardInterrupt:
            raise CommandError("interrupted; every process the drill started was stopped") from None
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
            detail = f"{exc} {getattr(exc, 'stderr', None) or ''}".strip()
            raise CommandError(f"outage failed: {detail[-800:]}") from None
        self.stdout.write(
            f"\njobs_storm outage: {config.jobs} webhook.deliver jobs to a destination refusing "
            f"(503) for {down_seconds:g} s; {config.concurrency} children; "
            f"{time.monotonic() - started:.0f} s in all\n"
        )
        self.stdout.write(outage_table(results) + "\n")


class LiveTable:
    """A progress bar per side (jobs settled) and a table row every ROW_EVERY readings."""

    def __init__(self, command: BaseCommand, total: int) -> None:
        self.command = command
        self.total = total
        self.bar: Any = None
        self.side = ""
        self.readings = 0
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        from tqdm import tqdm  # noqa: PLC0415 - optional dependency (tqdm, the dev extra)

        tqdm.write(
            f"[jobs_storm {time.monotonic() - self.started:5.1f}s] {message}", file=sys.stderr
        )

    def sample(self, side: str, sample: Any) -> None:
        from tqdm import tqdm  # noqa: PLC0415 - optional dependency (tqdm, the dev extra)

        if side != self.side:
            self.close()
            self.side = side
            self.readings = 0
            self.bar = tqdm(total=self.total, desc=f"{side:<8}", unit="job", mininterval=0.5)
            tqdm.write(
                f"{'side':<8} {'t (s)':>6} {'RSS MB':>8} {'threads':>7} {'in flight':>9} "
                f"{'retries pending':>15} {'settled':>8}"
            )
        counts = sample.counts
        self.bar.n = counts.settled
        self.bar.set_postfix(
            rss_mb=f"{sample.rss_bytes / 1e6:.0f}",
            threads=sample.threads,
            in_flight=counts.in_flight,
            pending=counts.pending_retries,
            refresh=True,
        )
        self.readings += 1
        if self.readings % ROW_EVERY == 1 or counts.settled >= self.total:
            tqdm.write(
                f"{side:<8} {sample.t:>6.0f} {sample.rss_bytes / 1e6:>8.1f} {sample.threads:>7} "
                f"{counts.in_flight:>9} {counts.pending_retries:>15} {counts.settled:>8}"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
