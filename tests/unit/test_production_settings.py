"""Production settings with the documented environment: deploy checks, HTTPS, demo kinds.

Issue 18, item 9: "`manage.py check --deploy` warns W004 and W008 in
production settings (HSTS, SSL redirect behind a proxy with
`SECURE_PROXY_SSL_HEADER`)" and "`demo.flaky` (up to 600 s sleep, 10,000
failures) is submittable in production — demo kinds belong with the other
fault kinds behind `JOBS_FAULT_KINDS`." Each runs in a process of its own
with config.settings.production and only the variables .env.example says
to set (the database is never reached).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "DJANGO_SECRET_KEY": "t3Q-8vWz_pL1mK9xR4cY7bN2hJ6fD0sA5gE-uI8oP3qZ1wX7eV",
    "DATABASE_URL": "postgres://postgres:postgres@127.0.0.1:1/jobs",
    "FLOWER_BASIC_AUTH": "admin:a-long-password",
}


def _run(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "JOBS_METRICS_DIR": str(tmp_path / "metrics"),
        "OTEL_SDK_DISABLED": "true",
        **DOCUMENTED_ENV,
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("proxies", ["0", "1"], ids=["direct", "behind-nginx"])
def test_check_deploy_prints_no_warning(tmp_path: Path, proxies: str) -> None:
    done = _run(["check", "--deploy"], tmp_path, JOBS_TRUSTED_PROXY_COUNT=proxies)

    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in output, output
    assert "WARNING" not in output


PROBE = """
from django.test import Client
c = Client(HTTP_HOST="localhost")
for path, extra in [("/api/jobs/", {}), ("/admin/", {}), ("/healthz", {}), ("/metrics", {}),
                    ("/api/jobs/", {"HTTP_X_FORWARDED_PROTO": "https"})]:
    r = c.get(path, **extra)
    print(path, bool(extra), r.status_code, r.get("Location", ""), r.get("Strict-Transport-Security", ""))
"""


def _probe(tmp_path: Path, **env: str) -> list[list[str]]:
    done = _run(["shell", "-c", PROBE], tmp_path, **env)
    assert done.returncode == 0, done.stderr
    return [line.split(" ", 4) for line in done.stdout.splitlines() if line.startswith("/")]


def test_plain_http_is_redirected_but_healthz_and_metrics_answer(tmp_path: Path) -> None:
    rows = _probe(tmp_path)

    by_path = {(r[0], r[1]): r for r in rows}
    assert by_path[("/api/jobs/", "False")][2:4] == ["301", "https://localhost/api/jobs/"]
    assert by_path[("/admin/", "False")][2] == "301"
    assert by_path[("/healthz", "False")][2] == "200"
    assert by_path[("/metrics", "False")][2] == "200"
    # without a trusted proxy, a client's X-Forwarded-Proto changes nothing
    assert by_path[("/api/jobs/", "True")][2] == "301"


def test_behind_a_trusted_proxy_its_https_is_believed_and_hsts_sent(tmp_path: Path) -> None:
    rows = _probe(tmp_path, JOBS_TRUSTED_PROXY_COUNT="1")

    secure = next(r for r in rows if r[0] == "/api/jobs/" and r[1] == "True")
    assert secure[2] == "401"  # reached the API: no redirect
    assert secure[4] == "max-age=31536000; includeSubDomains; preload"


KINDS = "from jobs.kinds import kind_names; print(sorted(kind_names()))"


def test_demo_kinds_are_fault_kinds_off_in_production(tmp_path: Path) -> None:
    off = _run(["shell", "-c", KINDS], tmp_path)
    on = _run(["shell", "-c", KINDS], tmp_path, JOBS_FAULT_KINDS="true")

    assert off.returncode == 0, off.stderr
    assert "demo." not in off.stdout
    assert "webhook.deliver" in off.stdout
    assert "'demo.flaky'" in on.stdout
    assert "'demo.sleep'" in on.stdout
