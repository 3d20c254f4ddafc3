"""Worker reports are untrusted input: a forged one never turns the admin overview into a 500.

Issue 18, item 9: "a forged worker report in Redis (`"pid": "x"`) turns the
admin overview into a 500 (treat every report as untrusted input)."
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.test import Client

from observability import worker_report

OVERVIEW = "/admin/jobs/job/overview/"
SOUND = {
    "hostname": "sound@box",
    "at": 1.5,
    "children": [{"pid": 7, "rss_bytes": 5 * 2**20, "threads": 2}],
    "main_rss_bytes": 1,
    "max_memory_per_child_bytes": 100 * 2**20,
    "recycled": {"max_tasks": 3},
}
CHILD = SOUND["children"][0]  # type: ignore[index]

FORGED: list[Any] = [
    {**SOUND, "children": [{**CHILD, "pid": "x"}]},
    {**SOUND, "children": [{**CHILD, "rss_bytes": 10**400}]},
    {**SOUND, "children": [{**CHILD, "threads": -1}]},
    {**SOUND, "children": [{**CHILD, "pid": True}]},
    {**SOUND, "children": [{**CHILD, "owned_bytes": "lots"}]},
    {**SOUND, "children": [{"pid": 7}]},
    {**SOUND, "children": ["not a child", None, 3]},
    {**SOUND, "children": {"pid": 7}},
    {**SOUND, "children": [CHILD] * 5000},
    {**SOUND, "max_memory_per_child_bytes": "512M"},
    {**SOUND, "max_memory_per_child_bytes": 1e308},
    {**SOUND, "recycled": {"max_tasks": "many", "x" * 1000: 1, "ok": 10**30}},
    {**SOUND, "recycled": ["max_tasks"]},
    {**SOUND, "at": "yesterday"},
    {**SOUND, "hostname": 42},
    {**SOUND, "hostname": "<script>alert(1)</script>@box"},
    {k: v for k, v in SOUND.items() if k != "hostname"},
    {},
    [],
    "a string",
    12,
    None,
]
RAW: list[bytes] = [
    b"not json",
    b"\xff\xfe\x00",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"hostname": "inf@box", "at": Infinity, "children": [{"pid": NaN}]}',
    b"",
]


@pytest.fixture
def admin_client(client: Client, db: None) -> Client:
    client.force_login(User.objects.create_superuser("root", "root@localhost", "pw"))
    return client


def _plant(client: redis.Redis, name: str | bytes, raw: bytes) -> None:
    member = name if isinstance(name, bytes) else name.encode()
    client.set(worker_report.KEY_PREFIX.encode() + member, raw, ex=60)
    client.zadd(worker_report.INDEX_KEY, {member: time.time()})


@pytest.mark.parametrize("forged", FORGED + RAW, ids=lambda v: repr(v)[:40])
def test_a_forged_report_never_fails_the_overview(
    admin_client: Client, broker_redis: redis.Redis, forged: Any
) -> None:
    # given one sound report and one forged beside it
    _plant(broker_redis, "sound@box", json.dumps(SOUND).encode())
    raw = forged if isinstance(forged, bytes) else json.dumps(forged).encode()
    _plant(broker_redis, "forged@box", raw)

    # when the overview is shown
    page = admin_client.get(OVERVIEW)

    # then it answers, with the sound worker on it
    assert page.status_code == 200
    assert "sound@box" in page.content.decode()
    assert "<script>alert(1)</script>" not in page.content.decode()


def test_a_node_name_that_is_not_utf8_is_read_like_any_other(broker_redis: redis.Redis) -> None:
    _plant(broker_redis, b"\xff\xfe@box", json.dumps(SOUND).encode())

    reports = worker_report.read_reports(broker_redis, max_age=30)

    assert [r["hostname"] for r in reports] == ["sound@box"]


@pytest.mark.parametrize(
    ("forged", "expected"),
    [
        ({**SOUND, "children": [{**CHILD, "pid": "x"}, CHILD]}, {"children": [CHILD]}),
        ({**SOUND, "max_memory_per_child_bytes": -5}, {"max_memory_per_child_bytes": 0}),
        ({**SOUND, "recycled": {"a": 1, "b": "x"}}, {"recycled": {"a": 1}}),
        ({**SOUND, "at": 10**400}, {"at": 0.0}),
    ],
)
def test_parse_report_keeps_only_sound_fields(forged: dict, expected: dict) -> None:
    parsed = worker_report.parse_report(json.dumps(forged))

    assert parsed is not None
    for key, value in expected.items():
        if key == "children":
            value = [{**c, "owned_bytes": None} for c in value]
        assert parsed[key] == value


def test_parse_report_refuses_what_is_not_a_report() -> None:
    assert worker_report.parse_report(json.dumps(SOUND)) is not None
    for raw in [*RAW[:3], json.dumps([]), json.dumps({"children": []}), None, 5]:
        assert worker_report.parse_report(raw) is None
