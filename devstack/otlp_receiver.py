"""A slow OTLP/HTTP trace receiver on loopback, for the fork-safety tests and the soak.

Answers every POST to /v1/traces after `delay` seconds (an exporter thread
is then mid-export for that long, as with a collector that is far away or
busy) and keeps what each process sent: the decoded spans, with their
attributes, so a test can see which attempts' spans arrived.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from devstack.loopback import LoopbackHTTPServer


@dataclass(frozen=True)
class ReceivedSpan:
    """One span of one export request: its name, attributes (str values) and the sender's pid."""

    name: str
    attributes: dict[str, str]
    pid: int | None


def _value(any_value: Any) -> str:
    kind = any_value.WhichOneof("value")
    return str(getattr(any_value, kind)) if kind else ""


class SlowOtlpReceiver(LoopbackHTTPServer):
    """OTLP/HTTP (protobuf) trace receiver on 127.0.0.1:`port`; `endpoint` is its base URL."""

    def __init__(self, port: int = 0, *, delay: float = 1.0) -> None:
        self.delay = delay
        self.requests = 0
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(receiver.delay)
                receiver._record(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the exporter timed out first

        super().__init__(port, Handler)

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self.port}"

    def _record(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            pid = resource.get("process.pid")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            attributes=attributes,
                            pid=int(pid) if pid and pid.isdigit() else None,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(received)

    def attempt_spans(self) -> list[ReceivedSpan]:
        """The `job.attempt ...` spans received so far."""
        with self._lock:
            return [s for s in self.spans if s.name.startswith("job.attempt")]
