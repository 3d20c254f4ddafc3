"""The scheduler's worker monitor follows worker events again after a broker failover.

Against `role_redis` (conftest), a redis-server whose role this test changes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from celery import Celery

from devstack.services import RedisServer, wait_for
from observability.worker_monitor import WorkerMonitor


def test_worker_monitor_follows_events_again_after_a_failover(
    role_redis: RedisServer,
    role_admin: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    demote: Callable[[], None],
) -> None:
    # given the scheduler's worker monitor following worker events on this server
    events_app = Celery("failover", broker=role_redis.url, set_as_current=False)
    monitor = WorkerMonitor(events_app, reconnect_max=0.2).start()

    def heartbeat(node: str) -> None:
        with events_app.connection_for_write() as connection:
            events_app.events.Dispatcher(connection, hostname=node).send("worker-heartbeat")

    def seen(host: str) -> bool:
        return host in monitor.snapshot()

    try:
        wait_for(lambda: monitor.connected, timeout=10, what="monitor connected")
        # (sent until seen: `connected` is set just before the subscription is made,
        # and a heartbeat published before it is lost)
        wait_for(
            lambda: heartbeat("worker@before") or seen("before"),
            timeout=10,
            interval=0.2,
            what="a heartbeat seen",
        )

        # when the server turns into a replica and drops the monitor's connection
        demote()
        role_admin.client_kill_filter(_type="pubsub")
        wait_for(lambda: not monitor.connected, timeout=10, what="monitor disconnected")
        # and refuses the monitor's reconnection (a replica) for a while
        wait_for(
            lambda: "READONLY the broker is a slave" in caplog.text,
            timeout=20,
            what="a reconnection refused by the replica",
        )

        # and is a primary again
        role_admin.replicaof("NO", "ONE")

        # then the monitor reconnects and sees the workers' events again
        wait_for(lambda: monitor.connected, timeout=10, what="monitor reconnected")
        wait_for(
            lambda: heartbeat("worker@after") or seen("after"), timeout=10, what="a new heartbeat"
        )
    finally:
        monitor.stop()
