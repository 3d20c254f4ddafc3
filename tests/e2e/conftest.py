"""Fixtures of the browser tests: Debian's Chromium driven by Playwright, a live platform.

Chromium comes from Debian (`/usr/bin/chromium`), never from Playwright's
own download. When it is missing and we run as root (CI on a clean
machine), it is installed with apt-get; otherwise the tests are skipped,
saying why. Screenshots go to var/test-artifacts/e2e/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Platform, PlatformFactory, require_postgres

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "e2e"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
STAFF_USER, STAFF_PASSWORD = "operator", "operator-password"
# Fast, small retry policies so jobs die (or recover) within seconds.
E2E_POLICIES = {
    "demo.flaky": {
        "max_attempts": 3,
        "backoff_base": 0.2,
        "backoff_floor": 0.1,
        "backoff_cap": 0.5,
    },
    "webhook.deliver": {
        # the fuse is on (per destination host) for the admin's trip and reset; its
        # thresholds (10 attempts) are far above what the other tests' webhooks make
        "fuse": True,
        "max_attempts": 2,
        "backoff_base": 0.2,
        "backoff_floor": 0.1,
        "backoff_cap": 0.5,
    },
}
# Submitted jobs on this queue stay queued: the worker consumes "default" only.
PARKED_QUEUE = "parked"


def _ensure_chromium() -> str:
    """Path of Debian's Chromium, installed with apt-get when missing and root; else skip."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(
            f"{CHROMIUM} is missing and apt-get install needs root: apt-get install chromium"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.skip(f"{' '.join(argv)} failed: {done.stderr[-500:]}")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


@pytest.fixture(scope="session")
def chromium_path() -> str:
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    return _ensure_chromium()


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - optional dependency (Playwright, e2e only)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


_STAFF_SCRIPT = """
from django.contrib.auth.models import Permission, User
user = User.objects.create_user({name!r}, password={password!r}, is_staff=True)
user.user_permissions.add(*Permission.objects.filter(codename__in=[
    "view_job", "change_job", "add_pause", "view_pause", "delete_pause",
    "add_fuse", "view_fuse", "change_fuse",
]))
print("STAFF=ok")
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """One platform for the module: web (DEBUG on, so gunicorn serves the admin's CSS),
    a worker consuming only "default", the scheduler, and a staff operator."""
    require_postgres()
    factory = PlatformFactory(logroot=tmp_path_factory.mktemp("e2e-logs"))
    try:
        platform = factory(
            "e2e",
            env={
                "DJANGO_DEBUG": "true",
                "JOBS_QUEUES": f"default,{PARKED_QUEUE}",
                "JOBS_KIND_OVERRIDES": json.dumps(E2E_POLICIES),
                "JOBS_WORKER_REPORT_INTERVAL": "1",
                # Children recycle every few attempts, so the overview has recycles to show.
                "JOBS_WORKER_MAX_TASKS_PER_CHILD": "4",
                "JOBS_TRACE_URL_TEMPLATE": "http://127.0.0.1:16686/trace/{trace_id}",
                "JOBS_FLOWER_URL": "http://127.0.0.1:5555/",
                "JOBS_GRAFANA_URL": "http://127.0.0.1:3000/",
            },
            worker=False,
        )
        platform.worker = platform.stack.start_worker("-Q", "default", concurrency=2, timeout=120)
        out = platform.stack.run(
            [
                "python",
                "manage.py",
                "shell",
                "-c",
                _STAFF_SCRIPT.format(name=STAFF_USER, password=STAFF_PASSWORD),
            ]
        ).stdout
        assert "STAFF=ok" in out, out
        yield platform
    finally:
        factory.close()


@pytest.fixture
def page(browser: Any, live: Platform, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser page (own cookies); a screenshot is saved when the test fails."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, base_url=live.base_url)
    context.set_default_timeout(15_000)
    # Django admin's navigation sidebar closed: the pages get the whole width.
    context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            shoot(page, f"FAILED-{request.node.name}")
        context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report


def shoot(page: Any, name: str) -> Path:
    """Save a full-page PNG of `page` under var/test-artifacts/e2e/; returns its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def login(page: Any) -> None:
    """Log the page in as the staff operator."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", STAFF_USER)
    page.fill("#id_password", STAFF_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
