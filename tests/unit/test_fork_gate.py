"""jobs.fork_gate: a fork waits for the other threads' sections, so no child inherits a held lock.

The scenarios run in fresh interpreters (tests/unit/fork_scenario.py) and
fork with billiard, as the worker's pool does. Ungated, the child wedges
for good (issue 19's `netrc` import lock; a plain lock); gated, the fork
waits for the section and the child finishes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.fork_gate import ForkGate

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = Path(__file__).with_name("fork_scenario.py")
SLOW_RECEIVER_SECONDS = 1.0


class _Receiver(BaseHTTPRequestHandler):
    """A slow OTLP/HTTP receiver at /slow, a healthy webhook receiver at /ok."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/slow"):
            time.sleep(SLOW_RECEIVER_SECONDS)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


@pytest.fixture(scope="module")
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_scenario(scenario: str, mode: str, receiver: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NETRC": str(ROOT / "no-such-netrc")}
    out = subprocess.run(
        [sys.executable, str(SCENARIO), scenario, mode, receiver],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    print(f"{scenario} {mode}: {result}")
    return result


@pytest.mark.parametrize("scenario", ["otlp-netrc", "lock"])
def test_fork_gate_child_forked_beside_a_busy_thread_wedges_only_without_the_gate(
    scenario: str, receiver: str
) -> None:
    # given a thread mid-export (or holding a lock) when the process forks,
    # when the thread does not work inside a fork-gate section
    ungated = run_scenario(scenario, "ungated", receiver)
    # then the child wedges for good (the hazard is real)
    assert ungated["finished"] is False, ungated

    # when the thread works inside a section, as every thread of the worker's main process does
    gated = run_scenario(scenario, "gated", receiver)
    # then the fork waited for the section and the child finished its request
    assert gated == {**gated, "finished": True, "exitcode": 0}, gated
    assert float(gated["fork_waited_seconds"]) > 0.2, gated  # type: ignore[arg-type]


def test_fork_gate_waits_for_other_threads_and_keeps_new_sections_out() -> None:
    # given a gate and a thread inside a section
    gate = ForkGate()
    inside, release = threading.Event(), threading.Event()
    entered_during_fork = threading.Event()

    def work() -> None:
        with gate.section("work"):
            inside.set()
            release.wait(5)

    worker = gate.register(threading.Thread(target=work, daemon=True))
    worker.start()
    inside.wait(5)

    # when a fork starts (the before hook), then it waits for the section
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    gate.before_fork()
    waited = time.monotonic() - started
    assert waited >= 0.25, waited

    # and no section starts until the fork is over
    def late() -> None:
        with gate.section("late"):
            entered_during_fork.set()

    threading.Thread(target=late, daemon=True).start()
    assert not entered_during_fork.wait(0.2)
    gate.after_fork_in_parent()
    assert entered_during_fork.wait(5)
    assert gate.forks == 1
    assert gate.longest_wait_seconds >= 0.25


def test_fork_gate_names_an_unregistered_thread_once(caplog: pytest.LogCaptureFixture) -> None:
    gate = ForkGate()
    stop = threading.Event()
    stray = threading.Thread(target=stop.wait, name="stray-exporter", daemon=True)
    stray.start()
    try:
        for _ in range(2):
            gate.before_fork()
            gate.after_fork_in_parent()
    finally:
        stop.set()
    named = [r for r in caplog.records if "stray-exporter" in r.getMessage()]
    assert len(named) == 1, [r.getMessage() for r in caplog.records]
    assert "not under jobs.fork_gate" in named[0].getMessage()


def test_fork_gate_a_thread_may_fork_from_inside_its_own_section() -> None:
    gate = ForkGate()
    with gate.section("own"):
        started = time.monotonic()
        gate.before_fork()
        gate.after_fork_in_parent()
    assert time.monotonic() - started < 1.0
