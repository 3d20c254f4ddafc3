"""Every attempt has a span, in the trace of the request that submitted its job.

Issue 4, Acceptance: "With `worker_max_tasks_per_child=1` and an in-memory
exporter: 10 jobs submitted through the API give 10 attempt spans, each in
its request's trace; a job that retried twice has three attempt spans
(attempt 1, 2, 3) in one trace; no span lost."

Spans are made in other processes (gunicorn workers, the scheduler, worker
children that exit after one task), so the "in-memory exporter" is the
JSON-lines file exporter every process appends to (JOBS_OTEL_SPAN_FILE,
observability.tracing.JsonLinesSpanExporter), read back by the test.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devstack.services import wait_for
from tests.integration.harness import Platform

ATTEMPT_PREFIX = "job.attempt"


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _attempt_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(ATTEMPT_PREFIX)]


def _chain(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`span` and its ancestors present in the file, child first."""
    chain = [span]
    while (parent := chain[-1]["parent_span_id"]) in by_id:
        chain.append(by_id[parent])
    return chain


def _request_span(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict | None:
    """The Django server span (POST api/jobs/) among the ancestors of `span`, if exported."""
    for ancestor in _chain(span, by_id)[1:]:
        if ancestor["kind"] == "SERVER" and ancestor["name"].startswith("POST"):
            return ancestor
    return None


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_attempt_spans_in_their_request_trace_none_lost(
    platform_factory: Callable[..., Platform], tmp_path: Path
) -> None:
    # given a platform tracing to one span file from every process, children that exit
    # after one task, and demo.flaky retrying fast
    span_file = tmp_path / "spans.jsonl"
    platform = platform_factory(
        "tracing",
        env={
            "OTEL_SDK_DISABLED": "false",
            "JOBS_OTEL_SPAN_FILE": str(span_file),
            "JOBS_WORKER_MAX_TASKS_PER_CHILD": "1",
            "JOBS_KIND_OVERRIDES": json.dumps(
                {"demo.flaky": {"backoff_base": 0.2, "backoff_floor": 0.1, "backoff_cap": 0.5}}
            ),
        },
    )

    # when 10 jobs are submitted through the API, 5 of them by a client that sends its
    # own W3C traceparent, and one job that fails twice before it succeeds
    client_traces: dict[str, str] = {}  # job id -> trace id the client chose
    singles: list[str] = []
    for i in range(10):
        headers = {}
        if i % 2 == 0:
            trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
            headers["traceparent"] = f"00-{trace_id}-{parent_id}-01"
        response = platform.post_job(
            {"kind": "demo.flaky", "payload": {"fail_times": 0}}, headers=headers
        )
        assert response.status_code == 202, response.text
        singles.append(response.json()["id"])
        if headers:
            client_traces[singles[-1]] = trace_id
    retried = platform.submit("demo.flaky", {"fail_times": 2})
    jobs = {job_id: platform.wait_job(job_id, timeout=120) for job_id in [*singles, retried]}
    assert {j["status"] for j in jobs.values()} == {"succeeded"}
    assert jobs[retried]["attempts_made"] == 3

    # then (waiting for the exporters to flush, with a deadline) the file holds one attempt
    # span per attempt, 13, and every ancestor up to each job's request span
    def complete() -> list[dict[str, Any]] | None:
        spans = _spans(span_file)
        by_id = {s["span_id"]: s for s in spans}
        attempts = _attempt_spans(spans)
        if len(attempts) < 13:
            return None
        if any(_request_span(s, by_id) is None for s in attempts):
            return None
        return spans

    try:
        spans = wait_for(complete, timeout=60, interval=0.5, what="13 attempt spans, all chained")
    except TimeoutError as exc:
        found = _spans(span_file)
        summary = [(s["name"], s["kind"], s["attributes"].get("job.id")) for s in found]
        raise AssertionError(f"{exc}: {len(found)} spans: {summary}") from None
    by_id = {s["span_id"]: s for s in spans}
    attempts = _attempt_spans(spans)

    # and no attempt span is lost or doubled: exactly one per (job, attempt)
    keys = sorted((s["attributes"]["job.id"], s["attributes"]["job.attempt"]) for s in attempts)
    expected_keys = sorted([(j, 1) for j in singles] + [(retried, n) for n in (1, 2, 3)])
    assert keys == expected_keys

    # and each of the 10 has its attempt span in its own request's trace
    trace_ids = set()
    for job_id in singles:
        (span,) = [s for s in attempts if s["attributes"]["job.id"] == job_id]
        request = _request_span(span, by_id)
        assert request is not None
        assert span["trace_id"] == request["trace_id"]
        assert span["attributes"]["job.outcome"] == "succeeded"
        assert span["attributes"]["job.kind"] == "demo.flaky"
        # the job row keeps the request span's context, the attempt row the trace id
        stored = platform.scalar("SELECT trace_parent FROM jobs_job WHERE id = %s", (job_id,))
        assert stored.split("-")[1:3] == [request["trace_id"], request["span_id"]], stored
        assert jobs[job_id]["attempts"][0]["trace_id"] == span["trace_id"]
        if job_id in client_traces:
            assert span["trace_id"] == client_traces[job_id]
        trace_ids.add(span["trace_id"])
    assert len(trace_ids) == 10, "each request has a trace of its own"

    # and the retried job's three attempts are attempts 1, 2, 3 in one trace, its request's
    three = sorted(
        (s for s in attempts if s["attributes"]["job.id"] == retried),
        key=lambda s: s["attributes"]["job.attempt"],
    )
    assert [s["attributes"]["job.attempt"] for s in three] == [1, 2, 3]
    assert [s["attributes"]["job.outcome"] for s in three] == ["error", "error", "succeeded"]
    assert len({s["trace_id"] for s in three}) == 1
    requests_of = {_request_span(s, by_id)["span_id"] for s in three}  # type: ignore[index]
    assert len(requests_of) == 1
    assert three[0]["trace_id"] not in trace_ids
    # and the failed attempts carry the delay before their retry
    assert all(s["attributes"].get("job.retry_delay_seconds") is not None for s in three[:2])
    assert "job.retry_delay_seconds" not in three[2]["attributes"]
    # and they ran in three different children (one task per child)
    assert len({s["pid"] for s in three}) == 3
    # and the HTTP server spans are named by route template (OpenTelemetry's http.route),
    # not by the router's regex; scrapes and health checks are not traced
    for path in (f"/api/jobs/{retried}/", "/metrics", "/healthz"):
        assert platform.session.get(platform.url(path), timeout=30).status_code == 200

    def job_get_span() -> dict[str, Any] | None:
        for span in _spans(span_file):
            if span["kind"] == "SERVER" and span["name"].startswith("GET /api/jobs/"):
                return span
        return None

    got = wait_for(job_get_span, timeout=30, interval=0.5, what="GET job span")
    assert got["name"] == "GET /api/jobs/{pk}/", got["name"]
    assert got["attributes"]["http.route"] == "/api/jobs/{pk}/"
    server = [s for s in _spans(span_file) if s["kind"] == "SERVER"]
    assert {s["name"] for s in server} <= {"POST /api/jobs/", "GET /api/jobs/{pk}/"}, server
    assert not [s for s in server if "metrics" in s["name"] or "healthz" in s["name"]]
    names: dict[str, int] = {}
    for span in spans:
        names[span["name"]] = names.get(span["name"], 0) + 1
    print("tracing figures:", json.dumps({"spans": len(spans), "by_name": names}, indent=1))
