"""A worker's startup checks leave the web's modules unimported (smaller children)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
import config.celery_app
from config.startup import refuse_on_check_errors
refuse_on_check_errors({role!r})
print(sorted(m for m in ("config.urls", "jobs.api.views", "drf_spectacular.views") if m in sys.modules))
"""


def _imported_after_checks(role: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(role=role)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def test_worker_checks_do_not_import_the_url_conf_but_the_web_checks_do() -> None:
    assert _imported_after_checks("worker") == "[]"
    assert "config.urls" in _imported_after_checks("web")
