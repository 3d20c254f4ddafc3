"""`manage.py jobs_storm` end to end, at toy size: both sides run, the table prints, the PNG exists.

Issue 11, item 3. The drill at its defaults (minutes) is run on demand
(docs/storm-drill.md); this smoke run uses 2 jobs, one timeout each, two
children a side, on its own redis-server and a fresh PostgreSQL database
(created and dropped by the command on the server the tests use).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.processes import ROOT
from devstack.services import RedisServer
from tests.integration.harness import require_postgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.mark.slow
def test_jobs_storm_smoke_exits_0_with_table_and_png(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # given a Redis and a PostgreSQL server of the tests' own
    png = tmp_path / "storm.png"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "false",
        "REDIS_URL": redis_server.url,
        "DATABASE_URL": require_postgres(),
        "OTEL_SDK_DISABLED": "true",
    }
    env.pop("CELERY_BROKER_URL", None)

    # when the drill runs a toy storm
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "jobs_storm",
            "--jobs=2",
            "--fail-times=1",
            "--buffer-bytes=65536",
            "--concurrency=2",
            "--thread-seconds=2",
            "--baseline-seconds=0.5",
            "--settle-seconds=40",
            f"--out={png}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=140,
    )

    # then it exits 0, with both sides' columns and the platform's verdict, and a PNG
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stock Celery" in done.stdout
    assert "RSS growth at peak (MB)" in done.stdout
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("platform: "))
    assert ": held (" in verdict
    lost = next(line for line in done.stdout.splitlines() if line.startswith("| lost"))
    assert lost.split("|")[2].strip() == "0"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
