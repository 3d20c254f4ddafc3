"""platform/nginx/: the proxy template renders as compose and `make up` render it, and nginx accepts it.

Issue 18, item 5: the shipped deployment puts nginx in front of gunicorn and
Flower. Debian's nginx (`nginx -t`) checks the file rendered with compose's
values and with `make up`'s; the live behaviour (slow clients, limits,
routes) is tests/integration/test_proxy_*.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devstack.nginx import TEMPLATE, NginxServer, limits_from_env, main_config, render
from tests.ops.tools import ROOT, load_yaml, require_binary, run


def compose_values() -> dict[str, str]:
    """The nginx service's environment with every ${VAR:-default} at its default."""
    environment = load_yaml(ROOT / "docker-compose.yml")["services"]["nginx"]["environment"]
    return {
        name: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
        for name, value in environment.items()
    }


def nginx_accepts(tmp_path: Path, server_block: str) -> None:
    nginx = require_binary("nginx")
    server = tmp_path / "jobs.conf"
    server.write_text(server_block)
    (tmp_path / "tmp").mkdir()
    main = tmp_path / "nginx.conf"
    main.write_text(main_config(workdir=tmp_path, server_config=server, access_log=False))
    result = run(
        [nginx, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(main)]
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.ops
def test_nginx_accepts_the_template_rendered_with_composes_values(tmp_path: Path) -> None:
    # given the file the nginx image's envsubst writes from compose's environment
    rendered = render(TEMPLATE.read_text(), compose_values())
    # then nothing is left unrendered, and nginx accepts it
    assert "${" not in rendered
    assert "proxy_pass http://$web_upstream;" in rendered
    nginx_accepts(tmp_path, rendered)


@pytest.mark.ops
def test_nginx_accepts_the_template_rendered_for_make_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given `make up`'s rendering with an operator's limits from the environment
    monkeypatch.setenv("NGINX_FLOWER_RATE", "30r/m")
    monkeypatch.setenv("JOBS_MAX_REQUEST_BYTES", "1048576")
    server = NginxServer(
        port=8000, web="127.0.0.1:8001", flower="127.0.0.1:5555", workdir=tmp_path / "up"
    )
    rendered = render(TEMPLATE.read_text(), server.values())
    # then the limits are the environment's, and nginx accepts the file
    assert "rate=30r/m;" in rendered
    assert "client_max_body_size 1048576;" in rendered
    assert "the limit is 1048576 bytes" in rendered
    assert "listen 127.0.0.1:8000;" in rendered
    nginx_accepts(tmp_path, rendered)


def test_render_names_a_placeholder_it_has_no_value_for() -> None:
    values = {**limits_from_env(), "NGINX_LISTEN": "8000"}
    with pytest.raises(KeyError, match="NGINX_WEB_UPSTREAM"):
        render(TEMPLATE.read_text(), values)


def test_nginx_variables_are_left_to_nginx() -> None:
    # nginx's own $variables are unbraced, so neither envsubst nor render touches them
    assert render("set $a $http_host; x ${B};", {"B": "1"}) == "set $a $http_host; x 1;"
