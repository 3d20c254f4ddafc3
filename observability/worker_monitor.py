"""Which workers are up: Celery's worker events, consumed in one place (the scheduler).

A worker cannot report its own death, so `celery_worker_up` comes from a
central consumer of Celery's event stream, the mechanism Flower and
celery-exporter use: every worker's main process sends `worker-online`, a
`worker-heartbeat` every 2 s (with its number of active tasks) and
`worker-offline` on a clean shutdown. The scheduler process runs one
WorkerMonitor thread (it binds only `worker.#` events, so task events cost
it nothing) and serves the result on its /metrics (observability.exporter):

- `celery_worker_up{hostname}`: 1 while a worker of that host heartbeats;
  0, not absent, once the last heartbeat is older than `offline_after`
  seconds (default 30: a SIGKILLed worker reads 0 within 30 s plus one
  scrape) or right after `worker-offline`; the series is dropped
  `forget_after` seconds (default 600, celery-exporter's purge time) after
  the worker was last seen.
- `celery_worker_tasks_active{hostname}`: the `active` count of the last
  heartbeat (0 once the worker is down).

`hostname` is the host part of the node name, as celery-exporter labels it;
several nodes on one host are up while any of them is, and their active
tasks add up. Ages are measured on this process's monotonic clock from when
an event arrived, never from a worker's clock (DESIGN.md "Faults": one clock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from observability.metrics import scrape_family
from observability.task_events import host_of

logger = logging.getLogger(__name__)


@dataclass
class NodeSeen:
    """What the last event of one worker node said, and when it arrived (monotonic seconds)."""

    node: str
    last_seen: float
    active: int = 0
    online: bool = True


class WorkerMonitor:
    """A daemon thread that follows Celery worker events; `snapshot()` is safe from any thread.

    `app` is the Celery app; `offline_after` and `forget_after` are seconds;
    `clock` (monotonic seconds) is injectable for tests. The thread
    reconnects after any broker error (failover, restart), waiting up to
    `reconnect_max` seconds between tries, and after `offline_after / 2`
    seconds without any worker event (a connection that stopped delivering
    without an error).
    """

    def __init__(
        self,
        app: Any,
        *,
        offline_after: float = 30.0,
        forget_after: float = 600.0,
        reconnect_max: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.offline_after = offline_after
        # Half the offline threshold: a dead subscription is replaced before a
        # live worker could be reported down.
        self.silence_after = offline_after / 2
        self.forget_after = forget_after
        self.reconnect_max = reconnect_max
        self.clock = clock
        self._nodes: dict[str, NodeSeen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._receiver: Any = None
        self._thread: threading.Thread | None = None
        self.connected = False

    # -- events ---------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """Apply one worker event (a dict with `type`, `hostname`, and `active` for heartbeats)."""
        kind = event.get("type", "")
        node = event.get("hostname")
        if not node or not kind.startswith("worker-"):
            return
        now = self.clock()
        with self._lock:
            seen = self._nodes.get(node) or NodeSeen(node=node, last_seen=now)
            seen.last_seen = now
            if kind == "worker-offline":
                seen.online, seen.active = False, 0
            else:
                seen.online = True
                if kind == "worker-heartbeat":
                    seen.active = int(event.get("active") or 0)
            self._nodes[node] = seen

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """{hostname: (up 0/1, active tasks)} now; forgets nodes unseen for `forget_after` s."""
        now = self.clock()
        hosts: dict[str, tuple[int, int]] = {}
        with self._lock:
            for node, seen in list(self._nodes.items()):
                age = now - seen.last_seen
                if age > self.forget_after:
                    del self._nodes[node]
                    continue
                alive = seen.online and age <= self.offline_after
                host = host_of(node)
                up, active = hosts.get(host, (0, 0))
                hosts[host] = (max(up, int(alive)), active + (seen.active if alive else 0))
        return hosts

    # -- thread ---------------------------------------------------------------

    def start(self) -> WorkerMonitor:
        """Start the consuming thread (once); returns self."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="jobs-worker-monitor", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to stop and wait up to `timeout` seconds."""
        self._stop.set()
        if self._receiver is not None:
            self._receiver.should_stop = True
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                with self.app.connection_for_read() as connection:
                    self._receiver = self.app.events.Receiver(
                        connection, handlers={"*": self.on_event}, routing_key="worker.#"
                    )
                    self.connected = True
                    delay = 0.5
                    # wakeup: ask every worker for a heartbeat now, so a fresh
                    # monitor knows the live workers within a second. The
                    # timeout: a connection that silently stopped delivering (a
                    # partition that healed without a reset, a proxy holding
                    # data) raises nothing, so silence is treated as a lost
                    # connection: live workers heartbeat every 2 s.
                    self._receiver.capture(limit=None, timeout=self.silence_after, wakeup=True)
            except TimeoutError:
                if self._stop.is_set():
                    break
                logger.info(
                    "worker monitor heard no worker event for %.0f s; reconnecting",
                    self.silence_after,
                )
                delay = 0.0
            except Exception as exc:  # kombu/redis raise many types for one outage
                if self._stop.is_set():
                    break
                logger.warning(
                    "worker monitor lost the broker (%s: %s); reconnecting", type(exc).__name__, exc
                )
            finally:
                self.connected = False
            self._stop.wait(delay)
            delay = min(max(delay, 0.25) * 2, self.reconnect_max)


class WorkerUpCollector(Collector):
    """celery_worker_up and celery_worker_tasks_active from a WorkerMonitor, at scrape time."""

    def __init__(self, monitor: WorkerMonitor) -> None:
        self.monitor = monitor

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = scrape_family("celery_worker_up")
        active = scrape_family("celery_worker_tasks_active")
        for host, (is_up, tasks) in sorted(self.monitor.snapshot().items()):
            up.add_metric([host], is_up)
            active.add_metric([host], tasks)
        yield from (up, active)
