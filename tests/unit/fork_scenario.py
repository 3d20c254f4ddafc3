"""Fork (as billiard does) while another thread holds a lock the child needs; print what happened.

Run by tests/unit/test_fork_gate.py in a fresh interpreter (so `netrc` is
not imported yet):

    python fork_scenario.py SCENARIO MODE RECEIVER_URL

SCENARIO "otlp-netrc": issue 19's wedge. A thread exports a span with
OpenTelemetry's OTLP/HTTP exporter to RECEIVER_URL/slow; requests imports
`netrc` on its first call (get_netrc_auth), and that import is slowed down
here so the fork lands while the thread holds the import lock of `netrc`.
The forked child then POSTs to RECEIVER_URL/ok with requests, as a webhook
attempt does. SCENARIO "lock": the thread holds a plain lock the child
then takes.

MODE "gated": the thread works inside a jobs.fork_gate section (the
platform's rule for threads of a process that forks); "ungated": it does
not. Prints one JSON line: whether the child finished, its exit code, how
long the fork waited.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from typing import Any

import billiard

from jobs import fork_gate

SLOW_IMPORT_SECONDS = 1.0
CHILD_DEADLINE_SECONDS = 8

scenario, mode, receiver = sys.argv[1], sys.argv[2], sys.argv[3]
busy = threading.Event()
shared = threading.Lock()


class SlowNetrcFinder(importlib.abc.MetaPathFinder):
    """Makes the first import of `netrc` take SLOW_IMPORT_SECONDS, its module lock held."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "netrc":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        assert spec is not None
        assert spec.loader is not None
        real = spec.loader

        class Slow(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return real.create_module(spec)

            def exec_module(self, module: Any) -> None:
                busy.set()
                time.sleep(SLOW_IMPORT_SECONDS)
                real.exec_module(module)

        spec.loader = Slow()
        return spec


def span() -> Any:
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415 - the scenario's order: imported before or after the fork it tests

    ended = TracerProvider().get_tracer("fork-scenario").start_span("job.attempt demo")
    ended.end()
    return ended


def thread_work() -> None:
    section = fork_gate.section("scenario") if mode == "gated" else contextlib.nullcontext()
    with section:
        if scenario == "otlp-netrc":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415 - the scenario's order: imported before or after the fork it tests

            OTLPSpanExporter(endpoint=f"{receiver}/slow", timeout=10).export([span()])
        else:
            with shared:
                busy.set()
                time.sleep(SLOW_IMPORT_SECONDS)


def child() -> None:
    if scenario == "otlp-netrc":
        import requests  # noqa: PLC0415 - the scenario's order: imported before or after the fork it tests

        requests.post(f"{receiver}/ok", json={"attempt": 1}, timeout=5).raise_for_status()
    else:
        with shared:
            pass


def main() -> None:
    sys.meta_path.insert(0, SlowNetrcFinder())
    worker = threading.Thread(target=thread_work, name="exporter", daemon=True)
    if mode == "gated":
        fork_gate.register(worker)
    worker.start()
    busy.wait(30)
    process = billiard.Process(target=child)
    forking = time.monotonic()
    process.start()  # billiard's Popen: os.fork, so the fork gate's hooks run
    forked_after = time.monotonic() - forking
    process.join(CHILD_DEADLINE_SECONDS)
    finished = not process.is_alive()
    if not finished and process.pid:
        os.kill(process.pid, 9)
        process.join(5)
    print(
        json.dumps(
            {
                "finished": finished,
                "exitcode": process.exitcode if finished else None,
                "fork_waited_seconds": round(forked_after, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
