"""Container healthcheck of every app service: `python -m config.healthcheck`.

The app services of docker-compose.yml share one definition and differ only
by command, so they share this one healthcheck too: it reads the command of
the container's main process (PID 1) and probes that process's own endpoint
on loopback. Exit status 0: healthy; 1: not (the reason on stderr).

| PID 1 runs          | probe                                                 |
| ------------------- | ----------------------------------------------------- |
| gunicorn            | GET /healthz on WEB_BIND's port                        |
| celery ... worker   | GET /metrics on JOBS_WORKER_METRICS_PORT               |
| ... jobs_scheduler  | GET /metrics on JOBS_SCHEDULER_METRICS_PORT            |
| celery ... flower   | GET /healthcheck (under FLOWER_URL_PREFIX) on FLOWER_PORT |
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from config.env import env

TIMEOUT_SECONDS = 5


def probe_url(argv: list[str]) -> str:
    """The loopback URL that proves the process running `argv` serves.

    Raises ValueError for a command that is none of the app processes.
    """
    words = [Path(word).name for word in argv]
    if "gunicorn" in words:
        port = env.str("WEB_BIND", default="127.0.0.1:8000").rpartition(":")[2]
        return f"http://127.0.0.1:{port}/healthz"
    if "jobs_scheduler" in words:
        port = env.int("JOBS_SCHEDULER_METRICS_PORT", default=9809)
        return f"http://127.0.0.1:{port}/metrics"
    if "celery" in words and "flower" in words:
        port = env.int("FLOWER_PORT", default=5555)
        prefix = env.str("FLOWER_URL_PREFIX", default="").strip("/")
        return f"http://127.0.0.1:{port}{'/' + prefix if prefix else ''}/healthcheck"
    if "celery" in words and "worker" in words:
        return f"http://127.0.0.1:{env.int('JOBS_WORKER_METRICS_PORT', default=9808)}/metrics"
    raise ValueError(f"no healthcheck for command {argv!r}")


def main_command(pid: int = 1) -> list[str]:
    """argv of process `pid` (Linux /proc). Raises OSError when it cannot be read."""
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def check(url: str) -> None:
    """GET `url`; raises OSError (urllib's errors included) unless it answers 200."""
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - loopback
        if response.status != 200:
            raise OSError(f"{url} answered {response.status}")


def main() -> int:
    """Probe PID 1's endpoint; the exit status for Docker's HEALTHCHECK."""
    try:
        check(probe_url(main_command()))
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
