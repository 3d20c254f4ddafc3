"""The doors of jobs.pauses: the staff API, the admin (with History), the management commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.models import Pause

pytestmark = pytest.mark.django_db


def _staff(perms: list[str], *, staff: bool = True, name: str = "ops") -> Any:
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    return user


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_pause_api_pause_list_resume() -> None:
    ops = _client(_staff(["view_pause", "add_pause", "delete_pause"]))

    made = ops.post(
        "/api/pauses/", {"scope": "kind", "name": "demo.flaky", "reason": "r"}, format="json"
    )
    again = ops.post("/api/pauses/", {"scope": "kind", "name": "demo.flaky"}, format="json")
    listed = ops.get("/api/pauses/")
    resumed = ops.post(
        "/api/pauses/resume/", {"scope": "kind", "name": "demo.flaky"}, format="json"
    )
    missing = ops.post(
        "/api/pauses/resume/", {"scope": "kind", "name": "demo.flaky"}, format="json"
    )

    assert (made.status_code, again.status_code) == (201, 200), made.content
    assert made.json()["paused_by"] == "ops"
    assert [(p["scope"], p["name"], p["reason"]) for p in listed.json()] == [
        ("kind", "demo.flaky", "r")
    ]
    assert resumed.status_code == 200
    assert missing.status_code == 404
    assert missing.json()["errors"] == [
        {"field": "name", "reason": "kind 'demo.flaky' is not paused"}
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "fleet", "name": "demo.flaky"}, "scope"),
        ({"scope": "kind", "name": "no.such"}, "name"),
        ({"scope": "kind", "name": "demo.flaky", "extra": 1}, "extra"),
    ],
)
def test_pause_api_bad_input_is_400_in_the_error_shape(body: dict, field: str) -> None:
    ops = _client(_staff(["add_pause"]))

    response = ops.post("/api/pauses/", body, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"detail", "errors"}
    assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.parametrize(("perms", "staff"), [([], True), (["add_pause"], False)])
def test_pause_api_is_for_staff_with_the_permission(perms: list[str], staff: bool) -> None:
    client = _client(_staff(perms, staff=staff))

    response = client.post("/api/pauses/", {"scope": "kind", "name": "demo.flaky"}, format="json")

    assert response.status_code == 403
    assert not Pause.objects.exists()


def test_pause_commands(capsys: Any) -> None:
    call_command("jobs_pause", "queue", "default", "--reason", "deploy")
    assert Pause.objects.filter(scope="queue", name="default", reason="deploy").exists()
    call_command("jobs_resume", "queue", "default")
    assert not Pause.objects.exists()
    out = capsys.readouterr().out
    assert "queue default paused since" in out
    assert "queue default resumed" in out


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("jobs_pause", ["fleet", "x"], "scope must be one of kind, queue"),
        ("jobs_pause", ["kind", "no.such"], "no kind named 'no.such'"),
        ("jobs_resume", ["kind", "demo.flaky"], "is not paused"),
    ],
)
def test_pause_commands_bad_input_is_one_line(command: str, args: list[str], says: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(command, *args)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


def test_pause_admin_actions_pause_and_resume_with_history(
    client: Any, job_factory: Callable[..., Any]
) -> None:
    admin_user = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin_user)
    job = job_factory()

    client.post(
        "/admin/jobs/job/",
        {"action": "pause_kind_action", "_selected_action": [str(job.pk)]},
    )
    row = Pause.objects.get()
    assert (row.scope, row.name, row.paused_by) == ("kind", "demo.flaky", admin_user)
    assert client.get("/admin/jobs/pause/").status_code == 200
    client.post(
        "/admin/jobs/pause/", {"action": "resume_action", "_selected_action": [str(row.pk)]}
    )

    assert not Pause.objects.exists()
    assert LogEntry.objects.filter(object_id=str(row.pk)).count() == 2


def test_pause_admin_add_form_refuses_an_unknown_name(client: Any) -> None:
    client.force_login(get_user_model().objects.create_superuser("root", "r@example.com", "pw"))

    page = client.post("/admin/jobs/pause/add/", {"scope": "kind", "name": "no.such"})
    added = client.post("/admin/jobs/pause/add/", {"scope": "queue", "name": "default"})

    assert "no kind named" in page.content.decode()
    assert added.status_code == 302
    assert Pause.objects.get().paused_by is not None
