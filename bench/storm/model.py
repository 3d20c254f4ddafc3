"""The drill's settings and one side's results (sizes in bytes, times in seconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.processes import ROOT

from .probes import Counts, Sample

MB = 1_000_000
STORM_DIR = ROOT / "var" / "storm"


@dataclass(frozen=True)
class StormConfig:
    """The drill's knobs (times in seconds, sizes in bytes); `validate()` names a bad one."""

    jobs: int = 100
    fail_times: int = 3
    buffer_bytes: int = 1024 * 1024
    leave_thread: bool = True
    thread_seconds: float = 30.0
    timeout: float = 1.0
    concurrency: int = 4
    settle_seconds: float = 90.0
    baseline_seconds: float = 3.0
    max_growth_bytes: int = 10 * MB
    sides: tuple[str, ...] = ("platform", "stock")
    out: Path = STORM_DIR / "jobs_storm.png"

    def validate(self) -> None:
        """Raise ValueError with one readable line for the first value out of range."""
        checks = [
            (1 <= self.jobs <= 10_000, f"--jobs must be 1-10000, not {self.jobs}"),
            (0 <= self.fail_times <= 20, f"--fail-times must be 0-20, not {self.fail_times}"),
            (
                0 <= self.buffer_bytes <= 256 * 1024**2,
                f"--buffer-bytes must be 0-268435456, not {self.buffer_bytes}",
            ),
            (0.5 <= self.timeout <= 60, f"--timeout must be 0.5-60 seconds, not {self.timeout}"),
            (1 <= self.concurrency <= 32, f"--concurrency must be 1-32, not {self.concurrency}"),
            (
                self.settle_seconds > 0,
                f"--settle-seconds must be above 0, not {self.settle_seconds}",
            ),
            (0 <= self.thread_seconds <= 3600, "--thread-seconds must be 0-3600"),
            (0 <= self.baseline_seconds <= 60, "--baseline-seconds must be 0-60"),
            (bool(self.sides), "--platform-only and --stock-only exclude each other"),
            (self.out.suffix.lower() == ".png", f"--out must name a .png file, not {self.out}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def payload(self, *, fail_times: int | None = None) -> dict[str, Any]:
        """The job's arguments, the same for both sides."""
        return {
            "fail_times": self.fail_times if fail_times is None else fail_times,
            "buffer_bytes": self.buffer_bytes,
            "leave_thread": self.leave_thread,
            "thread_seconds": self.thread_seconds,
        }


@dataclass
class SideResult:
    """One side's run: baseline (medians over 3 s before the storm), readings, the end."""

    name: str
    submitted: int
    baseline_rss: int
    baseline_threads: int
    samples: list[Sample] = field(default_factory=list)
    end_rss: int = 0
    end_threads: int = 0
    end: Counts = field(default_factory=Counts)
    storm_seconds: float = 0.0

    @property
    def peak_rss(self) -> int:
        return max([s.rss_bytes for s in self.samples] + [self.end_rss])

    @property
    def growth_peak(self) -> int:
        return self.peak_rss - self.baseline_rss

    @property
    def growth_end(self) -> int:
        return self.end_rss - self.baseline_rss

    @property
    def peak_threads(self) -> int:
        return max([s.threads for s in self.samples] + [self.end_threads])

    @property
    def peak_in_flight(self) -> int:
        return max((s.counts.in_flight for s in self.samples), default=0)

    @property
    def peak_pending_retries(self) -> int:
        return max((s.counts.pending_retries for s in self.samples), default=0)

    @property
    def unsettled(self) -> int:
        return self.submitted - self.end.settled

    @property
    def lost(self) -> int:
        """Jobs neither settled nor known to the side at the end (nothing will ever run them)."""
        return max(0, self.submitted - self.end.settled - self.end.pending)
