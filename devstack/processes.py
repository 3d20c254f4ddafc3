"""Start and stop the Procfile's processes by pid, with the project's environment."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from devstack.services import wait_for

ROOT = Path(__file__).resolve().parent.parent


def procfile_commands(path: Path = ROOT / "Procfile") -> dict[str, list[str]]:
    """{process name: argv} from the Procfile, so tests run the production commands."""
    commands = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, command = line.partition(":")
            commands[name.strip()] = shlex.split(command)
    return commands


def _resolve(argv: list[str]) -> list[str]:
    # Run the venv's console scripts and python, whatever PATH says.
    bindir = Path(sys.executable).parent
    head = argv[0]
    if head == "python":
        return [sys.executable, *argv[1:]]
    candidate = bindir / head
    return [str(candidate), *argv[1:]] if candidate.exists() else argv


@dataclass
class Process:
    """One started process (its own process group), logging to `log_path`."""

    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the main process only."""
        if self.alive():
            os.kill(self.pid, sig)

    def children(self) -> list[psutil.Process]:
        """Live child processes (a Celery worker's pool children)."""
        try:
            return psutil.Process(self.pid).children(recursive=False)
        except psutil.NoSuchProcess:
            return []

    def stop(self, *, sig: int | None = signal.SIGTERM, timeout: float = 20) -> int | None:
        """Stop the process and everything in its group; SIGKILL after `timeout` s.

        `sig` None: the process was already sent its stop signal (Stack.stop);
        only wait for it, then kill its group. Returns the exit code (None if
        it had to be killed and was not reaped).
        """
        # Started with start_new_session=True, so the group id is the pid, even
        # after the leader has been reaped (os.getpgid would fail then).
        pgid = self.pid
        if self.alive():
            if sig is not None:
                os.kill(self.pid, sig)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            return self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None


@dataclass
class Stack:
    """Processes started with one environment; `stop()` ends them all.

    `env` is added to os.environ for every process; `logdir` holds one log
    file per process.
    """

    env: dict[str, str]
    logdir: Path
    processes: list[Process] = field(default_factory=list)
    # A command every process is started under, e.g. `ip netns exec NAME` to run
    # it on a test's network-namespace host (tests/integration/multi_host.py).
    launcher: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.commands = procfile_commands()

    def environ(self) -> dict[str, str]:
        merged = {**os.environ, **self.env}
        merged["PYTHONUNBUFFERED"] = "1"
        merged["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{merged.get('PATH', '')}"
        return merged

    def run(self, argv: list[str], *, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a one-off command (e.g. migrate) to completion; raises on failure."""
        return subprocess.run(
            _resolve(argv),
            cwd=ROOT,
            env=self.environ(),
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(
        self, name: str, *extra: str, env: dict[str, str] | None = None, log_name: str | None = None
    ) -> Process:
        """Start Procfile process `name` with `extra` arguments appended."""
        argv = [*self.launcher, *_resolve([*self.commands[name], *extra])]
        log_path = self.logdir / f"{log_name or name}.log"
        handle = open(log_path, "ab")  # noqa: SIM115 - owned by the child
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**self.environ(), **(env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        handle.close()
        process = Process(name=log_name or name, popen=popen, log_path=log_path)
        self.processes.append(process)
        return process

    def start_web(
        self,
        port: int,
        *,
        workers: int = 2,
        threads: int = 4,
        timeout: float = 30,
        address: str = "127.0.0.1",
    ) -> Process:
        """Start gunicorn on `address`:`port`; returns once /healthz answers there."""
        process = self.start(
            "web",
            env={
                "WEB_BIND": f"{address}:{port}",
                "WEB_CONCURRENCY": str(workers),
                "WEB_THREADS": str(threads),
                "WEB_ACCESS_LOG": "",
            },
        )

        def healthy() -> bool:
            if not process.alive():
                raise RuntimeError(f"web exited early:\n{process.log()[-3000:]}")
            try:
                return requests.get(f"http://{address}:{port}/healthz", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(healthy, timeout=timeout, what="web /healthz")
        return process

    def start_worker(
        self,
        *extra: str,
        concurrency: int = 2,
        timeout: float = 60,
        log_name: str = "worker",
        env: dict[str, str] | None = None,
        hostname: str | None = None,
    ) -> Process:
        """Start a Celery worker; returns once it logs that it is ready.

        `hostname` is its node name ("name@host"; default a unique name on this host).
        """
        process = self.start(
            "worker",
            "--concurrency",
            str(concurrency),
            "--hostname",
            hostname or f"{log_name}-{time.time_ns()}@%h",
            *extra,
            log_name=log_name,
            env=env,
        )
        offset = len(process.log())

        def ready() -> bool:
            if not process.alive():
                raise RuntimeError(f"worker exited early:\n{process.log()[-3000:]}")
            return " ready." in process.log()[offset:]

        wait_for(ready, timeout=timeout, what="celery worker ready")
        return process

    def start_scheduler(
        self, *extra: str, env: dict[str, str] | None = None, log_name: str | None = None
    ) -> Process:
        """Start a scheduler (another one with its own `log_name` and metrics port in `env`);
        returns once it logs that it started."""
        process = self.start("scheduler", *extra, env=env, log_name=log_name)
        wait_for(
            lambda: (
                "scheduler started" in process.log() or (not process.alive() and _raise(process))
            ),
            timeout=60,
            what="scheduler started",
        )
        return process

    def stop(self, *, timeout: float = 20) -> None:
        """Stop every process this stack started: SIGTERM to each, newest first,
        then one wait for them all; each is SIGKILLed (with its group) if still
        running `timeout` seconds after its SIGTERM.

        The processes shut down side by side, so stopping a stack takes as
        long as its slowest process, not the sum of them.
        """
        processes = list(reversed(self.processes))
        for process in processes:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in processes:
            process.stop(sig=None, timeout=max(0.0, deadline - time.monotonic()))
        self.processes.clear()


def _raise(process: Process) -> bool:
    raise RuntimeError(f"{process.name} exited early:\n{process.log()[-3000:]}")
