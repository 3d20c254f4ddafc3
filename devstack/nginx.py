"""Debian's nginx with the shipped proxy config (platform/nginx/), in front of local processes.

`make up`, `make observe` and the tests run the same server block that
docker-compose.yml's nginx image renders, with the same ${NGINX_*}
substitution (`render`), listening on 127.0.0.1 and proxying to local ports:

    proxy = NginxServer(port=8000, web="127.0.0.1:8001", flower="127.0.0.1:5555",
                        workdir=Path("var/up/nginx")).start()
    ...
    proxy.stop()

The limits come from the environment with the same defaults as compose's
(`limits_from_env`; .env.example documents each). The main config, pid,
logs and temporary directories live in `workdir`; the process runs in the
foreground (daemon off) and is started and stopped by pid.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from config.env import env
from devstack.debian import ensure_binary
from devstack.services import start_daemon, stop_process

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "platform" / "nginx" / "templates" / "default.conf.template"
_PLACEHOLDER = re.compile(r"\$\{([A-Z][A-Z0-9_]*)\}")


class NginxError(RuntimeError):
    """nginx refused its configuration, exited early or never answered."""


def limits_from_env() -> dict[str, str]:
    """The proxy's limits: ${NGINX_*} values an operator sets, with compose's defaults.

    The body limit is the API's JOBS_MAX_REQUEST_BYTES, as in compose.
    """
    return {
        "NGINX_CLIENT_MAX_BODY_SIZE": str(env.int("JOBS_MAX_REQUEST_BYTES", default=256 * 1024)),
        "NGINX_CLIENT_HEADER_TIMEOUT": env.str("NGINX_CLIENT_HEADER_TIMEOUT", default="10s"),
        "NGINX_CLIENT_BODY_TIMEOUT": env.str("NGINX_CLIENT_BODY_TIMEOUT", default="10s"),
        "NGINX_KEEPALIVE_TIMEOUT": env.str("NGINX_KEEPALIVE_TIMEOUT", default="15s"),
        "NGINX_FLOWER_RATE": env.str("NGINX_FLOWER_RATE", default="5r/s"),
        "NGINX_FLOWER_BURST": env.str("NGINX_FLOWER_BURST", default="20"),
    }


def placeholders(template: str) -> set[str]:
    """The ${NAME} placeholders of a template (nginx's own variables are $name, unbraced)."""
    return set(_PLACEHOLDER.findall(template))


def render(template: str, values: Mapping[str, str]) -> str:
    """`template` with every ${NAME} replaced by values[NAME], as the nginx image's envsubst does.

    Raises KeyError naming the placeholders `values` lacks (envsubst would
    leave them, and nginx would refuse the file).
    """
    missing = placeholders(template) - set(values)
    if missing:
        raise KeyError(f"no value for {sorted(missing)}")
    return _PLACEHOLDER.sub(lambda match: values[match[1]], template)


def main_config(*, workdir: Path, server_config: Path, access_log: bool) -> str:
    """An nginx.conf for a foreground nginx whose every file lives in `workdir`."""
    temp = {
        kind: workdir / "tmp" / kind
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    }
    return "\n".join(
        [
            "daemon off;",
            "worker_processes 1;",
            f"pid {workdir / 'nginx.pid'};",
            f"error_log {workdir / 'error.log'} warn;",
            "events { worker_connections 1024; }",
            "http {",
            "    default_type application/octet-stream;",
            f"    access_log {workdir / 'access.log'};" if access_log else "    access_log off;",
            *(f"    {kind}_temp_path {path};" for kind, path in temp.items()),
            f"    include {server_config};",
            "}",
            "",
        ]
    )


@dataclass
class NginxServer:
    """Debian's nginx on 127.0.0.1:`port`, proxying to `web` and `flower` (host:port each).

    `limits` override `limits_from_env()` by name (tests: short timeouts).
    """

    port: int
    web: str
    flower: str
    workdir: Path
    limits: dict[str, str] = field(default_factory=dict)
    access_log: bool = True
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "nginx.log"

    def log(self) -> str:
        """nginx's output and error log so far."""
        parts = [self.log_path, self.workdir / "error.log"]
        return "".join(p.read_text(errors="replace") for p in parts if p.exists())

    def values(self) -> dict[str, str]:
        """Every ${NGINX_*} value this server renders the template with."""
        return {
            **limits_from_env(),
            **self.limits,
            "NGINX_LISTEN": f"127.0.0.1:{self.port}",
            "NGINX_WEB_UPSTREAM": self.web,
            "NGINX_FLOWER_UPSTREAM": self.flower,
            # Never asked: the upstreams are addresses, not names.
            "NGINX_RESOLVER": "127.0.0.1",
        }

    def write_config(self) -> Path:
        """Write the rendered server block and a main config into `workdir`; return the latter."""
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        server = self.workdir / "jobs.conf"
        server.write_text(render(TEMPLATE.read_text(), self.values()))
        main = self.workdir / "nginx.conf"
        main.write_text(
            main_config(workdir=self.workdir, server_config=server, access_log=self.access_log)
        )
        return main

    def start(self, *, timeout: float = 30) -> NginxServer:
        """Check and start nginx; return once it answers /proxy-healthz.

        Raises MissingBinary (devstack.debian) when nginx is absent and cannot
        be installed, NginxError with nginx's own words when it refuses the
        configuration, exits early or is not ready within `timeout` seconds.
        """
        binary = ensure_binary("nginx")
        config = self.write_config()
        argv = [binary, "-p", str(self.workdir), "-e", str(self.workdir / "error.log")]
        check = subprocess.run(
            [*argv, "-t", "-q", "-c", str(config)], capture_output=True, text=True, timeout=30
        )
        if check.returncode != 0:
            raise NginxError(f"nginx refused {config}: {check.stderr.strip()}")
        self.process = start_daemon(
            [*argv, "-c", str(config)],
            log_path=self.log_path,
            ready_url=f"{self.url}/proxy-healthz",
            timeout=timeout,
            what="nginx",
            error=NginxError,
        )
        return self

    def stop(self, *, timeout: float = 10) -> None:
        """Stop nginx by pid (SIGTERM: fast shutdown; SIGKILL after `timeout` s)."""
        stop_process(self.process, timeout=timeout)
        self.process = None

    def __enter__(self) -> NginxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
