"""A real Alertmanager (Debian's `prometheus-alertmanager`) and a webhook sink that records it.

`platform/alertmanager/alertmanager.yml` routes every alert to one webhook
on loopback (DEFAULT_WEBHOOK_URL). `make observe` and the tests run the
binary with that file, its webhook URL pointed at an `AlertSink` here, and
optionally shorter grouping timings so a test sees a notification in
seconds:

    with AlertSink() as sink, AlertmanagerServer(webhook_url=sink.url) as am:
        ...  # Prometheus sends to f"127.0.0.1:{am.port}"
        sink.wait_for_alert("RetryStorm", timeout=30)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from devstack.debian import ensure_binary
from devstack.loopback import LoopbackHTTPServer
from devstack.services import free_port, start_daemon, stop_process, wait_for

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_CONFIG = ROOT / "platform" / "alertmanager" / "alertmanager.yml"
DEFAULT_WEBHOOK_URL = "http://127.0.0.1:9095/alerts"


class AlertSink(LoopbackHTTPServer):
    """HTTP server on 127.0.0.1:`port` (0: any free port) recording Alertmanager webhook posts.

    `notifications` holds each POSTed JSON body (Alertmanager's webhook
    payload: status, alerts with labels and annotations, ...).
    """

    def __init__(self, port: int = 0, *, echo: bool = False) -> None:
        self.notifications: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payload = json.loads(body or b"{}")
                except ValueError:
                    payload = {"unparsed": body.decode(errors="replace")}
                with sink._lock:
                    sink.notifications.append(payload)
                if echo:
                    print(describe(payload), flush=True)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        super().__init__(port, Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    def alerts(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every alert received so far (each with `status`, `labels`, `annotations`), or `name`'s."""
        with self._lock:
            received = [alert for n in self.notifications for alert in n.get("alerts", [])]
        return [a for a in received if name is None or a["labels"].get("alertname") == name]

    def wait_for_alert(
        self, name: str, *, status: str = "firing", timeout: float = 60
    ) -> dict[str, Any]:
        """Wait until a notification carries alert `name` with `status`; return it."""

        def received() -> dict[str, Any] | None:
            return next((a for a in self.alerts(name) if a.get("status") == status), None)

        return wait_for(received, timeout=timeout, interval=0.2, what=f"notification {name}")


def describe(payload: dict[str, Any]) -> str:
    """One line per alert of a webhook payload: status, name, labels, summary."""
    lines = []
    for alert in payload.get("alerts", []):
        labels = dict(alert.get("labels", {}))
        name = labels.pop("alertname", "?")
        summary = alert.get("annotations", {}).get("summary", "")
        lines.append(f"[alert] {alert.get('status', '?')} {name} {labels} {summary}")
    return "\n".join(lines)


def render_config(
    *,
    webhook_url: str,
    base: Path = SHIPPED_CONFIG,
    timings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`base` with every webhook URL set to `webhook_url` and route `timings` overridden.

    `timings`: e.g. {"group_wait": "1s", "group_interval": "1s"} for tests.
    """
    config = yaml.safe_load(base.read_text())
    for receiver in config.get("receivers", []):
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = webhook_url
    config["route"].update(timings or {})
    return config


@dataclass
class AlertmanagerServer:
    """Debian's Alertmanager on 127.0.0.1:`port` (0: a free one), clustering off.

    Its config is `render_config(webhook_url=..., timings=...)` of the
    shipped file; state and log (`alertmanager.log`) live in a temporary
    directory removed by `stop()`.
    """

    webhook_url: str = DEFAULT_WEBHOOK_URL
    timings: dict[str, str] = field(default_factory=dict)
    base_config: Path = SHIPPED_CONFIG
    port: int = 0
    workdir: Path | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """host:port, as Prometheus's alerting config wants it."""
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        if self.workdir is None:
            return ""
        path = self.workdir / "alertmanager.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, *, timeout: float = 60) -> AlertmanagerServer:
        """Start the binary; return once /-/ready answers 200.

        Raises MissingBinary when it is absent and cannot be installed,
        RuntimeError when it exits early, TimeoutError when never ready.
        """
        binary = ensure_binary("prometheus-alertmanager")
        self.workdir = Path(tempfile.mkdtemp(prefix="jobs-alertmanager-"))
        self.port = self.port or free_port()
        config_path = self.workdir / "alertmanager.yml"
        config = render_config(
            webhook_url=self.webhook_url, base=self.base_config, timings=self.timings
        )
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.process = start_daemon(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # No gossip port: a single local instance.
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            log_path=self.workdir / "alertmanager.log",
            ready_url=f"{self.url}/-/ready",
            timeout=timeout,
            what="alertmanager",
            on_failure=self.stop,
        )
        return self

    def stop(self, *, timeout: float = 10) -> None:
        """Stop the process by pid (SIGTERM, then SIGKILL) and remove its directory."""
        stop_process(self.process, timeout=timeout)
        self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
