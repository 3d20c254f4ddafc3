"""The Redis adapter of the broker port: kombu's Redis transport, read with our own client.

Everything is jobs.broker's (one pipelined round trip per reading); this
class only gives it the port's shape. Redis keeps no delivery limit (the
platform's poison rule is the only one), so there are no dead letters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs import broker
from jobs.brokers.port import DeadLetter

if TYPE_CHECKING:
    from jobs.broker import Snapshot


class RedisBroker:
    """jobs.brokers.port.Broker over kombu's Redis transport."""

    name = "redis"
    can_peek = True
    knows_reserved = True

    def ready_counts(self, queues: list[str]) -> dict[str, int]:
        return broker.ready_counts(queues)

    def depth_counts(self, queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        return broker.depth_counts(queues)

    def server_run_id(self) -> str:
        return broker.server_run_id()

    def read_tails(self, queues: list[str], *, window: int) -> Snapshot:
        return broker.read_tails(queues, window=window)

    def declare(self, queues: list[str]) -> None:
        """Nothing to declare: kombu's Redis lists exist once something is pushed."""

    def dead_letters(self, *, limit: int) -> list[DeadLetter]:
        return []
