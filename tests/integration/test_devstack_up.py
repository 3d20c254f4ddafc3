"""Issue 19, item 5 (and issue 18, item 5): `make up` and `make observe` as a developer runs them.

Each test runs `python -m devstack up|observe` in a subprocess, every port
set to a spare one through its environment variable (devstack.ports), a
SQLite file and a redis-server of its own. A busy port is one line on
stderr naming its variable, exit status 1, nothing started; every URL the
command prints answers 200 (with the credentials it prints); SIGINT or
SIGTERM stops everything it started (no process left, every port free
again) with exit status 0 and no traceback.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from devstack import ports as port_vars
from devstack.processes import ROOT
from devstack.services import RedisServer, free_port, wait_for

pytestmark = pytest.mark.integration

READY_LINE = "Ctrl-C stops everything."
URL = re.compile(r"https?://\S+")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def spare_ports() -> dict[str, int]:
    """A distinct free port for every port variable."""
    ports: dict[str, int] = {}
    while len(ports) < len(port_vars.OBSERVE_PORTS):
        port = free_port()
        if port not in ports.values():
            ports[port_vars.OBSERVE_PORTS[len(ports)]] = port
    return ports


@dataclass
class Run:
    """One `python -m devstack <command>` in a subprocess, its output in files."""

    process: subprocess.Popen
    stdout: Path
    stderr: Path
    ports: dict[str, int]

    def out(self) -> str:
        return self.stdout.read_text(errors="replace")

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def wait_printed(self, text: str, *, stream: str = "out", timeout: float = 240) -> None:
        def printed() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode}:\n{self.err()[-3000:]}")
            return text in (self.out() if stream == "out" else self.err())

        wait_for(printed, timeout=timeout, interval=0.2, what=f"{text!r} printed")


@pytest.fixture
def devstack(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., Run]]:
    """Start `python -m devstack <command>` with `env` over spare ports; stopped at the end."""
    runs: list[Run] = []

    def start(command: str, **env: str) -> Run:
        ports = spare_ports()
        environ = {
            **os.environ,
            **{name: str(port) for name, port in ports.items()},
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "REDIS_URL": redis_url,
            "OTEL_SDK_DISABLED": "true",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        environ.pop("CELERY_BROKER_URL", None)
        stdout, stderr = tmp_path / f"{command}.out", tmp_path / f"{command}.err"
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "devstack", command],
                cwd=ROOT,
                env=environ,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                # As a shell's background job (`make up &`) starts it: SIGINT
                # ignored, which the devstack must undo (issue 19 item 7).
                preexec_fn=_as_background_job,  # noqa: PLW1509 — one signal call, before exec
            )
        run = Run(process, stdout, stderr, ports)
        runs.append(run)
        return run

    try:
        yield start
    finally:
        for run in runs:
            leftovers = run.descendants()
            if run.process.poll() is None:
                run.process.terminate()
                try:
                    run.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    run.process.kill()
                    run.process.wait()
            for process in leftovers:
                if process.is_running():
                    process.kill()


def _as_background_job() -> None:
    # What a non-interactive shell does to `cmd &`: SIGINT (and SIGQUIT) ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def printed_links(output: str) -> list[tuple[str, dict]]:
    """(URL, requests' keyword arguments) of every URL a line of `output` prints.

    The API's token is the one of the `export TOKEN=<token>` line printed last,
    alone on its line, to paste into a shell (issue 19 item 7).
    """
    exported = re.findall(r"^export TOKEN=([0-9a-f]{40})$", output, flags=re.MULTILINE)
    assert len(exported) == 1, output
    links = []
    for line in output.splitlines():
        for url in URL.findall(line):
            kwargs: dict = {}
            if "Authorization: Token $TOKEN" in line:
                kwargs["headers"] = {"Authorization": f"Token {exported[0]}"}
            if basic := re.search(r"basic auth ([^:\s]+):([^)\s]+)", line):
                kwargs["auth"] = (basic[1], basic[2])
            links.append((url.rstrip(")"), kwargs))
    return links


def stop_and_check(run: Run, sig: signal.Signals) -> None:
    """Send `sig`; the run exits 0 without a traceback and leaves nothing behind."""
    started = run.descendants()
    assert started, "no process started"
    run.process.send_signal(sig)
    assert run.process.wait(timeout=120) == 0, run.err()[-3000:]
    assert "Traceback" not in run.err(), run.err()
    assert "Traceback" not in run.out(), run.out()
    gone, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, f"left running: {[p.info for p in alive]}"
    assert not [name for name, port in run.ports.items() if listening(port)]


@pytest.mark.parametrize(
    ("command", "variable"),
    [("up", name) for name in port_vars.UP_PORTS]
    + [("observe", name) for name in port_vars.OBSERVE_PORTS if name not in port_vars.UP_PORTS],
)
@pytest.mark.timeout(120)
def test_a_busy_port_is_one_line_naming_its_variable(devstack, command: str, variable: str) -> None:
    # given something listening on the port of `variable`
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = devstack(command, **{variable: str(port)})
        # then the command refuses with one line naming the variable, starting nothing
        assert run.process.wait(timeout=90) == 1
    lines = run.err().strip().splitlines()
    assert len(lines) == 1, run.err()
    assert f"{variable}={port}" in lines[0]
    assert "in use" in lines[0]
    assert run.out() == ""


@pytest.mark.timeout(120)
def test_ports_that_are_not_ports_or_shared_are_refused(devstack) -> None:
    run = devstack("up", DEVSTACK_WEB_PORT="http")
    assert run.process.wait(timeout=90) == 1
    assert "DEVSTACK_WEB_PORT='http': not a TCP port" in run.err()
    shared = devstack("up", JOBS_PUBLIC_PORT="18888", FLOWER_PORT="18888")
    assert shared.process.wait(timeout=90) == 1
    assert "FLOWER_PORT=18888: the same port as JOBS_PUBLIC_PORT" in shared.err()


# Both commands, both signals: SIGINT and SIGTERM share one handler, so each
# command is stopped by one of them here, and each signal stops a start
# half-way below (a full start costs ~30-60 s on a busy machine).
@pytest.mark.parametrize(("command", "sig"), [("up", signal.SIGINT), ("observe", signal.SIGTERM)])
@pytest.mark.timeout(420)
def test_every_printed_url_answers_and_a_signal_stops_everything(
    devstack, command: str, sig: signal.Signals
) -> None:
    # given `make up` / `make observe` on spare ports, started
    run = devstack(command)
    run.wait_printed(READY_LINE)
    links = printed_links(run.out())
    public = f"http://127.0.0.1:{run.ports[port_vars.PUBLIC]}/"
    # then the admin, the API and Flower are printed on the public (nginx) port
    assert sum(url.startswith(public) for url, _ in links) >= 4, run.out()
    # and every printed URL answers, with the credentials printed beside it
    for url, kwargs in links:
        response = requests.get(url, timeout=10, **kwargs)
        assert response.status_code == 200, (url, response.status_code, response.text[:300])
    # and /metrics is not on the public port
    assert requests.get(f"{public}metrics", timeout=10).status_code == 404
    # when it gets SIGINT or SIGTERM, it stops everything cleanly
    stop_and_check(run, sig)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.timeout(300)
def test_a_signal_while_starting_stops_cleanly(devstack, sig: signal.Signals) -> None:
    # given `make observe` in the middle of starting its processes
    run = devstack("observe")
    run.wait_printed("[devstack] redis:", stream="err")
    wait_for(lambda: len(run.descendants()) >= 1, timeout=60, what="a process started")
    # then a signal stops it and what it started, with no traceback
    stop_and_check(run, sig)
