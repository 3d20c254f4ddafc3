"""A staff user's session on a live platform's admin, logged in through /admin/login/."""

from __future__ import annotations

import re

import requests

from tests.integration.harness import HTTP_TIMEOUT, Platform


def admin_session(platform: Platform, perms: tuple[str, ...] = ("view_job",)) -> requests.Session:
    """A session of staff user `ops` (permission codenames `perms`), created on `platform`
    and logged in."""
    platform.create_users({"ops": {"staff": True, "perms": list(perms), "password": "pw-ops-1"}})
    session = requests.Session()
    page = session.get(platform.url("/admin/login/"), timeout=HTTP_TIMEOUT)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    session.post(
        platform.url("/admin/login/?next=/admin/"),
        data={
            "csrfmiddlewaretoken": token.group(1),
            "username": "ops",
            "password": "pw-ops-1",
            "next": "/admin/",
        },
        timeout=HTTP_TIMEOUT,
    )
    assert "sessionid" in session.cookies
    return session
