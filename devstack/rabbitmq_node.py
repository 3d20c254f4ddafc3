"""A RabbitMQ node of our own on spare ports, for drills that stop and restart the broker.

The machine's RabbitMQ (5672, devstack.rabbitmq) is never stopped: a drill
that restarts "the broker" starts this private node instead, with every
file in a temporary directory (its database, logs, config, plugins file
and Erlang cookie: HOME), a unique node name, its AMQP and distribution
ports picked free, and the running epmd shared. Debian's
/usr/lib/rabbitmq/bin scripts are run directly (the /usr/sbin wrappers
switch to the rabbitmq user and its cookie). `stop()` is a real node stop
(`rabbitmqctl stop`: the Erlang VM exits; its quorum queues stay on disk),
`start()` again boots the same data. `close()` stops it by pid and removes
the directory.

Measured on Debian's 3.10.8 (2 cores, load 5-7): a boot takes 5-9 s. A
SIGKILLed node loses a quorum queue declared less than a few minutes
before (its Ra registration was not yet written, docs/brokers.md): stop it
with `stop()`, not `kill()`, unless that is what is tested.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from devstack.rabbitmq import rabbitmq_reachable
from devstack.services import free_port, stop_process, wait_for

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
BOOT_TIMEOUT = 90.0
CTL_TIMEOUT = 60.0


def rabbitmq_server_available() -> bool:
    """Whether Debian's rabbitmq-server scripts are installed (a node can be started)."""
    return (RABBITMQ_BIN / "rabbitmq-server").exists() and shutil.which("erl") is not None


class RabbitMQNode:
    """One private RabbitMQ node (guest/guest on 127.0.0.1:`port`, vhost "/")."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jobs-rabbitmq-node-"))
        self.name = f"jobs{uuid.uuid4().hex[:10]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.process: subprocess.Popen | None = None
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq.conf").write_text("")
        self.boots = 0

    @property
    def url(self) -> str:
        """The broker URL of the node's default vhost."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def environ(self) -> dict[str, str]:
        """The environment of the node's server and of rabbitmqctl aimed at it."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),  # the Erlang cookie lives here
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(self.dir / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }

    def ctl(self, *args: str) -> str:
        """`rabbitmqctl -n <node> args...`; returns stdout, raises CalledProcessError."""
        done = subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.name, *args],
            env=self.environ(),
            capture_output=True,
            text=True,
            timeout=CTL_TIMEOUT,
            check=True,
        )
        return done.stdout

    def start(self) -> float:
        """Boot the node (again: same data); returns the seconds until it took connections."""
        began = time.monotonic()
        self.boots += 1
        with open(self.dir / f"server-{self.boots}.log", "wb") as log:
            self.process = subprocess.Popen(
                [str(RABBITMQ_BIN / "rabbitmq-server")],
                env=self.environ(),
                cwd=self.dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def up() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited: {self.log()[-1500:]}")
            return rabbitmq_reachable(self.url, timeout=0.5)

        wait_for(up, timeout=BOOT_TIMEOUT, interval=0.1, what=f"RabbitMQ node {self.name}")
        return time.monotonic() - began

    def stop(self) -> None:
        """Stop the node (`rabbitmqctl stop`: the VM exits, the data stays); wait for its exit."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.ctl("stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self._signal_beam(signal.SIGTERM)
        stop_process(self.process, timeout=30)

    def kill(self) -> None:
        """SIGKILL the node's Erlang VM (a crash) and reap its start script."""
        self._signal_beam(signal.SIGKILL)
        stop_process(self.process, sig=signal.SIGKILL, timeout=10)

    def close(self) -> None:
        """Stop the node by pid (whatever state it is in) and remove its directory."""
        try:
            self.stop()
        finally:
            if self.process is not None and self.process.poll() is None:
                self.kill()
            self._signal_beam(signal.SIGKILL)
            shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        """The node's own log file (boot, queues, connections)."""
        path = self.dir / "log" / f"{self.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _beam_pid(self) -> int | None:
        """The pid of this node's Erlang VM, if one runs (a reused pid is not taken for it)."""
        try:
            pid = int((self.dir / "pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if self.name.encode() in cmdline else None

    def _signal_beam(self, sig: int) -> None:
        pid = self._beam_pid()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
