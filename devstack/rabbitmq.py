"""RabbitMQ for devstack and the tests: a vhost of our own on the machine's server.

`Vhost` creates a vhost with `rabbitmqctl` (guest gets every permission on
it) and deletes it, with every queue in it, when done; `amqp_url` is what
CELERY_BROKER_URL gets. The machine's RabbitMQ is used (127.0.0.1:5672 by
default, RABBITMQ_URL to override); `rabbitmq_reachable` says whether it
answers. One vhost per platform keeps parallel platforms apart.
`devstack_broker` gives `make demo` and `make up` RabbitMQ on request
(DEVSTACK_BROKER=rabbitmq).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from config.env import env

DEFAULT_RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"
RABBITMQCTL_TIMEOUT = 30.0
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


def rabbitmq_reachable(url: str = DEFAULT_RABBITMQ_URL, *, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at `url`'s host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout):
            return True
    except OSError:
        return False


def rabbitmqctl(*args: str) -> str:
    """Run `rabbitmqctl args...`; returns stdout, raises CalledProcessError (with its output)."""
    binary = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    done = subprocess.run(
        [binary, *args],
        capture_output=True,
        text=True,
        timeout=RABBITMQCTL_TIMEOUT,
        check=True,
    )
    return done.stdout


@dataclass
class Vhost:
    """A vhost on the machine's RabbitMQ, named `name` (a fresh one by default)."""

    name: str = field(default_factory=lambda: f"jobs-{uuid.uuid4().hex[:10]}")
    server_url: str = DEFAULT_RABBITMQ_URL
    user: str = "guest"

    @property
    def url(self) -> str:
        """The broker URL of this vhost (the server URL with the vhost as its path)."""
        parts = urlsplit(self.server_url)
        return f"{parts.scheme}://{parts.netloc}/{quote(self.name, safe='')}"

    def create(self) -> Vhost:
        rabbitmqctl("add_vhost", self.name)
        rabbitmqctl("set_permissions", "-p", self.name, self.user, ".*", ".*", ".*")
        return self

    def delete(self) -> None:
        """Delete the vhost and everything in it; a vhost already gone is fine."""
        try:
            rabbitmqctl("delete_vhost", self.name)
        except subprocess.CalledProcessError as error:
            if "does not exist" not in (error.stdout or "") + (error.stderr or ""):
                raise

    def restart(self) -> None:
        """Restart the vhost's queues and connections (`rabbitmqctl restart_vhost`)."""
        rabbitmqctl("restart_vhost", "-p", self.name)

    def queues(self) -> list[dict[str, str]]:
        """Every queue: name, type, messages_ready, messages_unacknowledged (as text)."""
        out = rabbitmqctl(
            "list_queues",
            "-p",
            self.name,
            "--no-table-headers",
            "-q",
            "name",
            "type",
            "messages_ready",
            "messages_unacknowledged",
        )
        columns = ("name", "type", "messages_ready", "messages_unacknowledged")
        return [dict(zip(columns, line.split("\t"), strict=False)) for line in out.splitlines()]


def wants_rabbitmq() -> bool:
    """Whether `make demo` / `make up` run on RabbitMQ: DEVSTACK_BROKER=rabbitmq or an amqp URL."""
    configured = env.str("CELERY_BROKER_URL", default="")
    return env.str("DEVSTACK_BROKER", default="redis") == "rabbitmq" or configured.startswith(
        AMQP_SCHEMES
    )


def _safe(url: str) -> str:
    """`url` without its password (for a message)."""
    parts = urlsplit(url)
    host = f"{parts.hostname or ''}:{parts.port}" if parts.port else parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}"


@contextmanager
def devstack_broker(redis_url: str) -> Iterator[str]:
    """The broker URL for `make demo` / `make up`: `redis_url`, or a fresh RabbitMQ vhost.

    An amqp:// CELERY_BROKER_URL is used as given (its vhost keeps the
    queues the platform declares; they are empty when the demo ends).
    DEVSTACK_BROKER=rabbitmq alone gets a vhost of its own on the machine's
    server (RABBITMQ_URL, default 127.0.0.1:5672 guest/guest), deleted on
    exit. Raises RuntimeError (one line) when no RabbitMQ answers there.
    """
    if not wants_rabbitmq():
        yield redis_url
        return
    configured = env.str("CELERY_BROKER_URL", default="")
    if configured.startswith(AMQP_SCHEMES):
        if not rabbitmq_reachable(configured):
            raise RuntimeError(f"CELERY_BROKER_URL: no RabbitMQ answers at {_safe(configured)}")
        yield configured
        return
    server = env.str("RABBITMQ_URL", default=DEFAULT_RABBITMQ_URL)
    if not rabbitmq_reachable(server):
        raise RuntimeError(f"DEVSTACK_BROKER=rabbitmq: no RabbitMQ answers at {server}")
    vhost = Vhost(server_url=server).create()
    try:
        yield vhost.url
    finally:
        vhost.delete()
