"""Issue 18 item 7: secrets in a job's URL or headers never reach error text, anywhere an error travels.

Jobs whose CSV URL carries `user:password@` and a `?token=`, and whose
webhook URL carries `?token=` and an `Authorization` header, fail against a
server that echoes the request line and Authorization back in its 503 page,
and against a closed port (requests' messages embed the URL, in chained
exceptions too). Each job is retried once, then dead. The secrets must be in
none of: the job's `last_error`, each attempt's error and traceback, the
worker's log, the exception and traceback a real Flower shows for every
task (from Celery's task-retried / task-failed events), and the exported
spans (a JSON-lines file exporter; `celery.retry.reason`, exception events).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import requests

from devstack.loopback import LoopbackHTTPServer
from devstack.processes import Process
from devstack.services import free_port, wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform, PlatformFactory, require_postgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FLOWER_AUTH = ("flower", "flower-pass")
FAST_TWO_ATTEMPTS = {
    "max_attempts": 2,
    "backoff_base": 0.1,
    "backoff_floor": 0.05,
    "backoff_cap": 0.2,
}
PASSWORD = f"pw-{uuid.uuid4().hex}"
TOKEN = f"tok-{uuid.uuid4().hex}"
HEADER_TOKEN = f"hdr-{uuid.uuid4().hex}"
SECRETS = (
    PASSWORD,
    TOKEN,
    HEADER_TOKEN,
    base64.b64encode(f"user:{PASSWORD}".encode()).decode(),  # the Basic header requests sends
)


class EchoingFailure(BaseHTTPRequestHandler):
    """503 whose page echoes the request line and the Authorization header, as error pages do."""

    def log_message(self, *args: object) -> None:
        pass

    def _fail(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = f"no backend for {self.requestline}\nAuthorization: {self.headers.get('Authorization')}\n"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = _fail  # noqa: N815 - http.server's names


@dataclass
class Leaks:
    platform: Platform
    flower: Process
    flower_url: str
    span_file: Path
    jobs: list[dict[str, Any]]

    def flower_tasks(self) -> dict[str, Any]:
        response = requests.get(
            f"{self.flower_url}/api/tasks", auth=FLOWER_AUTH, timeout=HTTP_TIMEOUT
        )
        assert response.status_code == 200, response.text[:500]
        return response.json()


@pytest.fixture(scope="module")
def leaks(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Leaks]:
    require_postgres()
    span_file = tmp_path_factory.mktemp("secrets") / "spans.jsonl"
    factory = PlatformFactory(logroot=_logroot)
    with LoopbackHTTPServer(0, EchoingFailure) as echo:
        try:
            platform = factory(
                "secrets",
                env={
                    "JOBS_KIND_OVERRIDES": json.dumps(
                        {
                            "webhook.deliver": FAST_TWO_ATTEMPTS,
                            "report.csv_summary": FAST_TWO_ATTEMPTS,
                        }
                    ),
                    "OTEL_SDK_DISABLED": "false",
                    "JOBS_OTEL_SPAN_FILE": str(span_file),
                },
            )
            flower_port = free_port()
            flower = platform.stack.start(
                "flower",
                f"--port={flower_port}",
                env={
                    "FLOWER_BASIC_AUTH": ":".join(FLOWER_AUTH),
                    "FLOWER_DB": str(tmp_path_factory.mktemp("flower") / "flower.db"),
                },
            )
            flower_url = f"http://127.0.0.1:{flower_port}"
            _wait_for_flower(flower, flower_url)
            # given failing jobs whose URLs and headers carry secrets
            closed = free_port()
            payloads = [
                ("report.csv_summary", {"source": _csv_url(echo.port)}),
                ("report.csv_summary", {"source": _csv_url(closed)}),
                ("webhook.deliver", _webhook(echo.port)),
                ("webhook.deliver", _webhook(closed)),
            ]
            ids = [platform.submit(kind, payload) for kind, payload in payloads]
            # when each has been retried once and is dead
            jobs = [platform.wait_job(job_id, timeout=120) for job_id in ids]
            yield Leaks(platform, flower, flower_url, span_file, jobs)
        finally:
            factory.close()


def _csv_url(port: int) -> str:
    return f"http://user:{PASSWORD}@127.0.0.1:{port}/data.csv?token={TOKEN}&x=1"


def _webhook(port: int) -> dict[str, Any]:
    return {
        "url": f"http://127.0.0.1:{port}/hook?token={TOKEN}",
        "headers": {"Authorization": f"Bearer {HEADER_TOKEN}"},
        "connect_timeout": 1,
    }


def _wait_for_flower(flower: Process, url: str) -> None:
    def worker_known() -> bool:
        if not flower.alive():
            raise RuntimeError(f"flower exited early:\n{flower.log()[-3000:]}")
        try:
            response = requests.get(f"{url}/workers?json=1", auth=FLOWER_AUTH, timeout=5)
            return response.status_code == 200 and bool(response.json()["data"])
        except (requests.RequestException, ValueError):
            return False

    wait_for(worker_known, timeout=90, interval=0.5, what="flower to see the worker")


def _leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_jobs_failed_as_expected(leaks: Leaks) -> None:
    # The failures happened (otherwise the checks below would prove nothing).
    assert [(j["status"], j["attempts_made"]) for j in leaks.jobs] == [("dead", 2)] * 4, leaks.jobs
    assert "HTTP 503" in leaks.jobs[0]["last_error"]
    assert "HTTP 503" in leaks.jobs[2]["last_error"]


def test_no_secret_in_last_error_or_attempts(leaks: Leaks) -> None:
    rows = leaks.platform.rows(
        "SELECT j.last_error, a.error_message, a.traceback FROM jobs_attempt a "
        "JOIN jobs_job j ON j.id = a.job_id ORDER BY j.id, a.number"
    )
    assert len(rows) == 8, rows
    assert all(traceback for _, _, traceback in rows)
    text = json.dumps(rows)
    assert _leaked(text) == [], text
    assert "***" in text  # the redacted places are marked


def test_no_secret_in_the_worker_log(leaks: Leaks) -> None:
    assert leaks.platform.worker is not None
    log = leaks.platform.worker.log()
    assert "jobs.run_attempt" in log
    assert _leaked(log) == [], log[-5000:]


def test_no_secret_in_flower_task_exceptions(leaks: Leaks) -> None:
    def all_seen() -> bool:
        tasks = leaks.flower_tasks().values()
        return sum(1 for t in tasks if t["state"] in ("RETRY", "FAILURE")) >= 8

    wait_for(all_seen, timeout=30, interval=0.5, what="flower to see 8 failed attempts")
    tasks = leaks.flower_tasks()
    shown = [
        {"exception": t.get("exception"), "traceback": t.get("traceback")} for t in tasks.values()
    ]
    assert any(t["exception"] for t in shown)
    assert any(t["traceback"] for t in shown)
    text = json.dumps(shown)
    assert _leaked(text) == [], text


def test_no_secret_in_exported_spans(leaks: Leaks) -> None:
    def retry_reasons() -> list[str]:
        if not leaks.span_file.exists():
            return []
        spans = [json.loads(line) for line in leaks.span_file.read_text().splitlines()]
        return [
            s["attributes"]["celery.retry.reason"]
            for s in spans
            if "celery.retry.reason" in s["attributes"]
        ]

    wait_for(lambda: len(retry_reasons()) >= 4, timeout=30, interval=0.5, what="4 retry spans")
    text = leaks.span_file.read_text()
    assert _leaked(text) == [], text
