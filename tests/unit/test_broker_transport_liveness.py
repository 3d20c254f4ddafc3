"""jobs.broker_transport: every Redis client notices a silent broker, and lets go of it at once.

Issue 19, item 3. The options are pinned per kind of client (our redis-py
clients, kombu's transport in the Celery app); the transport's hooks
(`heartbeat_check` for consumers without an event loop, `_collect` for a
lost connection, acknowledgements on a channel closed with it) are run
against a real redis-server behind a StallProxy that drops all traffic
without closing anything. An upgrade of kombu that moves a hook fails here.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from kombu import Connection, Exchange, Queue

from config.celery_app import app
from devstack.services import RedisServer, wait_for
from devstack.stall_proxy import StallProxy
from jobs import broker_restore
from jobs.broker import broker_client
from jobs.broker_transport import ChannelClosedError, Transport, redis_client
from jobs.budget import budget_client
from jobs.supervisor import Supervisor

KEEPALIVE = {
    socket.TCP_KEEPIDLE: 5,
    socket.TCP_KEEPINTVL: 1,
    socket.TCP_KEEPCNT: 3,
    socket.TCP_USER_TIMEOUT: 8000,
}


@pytest.fixture
def proxy(private_broker: RedisServer) -> Iterator[StallProxy]:
    stall_proxy = StallProxy(private_broker.port).start()
    try:
        yield stall_proxy
    finally:
        stall_proxy.close()


def _liveness(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.get(k) for k in ("health_check_interval", "socket_keepalive")} | {
        "socket_keepalive_options": kwargs.get("socket_keepalive_options")
    }


EXPECTED = {
    "health_check_interval": 1.0,
    "socket_keepalive": True,
    "socket_keepalive_options": KEEPALIVE,
}


def test_broker_transport_redis_client_adds_the_liveness_options_and_the_caller_wins(
    private_broker: RedisServer,
) -> None:
    client = redis_client(private_broker.url, socket_timeout=0.5, health_check_interval=3)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.5
    assert kwargs["health_check_interval"] == 3
    assert kwargs["socket_keepalive_options"] == KEEPALIVE
    assert client.ping()


def test_broker_transport_every_redis_client_of_the_platform_has_the_liveness_options() -> None:
    # given each of our own Redis clients: broker reads and writes (queue
    # depths, lost-message checks, cancellation flags, worker reports, the
    # outcome spool), the retry budget, and a worker child's cancellation poll
    supervisor = Supervisor()
    supervisor._cancel_requested("no-such-job")
    clients = {
        "broker_client": broker_client(),
        "budget_client": budget_client(),
        "supervisor": supervisor._redis,
    }
    # then every one checks its connections' health and keeps TCP alive
    for name, client in clients.items():
        assert client is not None, name
        kwargs = client.connection_pool.connection_kwargs
        assert _liveness(kwargs) == EXPECTED, name
        assert 0 < kwargs["socket_timeout"] <= settings.JOBS_BROKER_SOCKET_TIMEOUT, name


def test_broker_transport_redis_client_on_a_unix_socket_leaves_out_the_tcp_options() -> None:
    client = redis_client("unix:///nonexistent/redis.sock")
    kwargs = client.connection_pool.connection_kwargs
    assert "socket_keepalive" not in kwargs
    assert kwargs["health_check_interval"] == 1.0
    # a connection can be made (it would refuse an unknown keyword)
    client.connection_pool.make_connection()


def test_broker_transport_celery_connections_carry_the_liveness_options() -> None:
    # given a connection of the Celery app (consumer, publishers, pidbox, events all use them)
    with app.connection_for_read() as connection:
        options = connection.transport_options or {}
        channel: Any = connection.default_channel
        params = channel._connparams()
    # then kombu gets the health checks, keepalive, timeouts and reconnection back-off
    assert _liveness(options) == EXPECTED
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 2.0
    assert (options["interval_start"], options["interval_step"], options["interval_max"]) == (
        1,
        1,
        3,
    )
    # and passes them on to redis-py
    assert _liveness(params) == EXPECTED
    assert params["socket_timeout"] == 2.0


def test_broker_transport_heartbeat_check_runs_the_subscription_check_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given our transport (kombu calls heartbeat_check about once a second on
    # an idle drain_events consumer) and a clock
    transport = Connection(
        app.conf.broker_url, transport_options={"health_check_interval": 2}
    ).transport
    assert isinstance(transport, Transport)
    checks: list[float] = []
    now = [100.0]
    monkeypatch.setattr(
        transport.cycle, "maybe_check_subclient_health", lambda: checks.append(now[0])
    )
    monkeypatch.setattr("jobs.broker_transport.time.monotonic", lambda: now[0])

    # when it is called every second for 6 s
    for _ in range(7):
        transport.heartbeat_check(None)
        now[0] += 1.0

    # then kombu's subscription check ran every 2 s
    assert checks == [100.0, 102.0, 104.0, 106.0]


def _subscribed_connection(proxy: StallProxy) -> Connection:
    """A connection subscribed to a fanout exchange (as the worker's pidbox and gossip are)."""
    options = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    connection = Connection(proxy.url, transport_options=options)
    queue = Queue("liveness-test", Exchange("liveness-fanout", type="fanout"), auto_delete=True)
    connection.Consumer([queue], callbacks=[lambda body, message: None]).consume()

    def subscribed() -> bool:
        with contextlib.suppress(socket.timeout):
            connection.drain_events(timeout=0.1)
        return any(link.subscribed for link in proxy.links)

    wait_for(subscribed, timeout=10, what="a subscription through the proxy")
    return connection


def test_broker_transport_collect_closes_every_socket_at_once_when_the_broker_is_silent(
    proxy: StallProxy,
) -> None:
    # given a connection with a subscription through the proxy
    connection = _subscribed_connection(proxy)
    # when the broker goes silent and the connection is collected (as Celery's
    # worker does after it lost the connection)
    proxy.stall()
    started = time.monotonic()
    connection.collect()
    took = time.monotonic() - started

    # then nothing waited on the broker (kombu's close waited a socket timeout per channel)
    assert took < 1.0, took
    # and every socket is closed by the client: none left subscribed and silent
    wait_for(
        lambda: all(link.closed_at is not None for link in proxy.links),
        timeout=5,
        what="every link closed",
    )
    assert {link.closed_by for link in proxy.links} == {"client"}


def test_broker_transport_ack_on_a_channel_closed_with_its_lost_connection_is_a_connection_error(
    private_broker: RedisServer,
) -> None:
    # given a delivered, unacknowledged message
    connection = Connection(private_broker.url)
    queue = Queue("liveness-ack", Exchange("liveness-ack"), routing_key="liveness-ack")
    with connection.Producer() as producer:
        producer.publish(
            {"n": 1}, exchange=queue.exchange, routing_key="liveness-ack", declare=[queue]
        )
    message = queue(connection.default_channel).get(no_ack=False)
    assert message is not None
    # when the connection is lost and collected
    connection.collect()

    # then acknowledging it is a connection error Celery logs and survives, not an AttributeError
    with pytest.raises(ChannelClosedError):
        message.ack()
    assert issubclass(ChannelClosedError, redis.ConnectionError)
    assert ChannelClosedError in Transport.connection_errors or issubclass(
        ChannelClosedError, Transport.connection_errors
    )
    # and the message goes back on its queue with the next channel's restore pass
    assert message.delivery_tag in broker_restore._restore_later
    with Connection(private_broker.url) as fresh:
        fresh_channel: Any = fresh.default_channel
        fresh_channel.qos.restore_later()
        again = queue(fresh_channel).get(no_ack=True)
    assert again is not None
    assert again.payload == {"n": 1}
