"""jobs.broker_transport: Redis's "cannot serve you now" replies are lost connections.

These tests pin the library hooks the transport relies on (kombu's
`Channel._connparams`, `connection_class` and `TRANSPORT_ALIASES`, redis-py's
`Connection.read_response`, Flower's broker URL parsing): an upgrade that
moves one fails here, not in production during a failover. The role-changing
tests run against `role_redis` (conftest), never the session broker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import kombu.transport
import pytest
import redis
from flower.utils.broker import Broker as FlowerBroker
from flower.utils.broker import Redis as FlowerRedis
from kombu import Connection

from config.celery_app import app
from devstack.services import RedisServer, wait_for
from jobs.broker_transport import (
    UNAVAILABLE_REPLY_CODES,
    BrokerUnavailableError,
    Transport,
    UnavailableIsDisconnect,
    is_unavailable_reply,
    redis_client,
)

# Replies as Redis sends them (minus the leading "-").
UNAVAILABLE_REPLIES = [
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
    "READONLY You can't write against a read only replica.",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
    "LOADING Redis is loading the dataset in memory",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "NOREPLICAS Not enough good replicas to write.",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "CLUSTERDOWN The cluster is down",
]
PROGRAMMING_ERRORS = [
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR unknown command 'BRPOPP', with args beginning with: ",
    "ERR syntax error",
    "NOSCRIPT No matching script. Please use EVAL.",
    "BUSYKEY Target key name already exists.",
    "NOPERM this user has no permissions to run the 'lpush' command",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "EXECABORT Transaction discarded because of previous errors.",
]


def parsed(reply: str) -> Exception:
    """The exception redis-py's own parser makes of an error reply."""
    return redis.connection.DefaultParser.parse_error(reply)


def test_broker_transport_every_listed_code_has_a_reply_here() -> None:
    assert {reply.split(" ", 1)[0] for reply in UNAVAILABLE_REPLIES} == UNAVAILABLE_REPLY_CODES


@pytest.mark.parametrize("reply", UNAVAILABLE_REPLIES)
def test_broker_transport_classes_unavailable_replies_as_unavailable(reply: str) -> None:
    assert is_unavailable_reply(parsed(reply))


@pytest.mark.parametrize("reply", PROGRAMMING_ERRORS)
def test_broker_transport_keeps_other_replies_loud(reply: str) -> None:
    error = parsed(reply)

    assert not is_unavailable_reply(error)
    # and kombu (so Celery's consumer) does not recover from it: the worker stops loudly
    assert not isinstance(error, Transport.connection_errors)
    assert isinstance(error, Transport.channel_errors)


def test_broker_transport_error_is_a_kombu_connection_error() -> None:
    assert issubclass(BrokerUnavailableError, redis.ConnectionError)
    assert BrokerUnavailableError in Transport.connection_errors
    assert not issubclass(BrokerUnavailableError, redis.ResponseError)


def test_broker_transport_is_what_the_celery_app_uses_under_its_redis_url() -> None:
    # the Celery app (and kombu for any redis:// URL) resolves to our transport
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)
        assert BrokerUnavailableError in connection.connection_errors
        uri = connection.as_uri(include_password=True)
    # and the broker URL keeps its scheme, so Flower still picks its Redis client by it
    assert uri.startswith("redis://"), uri
    assert isinstance(FlowerBroker(uri), FlowerRedis)
    assert kombu.transport.get_transport_cls("rediss") is Transport


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("redis://127.0.0.1:1/0", redis.Connection),
        ("rediss://127.0.0.1:1/0", redis.SSLConnection),
        ("unix:///tmp/jobs-no-such.sock?db=0", redis.UnixDomainSocketConnection),
    ],
)
def test_broker_transport_redis_client_keeps_the_urls_connection_class(
    url: str, base: type
) -> None:
    connection_class = redis_client(url).connection_pool.connection_class

    assert issubclass(connection_class, UnavailableIsDisconnect)
    assert issubclass(connection_class, base)


def test_broker_transport_write_to_a_replica_is_a_lost_connection_that_reconnects(
    role_admin: redis.Redis, transport_client: redis.Redis, demote: Callable[[], None]
) -> None:
    # given a channel that has published once
    transport_client.lpush("q", "before")

    # when the server turns into a replica, a publish fails as a lost connection
    demote()
    with pytest.raises(BrokerUnavailableError, match="^READONLY "):
        transport_client.lpush("q", "during")

    # and so does a transaction (kombu acknowledges with MULTI/EXEC)
    with pytest.raises(BrokerUnavailableError):
        transport_client.pipeline().zrem("unacked_index", "tag").hdel("unacked", "tag").execute()

    # then, once it is a master again, the same client works on a fresh connection
    role_admin.replicaof("NO", "ONE")
    transport_client.lpush("q", "after")
    assert role_admin.lrange("q", 0, -1) == [b"after", b"before"]


def test_broker_transport_blocked_brpop_unblocked_by_failover_is_a_lost_connection(
    role_admin: redis.Redis, transport_client: redis.Redis, demote: Callable[[], None]
) -> None:
    # given a BRPOP blocked on an empty queue, as the worker's consumer waits
    outcome: list[BaseException | object] = []

    def block() -> None:
        try:
            outcome.append(transport_client.brpop(["q"], timeout=10))
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=block, daemon=True)
    thread.start()
    wait_for(
        lambda: role_admin.info("clients")["blocked_clients"] == 1, timeout=5, what="BRPOP blocked"
    )

    # when the server turns into a replica
    demote()
    thread.join(timeout=10)

    # then the BRPOP ends with a lost connection, not a ResponseError
    assert len(outcome) == 1, outcome
    assert isinstance(outcome[0], BrokerUnavailableError), outcome
    assert str(outcome[0]).startswith("UNBLOCKED"), outcome


def test_broker_transport_keeps_wrongtype_a_response_error(
    role_admin: redis.Redis, transport_client: redis.Redis
) -> None:
    role_admin.set("q", "a string, not a list")

    with pytest.raises(redis.ResponseError, match="^WRONGTYPE") as raised:
        transport_client.lpush("q", "x")
    assert not isinstance(raised.value, redis.ConnectionError)


def test_broker_transport_refuses_to_connect_to_a_replica(
    role_redis: RedisServer, role_admin: redis.Redis, demote: Callable[[], None]
) -> None:
    # given a server that answers PING but is a replica
    demote()

    # when a connection is established, it fails as a connection error (Celery backs off)
    with Connection(role_redis.url, transport=Transport) as connection:
        with pytest.raises(BrokerUnavailableError, match="^READONLY the broker is a slave"):
            connection.connect()
        assert connection.transport.cycle._channels == set()

    # and once it is a primary again, it connects
    role_admin.replicaof("NO", "ONE")
    with Connection(role_redis.url, transport=Transport) as connection:
        connection.connect()
        assert connection.connected
