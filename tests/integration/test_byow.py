"""A fresh app brings its own work (issue 22, Acceptance): one `kinds` module, one `@task`
function, INSTALLED_APPS the only change (tests/byow_app/settings.py).

Both are submittable over HTTP, through the Python API (jobs.client) and, for the task,
Django's `enqueue`; run by a real worker; retried with backoff on a transient error; stopped
by their soft and hard limits; dead-lettered at max_attempts (3, from the kind's Policy and
the task's decorator); listed in the admin; counted in /metrics under their names.
One platform, every job submitted at once, then awaited: about 30 s, in the slow tier
(`make test-slow`, run by .ci/run).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.admin_login import admin_session
from tests.integration.harness import HTTP_TIMEOUT, Platform, PlatformFactory, require_postgres
from tests.integration.telemetry import scrape_platform

KIND = "byow.work"
TASK = "tests.byow_app.tasks.work"
BACKOFF_FLOOR = 0.2  # both policies' backoff_floor

# One manage.py shell: the Python API and Django's enqueue, as a view would call them.
_PYTHON_SCRIPT = """
import json
from jobs import client
from tests.byow_app.tasks import work
ids = {
    "kind_ok": str(client.submit("byow.work", {}).id),
    "kind_retry": str(client.submit("byow.work", {"fail_times": 1}).id),
    "task_ok": work.enqueue().id,
    "task_retry": work.enqueue(fail_times=1).id,
    "task_dead": work.enqueue(fail_times=10).id,
    "task_soft": work.enqueue(sleep_seconds=10).id,
    "task_hard": work.enqueue(sleep_seconds=10, ignore_cancel=True).id,
}
print("IDS=" + json.dumps(ids))
"""


@pytest.fixture(scope="module")
def byow(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """A platform whose settings add tests.byow_app to INSTALLED_APPS, and nothing else
    (tracing on, to a span file, to see attempts in their request's trace)."""
    require_postgres()
    factory = PlatformFactory(logroot=_logroot)
    try:
        yield factory(
            "byow",
            env={
                "DJANGO_SETTINGS_MODULE": "tests.byow_app.settings",
                "OTEL_SDK_DISABLED": "false",
                "JOBS_OTEL_SPAN_FILE": str(tmp_path_factory.mktemp("byow") / "spans.jsonl"),
            },
            worker_concurrency=3,
        )
    finally:
        factory.close()


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def _outcomes(job: dict) -> list[str]:
    return [a["outcome"] for a in job["attempts"]]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_fresh_apps_kind_and_task_run_as_platform_jobs(byow: Platform) -> None:
    platform = byow
    # given jobs submitted over HTTP ...
    ids: dict[str, str] = {
        "http_kind_ok": platform.submit(KIND, {}),
        "http_kind_dead": platform.submit(KIND, {"fail_times": 10}),
        "http_kind_soft": platform.submit(KIND, {"sleep_seconds": 10}),
        "http_kind_hard": platform.submit(KIND, {"sleep_seconds": 10, "ignore_cancel": True}),
        "http_task_ok": platform.submit(TASK, {"args": [], "kwargs": {}}),
    }
    # ... and through the Python API and Django's enqueue
    out = platform.stack.run(
        ["python", "manage.py", "shell", "-c", _PYTHON_SCRIPT], timeout=120
    ).stdout
    (line,) = [text for text in out.splitlines() if text.startswith("IDS=")]
    ids.update(json.loads(line.removeprefix("IDS=")))

    jobs = {name: platform.wait_job(job_id, timeout=150) for name, job_id in ids.items()}
    figures = {name: (job["status"], _outcomes(job)) for name, job in jobs.items()}
    print("byow:", json.dumps(figures))

    # then each ran on a real worker, under its kind's name
    for name in ("http_kind_ok", "kind_ok", "http_task_ok", "task_ok"):
        assert jobs[name]["status"] == "succeeded", (name, jobs[name])
        assert jobs[name]["attempts"][0]["worker_hostname"], jobs[name]
    assert jobs["task_ok"]["kind"] == TASK
    # retried with backoff after a transient error
    for name in ("kind_retry", "task_retry"):
        job = jobs[name]
        assert job["status"] == "succeeded", (name, job)
        assert _outcomes(job) == ["error", "succeeded"]
        first, second = job["attempts"]
        assert _ts(second["started_at"]) - _ts(first["finished_at"]) >= BACKOFF_FLOOR
    assert "ConnectionError" in jobs["task_retry"]["attempts"][0]["error_type"]
    # dead-lettered at max_attempts (3)
    for name in ("http_kind_dead", "task_dead"):
        assert figures[name] == ("dead", ["error"] * 3), figures[name]
        assert jobs[name]["dead_reason"] == "exhausted"
    # stopped by the soft and the hard time limit, on every attempt
    for name in ("http_kind_soft", "task_soft"):
        assert figures[name] == ("dead", ["soft_timeout"] * 3), figures[name]
    for name in ("http_kind_hard", "task_hard"):
        assert figures[name] == ("dead", ["hard_timeout"] * 3), figures[name]

    # and traced from the request that enqueued them: every attempt in its request's trace
    for name in ("http_kind_ok", "http_task_ok", "http_kind_dead"):
        job = jobs[name]
        assert job["trace_id"], job
        assert {a["trace_id"] for a in job["attempts"]} == {job["trace_id"]}, job

    # and they are counted in /metrics under their names
    samples = scrape_platform(platform)
    for kind in (KIND, TASK):
        assert samples.total("jobs_attempts_total", kind=kind, outcome="succeeded") >= 2, kind
        assert samples.total("jobs_attempts_total", kind=kind, outcome="hard_timeout") == 3, kind
        assert samples.total("jobs_completed_total", kind=kind, outcome="dead") == 3, kind

    # and listed in the admin with their attempts
    admin = admin_session(platform)
    for kind in (KIND, TASK):
        page = admin.get(platform.url(f"/admin/jobs/job/?kind={kind}"), timeout=HTTP_TIMEOUT)
        assert page.status_code == 200
        assert ids["task_ok" if kind == TASK else "kind_ok"] in page.text
    detail = admin.get(
        platform.url(f"/admin/jobs/job/{ids['task_retry']}/change/"), timeout=HTTP_TIMEOUT
    )
    assert detail.status_code == 200
    assert "ConnectionError" in detail.text
