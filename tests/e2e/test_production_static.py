"""Production settings under gunicorn serve the admin's CSS and Swagger UI's scripts (WhiteNoise).

Issue 9, Acceptance: "Under `config.settings.production` (with its required
variables set), gunicorn serves `/static/admin/css/base.css` and the Swagger
UI's scripts with 200; `/admin/` renders styled (a browser screenshot in the
test's artefacts)."

The web runs as compose runs it: the Procfile's gunicorn command,
`config.settings.production`, static files collected by `collectstatic` into
DJANGO_STATIC_ROOT (the image does this at build time), a real PostgreSQL
database. Debian's Chromium (driven by Playwright, never a downloaded
browser) logs into the admin and opens the API docs; screenshots are kept in
var/artefacts/production_static/.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import pytest
import requests

from devstack.postgres import create_database, drop_database
from devstack.processes import ROOT, Stack
from devstack.services import free_port
from tests.integration.harness import require_postgres

ARTEFACTS = ROOT / "var" / "artefacts" / "production_static"
USERNAME, PASSWORD = "ops-admin", "a-long-test-password-1"
# The admin's header colour (django/contrib/admin/static/admin/css/base.css,
# --header-bg: #417690): unstyled, the header has no background at all.
ADMIN_HEADER_BG = "rgb(65, 118, 144)"
TIMEOUT = 30


@dataclass
class Web:
    base_url: str
    token: str


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """gunicorn with config.settings.production on a fresh database, static files collected."""
    admin_url = require_postgres()
    workdir = tmp_path_factory.mktemp("production-static")
    name = f"jobs_e2e_static_{uuid.uuid4().hex[:8]}"
    database_url = create_database(name, admin_url=admin_url)
    stack = Stack(
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DJANGO_SECRET_KEY": "e2e-" + uuid.uuid4().hex * 2,
            "DATABASE_URL": database_url,
            "DJANGO_STATIC_ROOT": str(workdir / "static"),
            "JOBS_METRICS_DIR": str(workdir / "metrics"),
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "WARNING",
            # Plain HTTP on loopback, with no TLS proxy in front: production
            # redirects to HTTPS by default (test_production_settings covers it).
            "DJANGO_SECURE_SSL_REDIRECT": "false",
        },
        logdir=workdir / "logs",
    )
    try:
        stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
        stack.run(["python", "manage.py", "collectstatic", "--no-input"], timeout=300)
        script = (
            "from django.contrib.auth import get_user_model\n"
            "from rest_framework.authtoken.models import Token\n"
            f"user = get_user_model().objects.create_superuser({USERNAME!r}, '', {PASSWORD!r})\n"
            "print('TOKEN=' + Token.objects.create(user=user).key)\n"
        )
        out = stack.run(["python", "manage.py", "shell", "-c", script], timeout=120).stdout
        token = out.split("TOKEN=", 1)[1].split()[0]
        port = free_port()
        stack.start_web(port, workers=1, threads=4, timeout=90)
        yield Web(base_url=f"http://127.0.0.1:{port}", token=token)
    finally:
        stack.stop()
        drop_database(name, admin_url=admin_url)


def asset_urls(html: str, base_url: str) -> list[str]:
    """Absolute URLs of every <script src> and <link href> under /static/ in `html`."""
    found = re.findall(r'<(?:script[^>]*\ssrc|link[^>]*\shref)="([^"]+)"', html)
    return [urljoin(base_url, url) for url in found if "/static/" in url]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_gunicorn_serves_admin_css_and_swagger_ui_assets_with_200(web: Web) -> None:
    base_css = requests.get(f"{web.base_url}/static/admin/css/base.css", timeout=TIMEOUT)
    assert base_css.status_code == 200
    assert "text/css" in base_css.headers["Content-Type"]
    assert "--header-bg" in base_css.text

    # Swagger UI's page (token auth: the API's default permission) and every asset it loads.
    docs = requests.get(
        f"{web.base_url}/api/docs/",
        headers={"Authorization": f"Token {web.token}"},
        timeout=TIMEOUT,
    )
    assert docs.status_code == 200, docs.text[:500]
    assets = asset_urls(docs.text, web.base_url)
    scripts = [url for url in assets if url.split("?")[0].endswith(".js")]
    assert any("swagger-ui-bundle" in url for url in scripts), assets
    for url in assets:
        response = requests.get(url, timeout=TIMEOUT)
        assert response.status_code == 200, url
        assert int(response.headers["Content-Length"]) > 0, url
        # WhiteNoise: hashed names are cacheable for a year.
        if re.search(r"\.[0-9a-f]{12}\.", url):
            assert "max-age=315360000" in response.headers.get("Cache-Control", ""), url


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_admin_and_api_docs_render_styled_in_a_real_browser(web: Web, browser: Any) -> None:
    # The session's one Playwright (tests/e2e/conftest.py): a second sync_playwright()
    # in the same thread refuses to start while the first one's loop runs.
    if ARTEFACTS.exists():
        shutil.rmtree(ARTEFACTS)
    ARTEFACTS.mkdir(parents=True)
    failed_assets: list[str] = []
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT * 1000)
        page.on(
            "response",
            lambda r: (
                failed_assets.append(f"{r.status} {r.url}")
                if "/static/" in r.url and r.status != 200
                else None
            ),
        )
        # when an admin logs in
        page.goto(f"{web.base_url}/admin/")
        page.fill("#id_username", USERNAME)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_selector("#site-name")
        page.screenshot(path=str(ARTEFACTS / "admin.png"), full_page=True)
        # then the admin is styled by its CSS
        header_bg = page.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor")
        assert header_bg == ADMIN_HEADER_BG, header_bg
        assert page.locator("a[href$='/admin/jobs/job/']").count() >= 1

        # and Swagger UI draws the API from its own scripts
        page.goto(f"{web.base_url}/api/docs/")
        page.wait_for_selector(".swagger-ui .info .title")
        title = page.inner_text(".swagger-ui .info .title")
        page.screenshot(path=str(ARTEFACTS / "api-docs.png"), full_page=True)
        assert "Jobs API" in title
        assert page.locator(".opblock").count() >= 3
    finally:
        context.close()
    assert not failed_assets, failed_assets
    print(f"screenshots: {ARTEFACTS}")
