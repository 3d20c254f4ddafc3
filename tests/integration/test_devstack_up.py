"""`make up` as a newcomer runs it: the token line to paste, and Ctrl-C from a background shell.

Issue 19, item 7: started from a background shell (`make up &`), the
process inherits SIGINT ignored, and `make up` kept running on SIGINT (only
SIGTERM stopped it); and it printed the API token inside a header instead of
a line to paste. Here `python -m devstack up` (what `make up` runs) starts
with SIGINT ignored, as a shell's background job does; the printed
`export TOKEN=...` line must work against the printed API URL, and SIGINT
must stop the devstack and every process it started.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests

from devstack.services import RedisServer, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Every port `make up` may listen on, as environment variables (some are read only
# once the devstack names every port): all free, so a busy default never interferes.
PORT_VARIABLES = (
    "JOBS_PUBLIC_PORT",
    "DEVSTACK_WEB_PORT",
    "FLOWER_PORT",
    "JOBS_WORKER_METRICS_PORT",
    "JOBS_SCHEDULER_METRICS_PORT",
)
TOKEN_LINE = re.compile(r"^export TOKEN=([0-9a-f]{40})$")
API_URL = re.compile(r"(http://127\.0\.0\.1:\d+/api/jobs/)")
START_SECONDS = 120
STOP_SECONDS = 30


def _as_background_job() -> None:
    # What a non-interactive shell does to `cmd &`: SIGINT (and SIGQUIT) ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """`python -m devstack up` started as a background job; yields it and its stdout so far."""
    redis_server = RedisServer().start()
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "CELERY_BROKER_URL": redis_server.url,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'up.sqlite3'}",
        "JOBS_METRICS_DIR": str(tmp_path / "metrics"),
        "PYTHONUNBUFFERED": "1",
        **{name: str(free_port()) for name in PORT_VARIABLES},
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "devstack", "up"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_as_background_job,  # noqa: PLW1509 — one signal call, before exec
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        yield process, lines
    finally:
        tree = _descendants(process.pid)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for child in tree:
            if child.is_running():
                child.kill()
        redis_server.stop()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _read_until(process: subprocess.Popen, lines: list[str], pattern: re.Pattern[str]) -> str:
    """Collect `process`'s output lines until one matches `pattern`; returns that line."""
    assert process.stdout is not None
    found: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            found.put(line.rstrip("\n"))
        found.put(None)

    threading.Thread(target=read, name="devstack-up-output", daemon=True).start()
    deadline = time.monotonic() + START_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = found.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        lines.append(line)
        if pattern.search(line):
            return line
    raise AssertionError(f"no line matching {pattern.pattern!r}:\n" + "\n".join(lines[-40:]))


@pytest.mark.timeout(300)
def test_make_up_prints_a_token_line_to_paste_and_stops_on_sigint_in_the_background(
    up: tuple[subprocess.Popen, list[str]],
) -> None:
    process, lines = up
    # given `make up` started as a background job (SIGINT ignored), running
    token_line = _read_until(process, lines, TOKEN_LINE)
    assert process.poll() is None, "\n".join(lines)

    # then it printed `export TOKEN=<token>` alone on a line, and that token opens the API
    match = TOKEN_LINE.match(token_line)
    assert match, token_line
    api = next((m.group(1) for line in lines if (m := API_URL.search(line))), None)
    assert api, "\n".join(lines)
    response = requests.get(api, headers={"Authorization": f"Token {match.group(1)}"}, timeout=10)
    assert response.status_code == 200, response.text

    # when it gets SIGINT (Ctrl-C)
    started = _descendants(process.pid)
    assert len(started) >= 4, started  # web, worker, scheduler, Flower (and their children)
    process.send_signal(signal.SIGINT)

    # then it stops, exit status 0, with every process it started
    assert process.wait(timeout=STOP_SECONDS) == 0, "\n".join(lines)
    _, alive = psutil.wait_procs(started, timeout=STOP_SECONDS)
    assert alive == [], alive
