"""The doors of the fuses (jobs.services.fuse_ops): the staff API, the admin (with History),
the management command."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from jobs.fuse_model import Fuse
from jobs.reasons import FuseState

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fused(settings: Any) -> None:
    settings.JOBS_KIND_OVERRIDES = {"demo.flaky": {"fuse": True}}


def _client(perms: list[str], *, staff: bool = True, name: str = "ops") -> APIClient:
    user = get_user_model().objects.create_user(username=name, password="pw", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=perms))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_fuse_api_trip_list_reset() -> None:
    ops = _client(["view_fuse", "change_fuse"])
    tripped = ops.post("/api/fuses/trip/", {"kind": "demo.flaky", "reason": "down"}, format="json")
    assert tripped.status_code == 200, tripped.content
    assert tripped.json()["state"] == "open"
    assert tripped.json()["changed_by"] == "ops"
    listed = ops.get("/api/fuses/").json()
    assert [(f["kind"], f["destination"], f["state"]) for f in listed] == [
        ("demo.flaky", "*", "open")
    ]
    reset = ops.post("/api/fuses/reset/", {"kind": "demo.flaky"}, format="json")
    assert reset.json()["state"] == "closed"
    row = Fuse.objects.get()
    assert LogEntry.objects.filter(object_id=str(row.pk)).count() == 2


def test_fuse_api_refuses_a_kind_without_fuse_and_non_staff() -> None:
    ops = _client(["change_fuse"])
    refused = ops.post("/api/fuses/trip/", {"kind": "demo.sleep"}, format="json")
    assert refused.status_code == 400
    assert "has no fuse" in str(refused.json())
    outsider = _client(["change_fuse"], staff=False, name="user")
    assert (
        outsider.post("/api/fuses/trip/", {"kind": "demo.flaky"}, format="json").status_code == 403
    )
    assert not Fuse.objects.exists()


def test_fuse_command_trip_list_reset(capsys: Any) -> None:
    call_command("jobs_fuse", "trip", "demo.flaky", "--destination", "api.example.com")
    assert Fuse.objects.get().state == FuseState.OPEN
    call_command("jobs_fuse", "list")
    call_command("jobs_fuse", "reset", "demo.flaky", "--destination", "api.example.com")
    assert Fuse.objects.get().state == FuseState.CLOSED
    out = capsys.readouterr().out
    assert "demo.flaky api.example.com open" in out
    assert "demo.flaky api.example.com closed" in out
    with pytest.raises(CommandError, match="has no fuse"):
        call_command("jobs_fuse", "trip", "demo.sleep")


def test_fuse_admin_add_trips_and_actions_reset_with_history(client: Any) -> None:
    admin_user = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin_user)
    client.post("/admin/jobs/fuse/add/", {"kind": "demo.flaky", "destination": "*"})
    row = Fuse.objects.get()
    assert (row.state, row.changed_by) == (FuseState.OPEN, admin_user)
    assert client.get("/admin/jobs/fuse/").status_code == 200
    client.post("/admin/jobs/fuse/", {"action": "reset_action", "_selected_action": [str(row.pk)]})
    row.refresh_from_db()
    assert row.state == FuseState.CLOSED
    messages = sorted(
        LogEntry.objects.filter(object_id=str(row.pk)).values_list("change_message", flat=True)
    )
    assert messages == ["Reset via admin.", "Tripped via admin."]
    page = client.post("/admin/jobs/fuse/add/", {"kind": "demo.sleep", "destination": "*"})
    assert b"has no fuse" in page.content
