"""The databases and users an integration platform starts from.

A migrated template database made once per test process (every platform's
database is a copy of it) with the integration user's token, the script that
creates a test's own users, and the checks that PostgreSQL and RabbitMQ
answer. tests.integration.harness builds platforms on these.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from pathlib import Path

import pytest

from config.env import env
from devstack.postgres import (
    POSTGRES_DEFAULT_URL,
    create_database,
    drop_database,
    ensure_postgres,
    postgres_reachable,
)
from devstack.processes import Stack
from devstack.rabbitmq import Vhost, rabbitmq_reachable

# The integration user is an operator: staff with jobs.view_job and
# jobs.change_job, so it sees and acts on every job (jobs.ownership), also
# those submitted by commands or other users. test_ownership makes users
# without them.
_TOKEN_SCRIPT = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
user, _ = get_user_model().objects.get_or_create(
    username="integration", defaults={"is_staff": True}
)
user.user_permissions.add(*Permission.objects.filter(codename__in=["view_job", "change_job"]))
print("TOKEN=" + Token.objects.get_or_create(user=user)[0].key)
"""


USERS_SCRIPT = """
import json
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token
tokens = {}
for name, spec in json.loads(%r).items():
    user = User.objects.create_user(
        name, password=spec.get("password"), is_staff=spec.get("staff", False)
    )
    user.user_permissions.add(*Permission.objects.filter(codename__in=spec.get("perms", [])))
    tokens[name] = Token.objects.create(user=user).key
print("TOKENS=" + json.dumps(tokens))
"""


_templates: dict[str, tuple[str, str]] = {}


def migrated_template(admin_url: str, base_env: dict[str, str]) -> tuple[str, str]:
    """(name, token) of this session's migrated database with the integration user's token.

    `base_env`: the settings of the processes that migrate it (harness.BASE_ENV).

    Made once per test process: every platform's database is a copy of it
    (create_database's `template`), saving `migrate` and the token's
    `manage.py shell` (~4 s) per platform; dropped when the process exits.
    """
    if admin_url not in _templates:
        name = f"jobs_it_template_{os.getpid()}"
        url = create_database(name, admin_url=admin_url)
        atexit.register(_drop_template, name, admin_url)
        with tempfile.TemporaryDirectory(prefix="jobs-it-template-") as logdir:
            stack = Stack(env={**base_env, "DATABASE_URL": url}, logdir=Path(logdir))
            stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
            token = _create_token(stack)
        _templates[admin_url] = (name, token)
    return _templates[admin_url]


def _drop_template(name: str, admin_url: str) -> None:
    # A test's private server (test_faults_database_outage) is gone by exit time.
    if postgres_reachable(admin_url):
        drop_database(name, admin_url=admin_url)


def _create_token(stack: Stack) -> str:
    out = stack.run(["python", "manage.py", "shell", "-c", _TOKEN_SCRIPT], timeout=120).stdout
    for line in out.splitlines():
        if line.startswith("TOKEN="):
            return line.removeprefix("TOKEN=").strip()
    raise RuntimeError(f"no token in manage.py shell output:\n{out}")


def require_postgres() -> str:
    """Admin URL of PostgreSQL: the one at 127.0.0.1:5432, else an embedded one (pgserver)."""
    try:
        return ensure_postgres(env.str("TEST_POSTGRES_URL", default=POSTGRES_DEFAULT_URL))
    except RuntimeError as exc:
        pytest.fail(
            f"integration tests need PostgreSQL at {POSTGRES_DEFAULT_URL} (user postgres, "
            f"trust auth) or the pgserver package: {exc}",
            pytrace=False,
        )


def require_rabbitmq(vhost: Vhost) -> Vhost:
    """Create `vhost` on the machine's RabbitMQ; skip the test when none answers."""
    if not rabbitmq_reachable(vhost.server_url):
        pytest.skip(f"no RabbitMQ at {vhost.server_url}")
    return vhost.create()
