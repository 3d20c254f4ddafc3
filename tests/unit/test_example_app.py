"""example/ (issue 22, item 6): ordinary views using jobs.client and a Django task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Job, JobStatus
from jobs.runner import execute_attempt

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_example_app_is_installed_locally_not_in_production() -> None:
    assert "example" in settings.INSTALLED_APPS
    # Production settings build on base, which does not name it (local.py adds it).
    for module in ("base", "production"):
        assert '"example"' not in (ROOT / "config" / "settings" / f"{module}.py").read_text()


def test_a_view_submits_reads_and_cancels_a_kind(browser: Client, user: Any) -> None:
    answer = browser.post(
        "/example/word-count/", {"text": "a b a"}, content_type="application/json"
    )
    assert answer.status_code == 202, answer.content
    job_id = answer.json()["id"]
    assert Job.objects.get(id=job_id).created_by == user
    assert browser.get(f"/example/jobs/{job_id}/").json()["status"] == JobStatus.QUEUED
    assert browser.post(f"/example/jobs/{job_id}/cancel/").json()["status"] == "cancelled"
    assert browser.post(f"/example/jobs/{job_id}/cancel/").status_code == 409
    other = Client()
    other.force_login(User.objects.create_user("other"))
    assert other.get(f"/example/jobs/{job_id}/").status_code == 404


def test_a_view_enqueues_a_django_task(browser: Client) -> None:
    answer = browser.post(
        "/example/slugify/", {"titles": ["Hello World"]}, content_type="application/json"
    )
    assert answer.status_code == 202, answer.content
    job = Job.objects.get(id=answer.json()["id"])
    assert job.kind == "example.tasks.slugify_titles"
    assert job.payload == {"args": [], "kwargs": {"titles": ["Hello World"]}}


def test_bad_input_is_a_400_naming_the_field(browser: Client) -> None:
    answer = browser.post("/example/word-count/", {"text": ["x"]}, content_type="application/json")
    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["payload.text"]


def test_the_example_kind_and_task_report_progress(browser: Client) -> None:
    for path, body in (
        ("/example/word-count/", {"text": "a b c " * 1000}),
        ("/example/slugify/", {"titles": ["One", "Two"]}),
    ):
        job_id = browser.post(path, body, content_type="application/json").json()["id"]
        execute_attempt(job_id=job_id, attempt=1, hostname="unit@test")
        job = Job.objects.get(id=job_id)
        assert job.status == JobStatus.SUCCEEDED, job.last_error
        assert job.progress_done == job.progress_total
