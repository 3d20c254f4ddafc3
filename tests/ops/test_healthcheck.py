"""config.healthcheck: the one container healthcheck finds each app process's endpoint."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from config.healthcheck import check, probe_url
from devstack.processes import procfile_commands


def container_argv(argv: list[str]) -> list[str]:
    """/proc/1/cmdline of a container running Procfile `argv` (console scripts run by python)."""
    if argv[0] == "python":
        return ["/usr/local/bin/python", *argv[1:]]
    return ["/usr/local/bin/python", f"/usr/local/bin/{argv[0]}", *argv[1:]]


def test_probe_url_follows_each_procfile_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # given the compose environment's listen settings (Flower under /flower/, behind nginx)
    monkeypatch.setenv("WEB_BIND", "0.0.0.0:8000")
    monkeypatch.setenv("FLOWER_URL_PREFIX", "flower")
    for variable in ("JOBS_WORKER_METRICS_PORT", "JOBS_SCHEDULER_METRICS_PORT", "FLOWER_PORT"):
        monkeypatch.delenv(variable, raising=False)
    commands = procfile_commands()
    # then each process is probed on its own loopback endpoint
    expected = {
        "web": "http://127.0.0.1:8000/healthz",
        "worker": "http://127.0.0.1:9808/metrics",
        "scheduler": "http://127.0.0.1:9809/metrics",
        "flower": "http://127.0.0.1:5555/flower/healthcheck",
    }
    assert {name: probe_url(container_argv(argv)) for name, argv in commands.items()} == expected
    # and a Flower served at the root (no prefix) is probed there
    monkeypatch.setenv("FLOWER_URL_PREFIX", "")
    flower = container_argv(commands["flower"])
    assert probe_url(flower) == "http://127.0.0.1:5555/healthcheck"
    with pytest.raises(ValueError, match="no healthcheck"):
        probe_url(["/usr/local/bin/python", "manage.py", "migrate"])


def test_check_passes_on_200_and_raises_otherwise() -> None:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/ok" else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        check(f"{base}/ok")
        with pytest.raises(OSError, match="503"):
            check(f"{base}/down")
    finally:
        server.shutdown()
        server.server_close()
