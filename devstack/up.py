"""`make up`: web, worker, scheduler and Flower behind nginx, until Ctrl-C or SIGTERM.

The stack the compose file ships, without Docker: gunicorn and Flower
listen on loopback ports of their own, and nginx with the shipped proxy
config (platform/nginx/, devstack.nginx) is the one public entry on
JOBS_PUBLIC_PORT (admin, API, Flower under /flower/; /metrics is not
routed). Prometheus-style endpoints stay on their own ports. Every port is
an environment variable (devstack.ports), checked before anything starts.

Redis: REDIS_URL as configured (or a private redis-server when nothing
answers there), since it is the developer's own stack. Every process is
started by pid and stopped, newest first, on Ctrl-C or SIGTERM (exit 0),
with no traceback; `make observe` (devstack.observe) builds on `start_app`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import requests

from config.env import env
from devstack import ports as port_vars
from devstack.debian import MissingBinary, ensure_binary
from devstack.demo import (
    ADMIN_USERNAME,
    DEFAULT_REDIS_URL,
    provision,
    say,
    shield_cleanup,
    token_export,
)
from devstack.nginx import NginxServer
from devstack.processes import ROOT, Stack
from devstack.rabbitmq import devstack_broker
from devstack.services import ensure_redis, wait_for

FLOWER_PREFIX = "flower"


class Watched(Protocol):
    """A server started outside the Stack (nginx, Prometheus, Alertmanager): process and log."""

    process: subprocess.Popen | None

    def log(self) -> str: ...


@dataclass(frozen=True)
class Link:
    """One printed line: a URL that answers, and how to use it."""

    label: str
    url: str
    note: str = ""


@dataclass
class App:
    """The running app: processes, the proxy in front, and how to log in."""

    stack: Stack
    proxy: NginxServer
    ports: dict[str, int]
    token: str
    password: str
    flower_auth: str

    def public(self, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port_vars.PUBLIC]}{path}"

    def links(self) -> list[Link]:
        """The public URLs (through nginx), then each process's own /metrics (loopback)."""
        own = {name: f"http://127.0.0.1:{port}" for name, port in self.ports.items()}
        return [
            Link("admin", self.public("/admin/"), f"login {ADMIN_USERNAME} / {self.password}"),
            Link(
                "api",
                self.public("/api/jobs/"),
                "header 'Authorization: Token $TOKEN', TOKEN below",
            ),
            Link("docs", self.public("/api/docs/")),
            Link("flower", self.public(f"/{FLOWER_PREFIX}/"), f"basic auth {self.flower_auth}"),
            Link("metrics", f"{own[port_vars.WEB]}/metrics", "web, queues: gunicorn's own port"),
            Link("", f"{own[port_vars.WORKER_METRICS]}/metrics", "worker"),
            Link("", f"{own[port_vars.SCHEDULER_METRICS]}/metrics", "scheduler, workers up"),
            Link("", f"{own[port_vars.FLOWER]}/{FLOWER_PREFIX}/metrics", "Flower's own port"),
        ]


def run_up() -> int:
    """Start the app, print its URLs, wait for Ctrl-C or SIGTERM; returns the exit code."""
    try:
        ports = port_vars.claim(port_vars.UP_PORTS)
        # Before anything starts: installed with apt-get when missing (as root).
        say(f"nginx: {ensure_binary('nginx')}")
    except (port_vars.PortError, MissingBinary) as exc:
        say(str(exc))
        return 1
    rundir = ROOT / "var" / "up"

    def up(cleanup: ExitStack) -> int:
        app = start_app(cleanup, ports=ports, rundir=rundir)
        print_links(
            app.links(), footer=f"logs:   {rundir.relative_to(ROOT)}/logs/", token=app.token
        )
        return watch(app.stack, {"nginx": app.proxy})

    return serve("up", up)


def start_app(cleanup: ExitStack, *, ports: dict[str, int], rundir: Path) -> App:
    """Start web, worker, scheduler, Flower and nginx on `ports`; `cleanup` stops them.

    Raises what `serve` reports: a subprocess error, a timeout, RuntimeError
    (a process exited early, nginx refused its config), MissingBinary.
    """
    password = env.str("DEVSTACK_ADMIN_PASSWORD", default="admin")
    flower_auth = env.str("FLOWER_BASIC_AUTH", default="admin:admin")
    redis_url = cleanup.enter_context(
        private_redis(env.str("REDIS_URL", default=DEFAULT_REDIS_URL))
    )
    broker_url = cleanup.enter_context(devstack_broker(redis_url))
    public = f"http://127.0.0.1:{ports[port_vars.PUBLIC]}"
    stack = Stack(
        env={
            "DJANGO_SETTINGS_MODULE": env.str(
                "DJANGO_SETTINGS_MODULE", default="config.settings.local"
            ),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": env.str("CELERY_BROKER_URL", default=redis_url)
            if broker_url == redis_url
            else broker_url,
            "FLOWER_BASIC_AUTH": flower_auth,
            "FLOWER_URL_PREFIX": FLOWER_PREFIX,
            "JOBS_WORKER_METRICS_PORT": str(ports[port_vars.WORKER_METRICS]),
            "JOBS_SCHEDULER_METRICS_PORT": str(ports[port_vars.SCHEDULER_METRICS]),
            # Requests reach the web through nginx, which appends the client's address.
            "JOBS_TRUSTED_PROXY_COUNT": "1",
            "JOBS_FLOWER_URL": f"{public}/{FLOWER_PREFIX}/",
        },
        logdir=rundir / "logs",
    )
    if broker_url != redis_url and not env.str("DATABASE_URL", default="").startswith("postgres"):
        # On SQLite with RabbitMQ as the broker, shared state is kept in the
        # private Redis, named explicitly (a store of its own; jobs.state_store).
        stack.env["JOBS_STATE_STORE"] = env.str("JOBS_STATE_STORE", default="redis")
    cleanup.callback(stack.stop)
    token = provision(stack, username=ADMIN_USERNAME, password=password)
    stack.start_web(ports[port_vars.WEB])
    stack.start_worker(concurrency=env.int("JOBS_WORKER_CONCURRENCY", default=2))
    stack.start_scheduler()
    flower_port = ports[port_vars.FLOWER]
    flower = stack.start("flower", "--address=127.0.0.1", f"--port={flower_port}")

    def flower_up() -> bool:
        if not flower.alive():
            raise RuntimeError(f"flower exited early:\n{flower.log()[-2000:]}")
        return answers(f"http://127.0.0.1:{flower_port}/{FLOWER_PREFIX}/healthcheck")

    wait_for(flower_up, timeout=60, what="flower")
    proxy = NginxServer(
        port=ports[port_vars.PUBLIC],
        web=f"127.0.0.1:{ports[port_vars.WEB]}",
        flower=f"127.0.0.1:{flower_port}",
        workdir=rundir / "nginx",
    )
    cleanup.callback(proxy.stop)
    proxy.start()
    return App(stack, proxy, ports, token, password, flower_auth)


def print_links(links: list[Link], *, footer: str, token: str) -> None:
    """Print one line per link (label, URL, note), `footer` and how to stop, then the
    API token as a line to paste into a shell (`export TOKEN=…`), on stdout."""
    width = max(len(link.label) for link in links) + 2
    lines = [""]
    for link in links:
        label = f"{link.label}:" if link.label else ""
        note = f"  ({link.note})" if link.note else ""
        lines.append(f"{label:<{width}}{link.url}{note}")
    lines += [
        f"{footer}   Ctrl-C stops everything.",
        "",
        "Paste this line into your shell for the README's curl examples:",
        token_export(token),
        "",
    ]
    print("\n".join(lines), flush=True)


def answers(
    url: str, *, auth: tuple[str, str] | None = None, headers: Mapping[str, str] | None = None
) -> bool:
    """Whether GET `url` (with `auth` or `headers`) answers 200 within 2 s."""
    try:
        response = requests.get(url, auth=auth, headers=dict(headers or {}), timeout=2)
    except requests.RequestException:
        return False
    return response.status_code == 200


def serve(name: str, body: Callable[[ExitStack], int]) -> int:
    """Run `body` (which starts processes and watches them) until it returns or Ctrl-C / SIGTERM.

    `body` gets an ExitStack for stopping what it starts, newest first.
    Returns its exit code; 0 on Ctrl-C or SIGTERM; 1 with one line naming
    `name` when starting something failed (a subprocess error, a timeout,
    an OSError, a missing binary).
    """
    with ExitStack() as cleanup:
        try:
            return body(cleanup)
        except KeyboardInterrupt:
            shield_cleanup()
            say("stopping everything")
            return 0
        except MissingBinary as exc:
            shield_cleanup()
            say(f"{name} failed: {exc}")
            return 1
        except (subprocess.CalledProcessError, RuntimeError, TimeoutError, OSError) as exc:
            shield_cleanup()
            detail = getattr(exc, "stderr", None) or ""
            say(f"{name} failed: {exc} {detail.strip()[-500:]}".rstrip())
            return 1
        finally:
            shield_cleanup()
    return 1  # unreachable; keeps type checkers content


def watch(stack: Stack, servers: Mapping[str, Watched] | None = None) -> int:
    """Check once a second that every process is alive; 1 and a line naming the first that exited.

    Returns only then: Ctrl-C or SIGTERM (as KeyboardInterrupt) ends the wait.
    """
    while True:
        for process in stack.processes:
            if not process.alive():
                say(f"{process.name} exited; see {process.log_path.relative_to(ROOT)}")
                return 1
        for name, server in (servers or {}).items():
            if server.process is None or server.process.poll() is not None:
                say(f"{name} exited:\n{server.log()[-2000:]}")
                return 1
        time.sleep(1)


@contextmanager
def private_redis(url: str) -> Iterator[str]:
    """`url` if Redis answers there, else a redis-server we start and stop."""
    found, server = ensure_redis(url)
    if server is None:
        say(f"redis: {found}")
    else:
        say(f"redis: started redis-server pid {server.pid} at {found}")
    try:
        yield found
    finally:
        if server is not None:
            server.stop()
