"""The RabbitMQ adapter of the broker port: quorum queues, read without consuming.

Depth is a passive `queue.declare` per queue (its `message_count` is the
ready messages; AMQP says nothing of unacknowledged ones, and the
management API is not always there, so `knows_reserved` is False and the
caller counts running jobs instead). Quorum queues are durable and
replicated and every Celery message is persistent, so a restart loses no
message: `server_run_id` is "" (no restart-republish). Nothing can be peeked
either: the vanished-message rule counts (jobs.services.lost_messages).
Messages dropped past `x-delivery-limit` reach the dead-letter queue,
which `dead_letters` drains. docs/brokers.md has the whole picture.

One AMQP connection per process, opened on first use (after any fork),
with read and write timeouts: a silent broker fails a reading within
`timeout` seconds instead of hanging a request.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

import kombu
from amqp import exceptions as amqp_exceptions

from jobs.brokers.port import DeadLetter, job_of

if TYPE_CHECKING:
    from jobs.broker import Snapshot

logger = logging.getLogger(__name__)


class RabbitMQBroker:
    """jobs.brokers.port.Broker over RabbitMQ (kombu's py-amqp transport).

    `queues` are the kombu Queues of the job queues as Celery declares them
    (quorum, delivery limit, dead-letter exchange: settings.CELERY_TASK_QUEUES);
    `dead_letter_exchange` / `dead_letter_queue` name the objects their drops go to.
    """

    name = "rabbitmq"
    can_peek = False
    knows_reserved = False

    def __init__(
        self,
        url: str,
        *,
        queues: list[kombu.Queue],
        dead_letter_exchange: str,
        dead_letter_queue: str,
        timeout: float = 2.0,
    ) -> None:
        self.url = url
        self.queues = {queue.name: queue for queue in queues}
        self.dead_letter_exchange = kombu.Exchange(
            dead_letter_exchange, type="fanout", durable=True
        )
        self.dead_letter_queue = kombu.Queue(
            dead_letter_queue,
            exchange=self.dead_letter_exchange,
            routing_key="",
            queue_arguments={"x-queue-type": "quorum"},
        )
        self.timeout = timeout
        self._lock = threading.Lock()
        self._connection: kombu.Connection | None = None
        self._channel: Any = None
        self._pid = os.getpid()

    # -- the connection ----------------------------------------------------------------
    def _open_channel(self) -> Any:
        if self._pid != os.getpid():  # forked: the parent's socket is not ours to use
            self._connection, self._channel, self._pid = None, None, os.getpid()
        if self._channel is None:
            self._connection = kombu.Connection(
                self.url,
                connect_timeout=self.timeout,
                transport_options={"read_timeout": self.timeout, "write_timeout": self.timeout},
            )
            self._channel = self._connection.channel()
        return self._channel

    def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                connection.release()
            except Exception:  # noqa: S110 — the connection is broken already
                pass

    def _call(self, action: Any) -> Any:
        """Run `action(channel)` under the lock; any error drops the connection and is re-raised."""
        with self._lock:
            try:
                return action(self._open_channel())
            except Exception:
                self._drop()
                raise

    def close(self) -> None:
        """Close this process's connection (the next call opens another)."""
        with self._lock:
            self._drop()

    # -- the port ----------------------------------------------------------------------
    def ready_counts(self, queues: list[str]) -> dict[str, int]:
        """Ready messages per queue by passive declare; a queue not declared yet holds 0."""

        def read(channel: Any) -> dict[str, int]:
            counts: dict[str, int] = {}
            for name in queues:
                try:
                    counts[name] = channel.queue_declare(queue=name, passive=True).message_count
                except amqp_exceptions.NotFound:
                    # The broker closed the channel (404): nothing published there yet.
                    counts[name] = 0
                    self._channel = self._connection.channel()  # type: ignore[union-attr]
                    channel = self._channel
            return counts

        return self._call(read)

    def depth_counts(self, queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        return self.ready_counts(queues), dict.fromkeys(queues, 0)

    def server_run_id(self) -> str:
        return ""

    def read_tails(self, queues: list[str], *, window: int) -> Snapshot:
        raise NotImplementedError("RabbitMQ queues cannot be read without consuming them")

    def declare(self, queues: list[str]) -> None:
        """Declare the job queues (as Celery does) and the dead-letter exchange and queue."""

        def declare(channel: Any) -> None:
            self.dead_letter_queue(channel).declare()
            for name in queues:
                queue = self.queues.get(name)
                if queue is not None:
                    queue(channel).declare()

        self._call(declare)

    def dead_letters(self, *, limit: int) -> list[DeadLetter]:
        """Take (and acknowledge) up to `limit` messages from the dead-letter queue."""

        def take(channel: Any) -> list[DeadLetter]:
            taken: list[DeadLetter] = []
            while len(taken) < limit:
                message = channel.basic_get(queue=self.dead_letter_queue.name, no_ack=False)
                if message is None:
                    break
                headers = message.properties.get("application_headers") or {}
                job_id, attempt = job_of(
                    headers.get("id") or message.properties.get("correlation_id")
                )
                channel.basic_ack(message.delivery_tag)
                taken.append(DeadLetter(job_id=job_id, attempt=attempt))
            return taken

        try:
            return self._call(take)
        except amqp_exceptions.NotFound:
            return []  # not declared yet: nothing was dropped
