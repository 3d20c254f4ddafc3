"""jobs.broker_restore: a broker that refuses writes neither blocks the worker nor strands messages.

Against `role_redis` (conftest), a redis-server whose role these tests change.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from kombu import Connection

from devstack.services import RedisServer
from jobs import broker_restore
from jobs.broker_transport import BrokerUnavailableError, Transport


def test_broker_restore_refused_by_the_broker_neither_blocks_nor_loses_messages(
    role_redis: RedisServer, role_admin: redis.Redis, demote: Callable[[], None]
) -> None:
    # given a consumer holding one delivered, unacknowledged message
    with Connection(role_redis.url, transport=Transport) as connection:
        queue = connection.SimpleQueue("q")
        queue.put({"job": 1})
        message = queue.get(timeout=5)
        assert role_admin.hlen("unacked") == 1

        # when the broker refuses writes and the consumer's connection closes
        demote()
        started = time.monotonic()
        queue.close()
        connection.close()
        took = time.monotonic() - started

    # then closing did not wait for the broker (kombu's restore retried at once, for ever)
    assert took < 2, took
    assert message.delivery_tag in broker_restore._restore_later
    assert role_admin.llen("q") == 0
    assert role_admin.hlen("unacked") == 1

    # when the broker serves again, the next channel's first restore pass puts it back
    role_admin.replicaof("NO", "ONE")
    with Connection(role_redis.url, transport=Transport) as connection:
        connection.default_channel.qos.restore_visible()

    # then the message is on its queue once, and nothing is left to restore
    assert role_admin.llen("q") == 1
    assert role_admin.hlen("unacked") == 0
    assert broker_restore._restore_later == set()


def test_broker_restore_transaction_or_raise_retries_a_changed_key_only(
    role_admin: redis.Redis, transport_client: redis.Redis, demote: Callable[[], None]
) -> None:
    # given a transaction whose watched key another client changes on the first try
    calls = []

    def bump(pipe: redis.client.Pipeline) -> None:
        calls.append(pipe.get("k"))
        if len(calls) == 1:
            role_admin.set("k", "changed")
        pipe.multi()
        pipe.set("k", "mine")

    # then it is retried, as redis-py's Redis.transaction does
    assert broker_restore.transaction_or_raise(transport_client, bump, "k") == [True]
    assert calls == [None, b"changed"]

    # when the server refuses the write, the transaction ends with the connection error
    demote()
    with pytest.raises(BrokerUnavailableError, match="^READONLY"):
        broker_restore.transaction_or_raise(transport_client, bump, "k")
