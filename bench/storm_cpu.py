"""CPU per attempt of P1's success drain and storm, by process role: `python -m bench.storm_cpu`.

P1's platform side (bench/p1_drain.py: one platform on PostgreSQL with the
storm's settings, prefork concurrency 2) drains `--jobs` no-op jobs, then
`--jobs / 4` jobs that fail each of their 3 attempts (retries published
by the scheduler), `--rounds` times. From the worker's "ready" to the last
attempt recorded, the CPU time (user + system, psutil, polled every 0.1 s)
of every process by role — worker main, worker children, scheduler,
PostgreSQL server processes, redis-server — is divided by the attempts:
milliseconds of CPU per attempt. On a shared 2-core machine a drain's
rate follows whatever else runs; CPU per attempt says where a failed
attempt costs more than a successful one. Prints one line per drain; not
recorded (docs/performance.md quotes it).
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

import psutil

from bench import p1_drain
from bench.rig import Rig, standalone


def _role(process: psutil.Process) -> str | None:
    command = " ".join(process.cmdline())
    if command.startswith("postgres:"):
        return "postgres"
    if "redis-server" in command:
        return "redis"
    if "jobs_scheduler" in command:
        return "scheduler"
    if "celery" in command and " worker" in command:
        parent = " ".join(psutil.Process(process.ppid()).cmdline())
        return "worker-child" if "celery" in parent and " worker" in parent else "worker-main"
    return None


def _cpu_by_pid() -> dict[int, tuple[str, float]]:
    """{pid: (role, CPU seconds so far)} of every process with a role."""
    found: dict[int, tuple[str, float]] = {}
    for process in psutil.process_iter():
        try:
            role = _role(process)
            if role is not None:
                times = process.cpu_times()
                found[process.pid] = (role, times.user + times.system)
        except psutil.Error:
            continue
    return found


class _Poller(threading.Thread):
    """CPU seconds by role since `reset()`, sampled every 0.1 s (processes may exit)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.first: dict[int, tuple[str, float]] = {}
        self.last: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()
        self.lock = threading.Lock()

    def reset(self) -> None:
        now = _cpu_by_pid()
        with self.lock:
            self.first, self.last = dict(now), dict(now)

    def run(self) -> None:
        while not self.done.wait(0.1):
            now = _cpu_by_pid()
            with self.lock:
                for pid, value in now.items():
                    self.first.setdefault(pid, (value[0], value[1]))
                    self.last[pid] = value

    def totals(self) -> dict[str, float]:
        with self.lock:
            totals: dict[str, float] = {}
            for pid, (role, seconds) in self.last.items():
                totals[role] = totals.get(role, 0.0) + seconds - self.first[pid][1]
            return totals


def _drain(rig: Rig, jobs: int, *, fail: bool) -> tuple[float, dict[str, float]]:
    """One drain; returns (attempts/s, CPU seconds by role from the worker's ready on)."""
    poller = _Poller()
    wait_attempts = rig.wait_attempts

    def counted(*args: Any, **kwargs: Any) -> float:
        poller.reset()  # the worker is ready: its start-up is not counted
        return wait_attempts(*args, **kwargs)

    rig.wait_attempts = counted  # type: ignore[method-assign]
    poller.start()
    try:
        rate = p1_drain._platform_drain(rig, jobs, fail=fail)
    finally:
        poller.done.set()
        poller.join()
        rig.wait_attempts = wait_attempts  # type: ignore[method-assign]
    return rate, poller.totals()


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print CPU milliseconds per attempt by role."""
    parser = argparse.ArgumentParser(prog="python -m bench.storm_cpu", description=__doc__)
    parser.add_argument("--jobs", type=int, default=1200, help="no-op jobs per success drain")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of success then storm")
    args = parser.parse_args(argv)
    with standalone("jobs-bench-stormcpu-", jobs=args.jobs) as opts:
        rig = Rig(opts, "p1", env=p1_drain.STORM_ENV)
        rig.start_web()
        for _ in range(args.rounds):
            for fail in (False, True):
                jobs = max(10, args.jobs // 4) if fail else args.jobs
                attempts = jobs * (p1_drain.STORM_ATTEMPTS if fail else 1)
                rate, cpu = _drain(rig, jobs, fail=fail)
                shares = " ".join(
                    f"{role} {cpu[role] * 1000 / attempts:.2f}" for role in sorted(cpu)
                )
                total = sum(cpu.values()) * 1000 / attempts
                print(
                    f"{'storm' if fail else 'success':7} {rate:6.1f} attempts/s  CPU ms per "
                    f"attempt: {shares}  total {total:.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
