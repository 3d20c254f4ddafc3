"""Putting unacknowledged messages back on their queues when the broker refuses writes.

On a lost connection Celery closes the consumer's channel and kombu puts
the channel's delivered, unacknowledged messages (reserved, not started;
or running, whose second delivery our lease drops unrun) back on their
queues. A broker that is up but refuses writes (READONLY after a failover,
MISCONF) turned that restore into a loop that blocked the worker for the
whole outage (see transaction_or_raise); merely stopping it would leave the
messages in kombu's unacked hash for the visibility timeout (an hour).
Here a refused restore is remembered and retried by the next channel.
Used by jobs.broker_transport.Channel.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from redis import exceptions
from redis.client import Pipeline

logger = logging.getLogger(__name__)


def transaction_or_raise(
    client: redis.Redis, func: Callable[[Pipeline], object], *watches: str
) -> list[Any]:
    """redis-py's `Redis.transaction(func, *watches)`, except that a lost connection ends it.

    redis-py turns a connection lost inside a WATCH transaction into a
    WatchError, which `Redis.transaction` retries at once and for ever. With
    a server that accepts WATCH but refuses writes (READONLY, MISCONF), kombu's
    restore of unacknowledged messages looped that way for the whole outage:
    ~280 reconnects a second, and the worker's event loop (time limits,
    heartbeats, shutdown) blocked until the broker recovered. A WatchError
    raised for a lost connection is re-raised here as that connection error;
    a watched key that really changed is retried, as redis-py does.
    """
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                if watches:
                    pipe.watch(*watches)
                func(pipe)
                return pipe.execute()
            except exceptions.WatchError as error:
                if isinstance(error.__context__, exceptions.ConnectionError):
                    raise error.__context__ from error


class _TransactionOrRaise:
    """The one method of a redis client that kombu's `QoS.restore_by_tag` calls, without the loop."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def transaction(self, func: Callable[[Pipeline], object], *watches: str) -> list[Any]:
        return transaction_or_raise(self.client, func, *watches)


# Delivery tags whose messages this process could not put back on their queue
# (the broker refused) when their channel closed: restored by the next channel
# that can. Their payloads stay in kombu's unacked hash meanwhile.
_restore_later: set[str] = set()
_restore_later_lock = threading.Lock()


class QoS(kombu_redis.QoS):
    """kombu's Redis QoS whose restores never block on a refusing broker, and catch up later.

    Refused tags are kept (process-wide) and restored by the next channel's
    first restore pass: when the consumer reconnects, then every
    `unacked_restore_interval` seconds until the broker takes them.
    """

    def restore_by_tag(
        self, tag: str, client: redis.Redis | None = None, leftmost: bool = False
    ) -> None:
        with self.channel.conn_or_acquire(client) as acquired:
            super().restore_by_tag(tag, client=_TransactionOrRaise(acquired), leftmost=leftmost)

    def restore_unacked(self, client: redis.Redis | None = None) -> None:
        try:
            super().restore_unacked(client)
        except self.channel.connection_errors as error:
            # Restoring a tag twice is harmless: the second finds no payload.
            with _restore_later_lock:
                _restore_later.update(self._delivered)
            logger.warning(
                "broker refused restoring %s unacknowledged message(s) (%s: %s);"
                " restoring them once it serves again",
                len(self._delivered),
                type(error).__name__,
                error,
            )
            self._delivered.clear()

    def restore_later_instead(self) -> None:
        """Leave this channel's unacknowledged deliveries to the next channel's restore pass.

        For a channel closed without the broker (its connection is lost):
        kombu's restore at close is skipped, with nothing lost.
        """
        self._flush()
        with _restore_later_lock:
            _restore_later.update(self._delivered)
        if self._delivered:
            logger.info(
                "%s unacknowledged message(s) to restore once the broker serves again",
                len(self._delivered),
            )
        self._delivered.clear()
        self._delivered.restored = True  # type: ignore[attr-defined]

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        self.restore_later()
        super().restore_visible(*args, **kwargs)

    def restore_later(self) -> int:
        """Restore the tags earlier channels could not; returns how many.

        Raises the channel's connection errors (the rest stay for the next
        pass); a tag that fails otherwise is logged and dropped, as kombu's
        own restore would have failed on it too.
        """
        with _restore_later_lock:
            tags = sorted(_restore_later)
        for tag in tags:
            try:
                self.restore_by_tag(tag)
            except self.channel.connection_errors:
                raise
            except Exception:
                logger.exception("could not restore unacknowledged message %s", tag)
            with _restore_later_lock:
                _restore_later.discard(tag)
        if tags:
            logger.info("restored %s unacknowledged message(s) the broker had refused", len(tags))
        return len(tags)
