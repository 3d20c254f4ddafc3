"""The loopback ports `make up` and `make observe` listen on: one environment variable each.

Every port is read from its variable (defaults below, .env.example lists
them) and checked before anything starts: a value that is not a port, two
variables naming one port, or a port something already listens on is a
`PortError`, one line naming the variable. Nothing ever moves to another
port on its own.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable

from config.env import env

PUBLIC = "JOBS_PUBLIC_PORT"
WEB = "DEVSTACK_WEB_PORT"
FLOWER = "FLOWER_PORT"
WORKER_METRICS = "JOBS_WORKER_METRICS_PORT"
SCHEDULER_METRICS = "JOBS_SCHEDULER_METRICS_PORT"
PROMETHEUS = "DEVSTACK_PROMETHEUS_PORT"
ALERTMANAGER = "DEVSTACK_ALERTMANAGER_PORT"
ALERT_WEBHOOK = "DEVSTACK_ALERT_WEBHOOK_PORT"

UP_PORTS = (PUBLIC, WEB, FLOWER, WORKER_METRICS, SCHEDULER_METRICS)
OBSERVE_PORTS = (*UP_PORTS, PROMETHEUS, ALERTMANAGER, ALERT_WEBHOOK)


class PortError(ValueError):
    """A port variable is invalid, shared with another, or its port is taken (one line)."""


def configured() -> dict[str, str]:
    """{variable: its value as set (else its default)} for every port the devstack uses."""
    return {
        # nginx: the admin, the API and Flower (/flower/); the only port a browser needs.
        PUBLIC: env.str("JOBS_PUBLIC_PORT", default="8000"),
        # gunicorn itself, behind nginx; its /metrics is scraped here.
        WEB: env.str("DEVSTACK_WEB_PORT", default="8001"),
        # Flower itself, behind nginx; its /flower/metrics is scraped here.
        FLOWER: env.str("FLOWER_PORT", default="5555"),
        WORKER_METRICS: env.str("JOBS_WORKER_METRICS_PORT", default="9808"),
        SCHEDULER_METRICS: env.str("JOBS_SCHEDULER_METRICS_PORT", default="9809"),
        PROMETHEUS: env.str("DEVSTACK_PROMETHEUS_PORT", default="9090"),
        ALERTMANAGER: env.str("DEVSTACK_ALERTMANAGER_PORT", default="9093"),
        # The loopback webhook Alertmanager notifies, printed on the console.
        ALERT_WEBHOOK: env.str("DEVSTACK_ALERT_WEBHOOK_PORT", default="9095"),
    }


def claim(variables: Iterable[str], *, host: str = "127.0.0.1") -> dict[str, int]:
    """{variable: port} for `variables`, each checked free on `host`.

    Raises PortError (one line naming the variable) for a value that is not
    1-65535, a port two variables share, or a port something listens on.
    """
    values = configured()
    ports: dict[str, int] = {}
    for variable in variables:
        port = _parse(variable, values[variable])
        owner = next((name for name, taken in ports.items() if taken == port), None)
        if owner is not None:
            raise PortError(f"{variable}={port}: the same port as {owner}; set another")
        if not is_free(port, host=host):
            raise PortError(
                f"{variable}={port}: port {port} on {host} is in use; "
                f"stop what listens there or set {variable} to a free port"
            )
        ports[variable] = port
    return ports


def is_free(port: int, *, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on host:port now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _parse(variable: str, value: str) -> int:
    if not value.strip().isdigit() or not 1 <= int(value) <= 65535:
        raise PortError(f"{variable}={value!r}: not a TCP port (1-65535)")
    return int(value)
