"""The broker port: what the platform asks of a broker beyond Celery's publish and consume.

Celery publishes and consumes; the platform also needs depth per queue (for
backpressure and the queue-depth metric), restart detection, vanished-
message detection and the declaration of its own queues. `Broker` is that
interface; jobs.brokers.redis and jobs.brokers.rabbitmq are its adapters,
picked once per process from the broker URL (jobs.brokers.broker_for).
docs/brokers.md compares them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jobs.broker import Snapshot


@dataclass(frozen=True)
class DeadLetter:
    """A message the broker dropped past its delivery limit.

    `job_id` is "" when the message is not one of ours (no "<job id>:<attempt>"
    task id); `attempt` is 0 then.
    """

    job_id: str
    attempt: int


class Broker(Protocol):
    """One broker as the platform sees it. Every method raises the broker
    client's own errors when the broker cannot be reached (callers catch
    Exception: kombu, redis-py and py-amqp raise many types for one outage).
    """

    #: "redis" or "rabbitmq" (settings.JOBS_BROKER_KIND).
    name: str
    #: Whether `read_tails` works (the Redis lists can be read without consuming
    #: them); without it the vanished-message rule counts instead (docs/brokers.md).
    can_peek: bool
    #: Whether `depth_counts`'s reserved part comes from the broker; False: the
    #: caller derives it from the database's running jobs.
    knows_reserved: bool

    def ready_counts(self, queues: list[str]) -> dict[str, int]:
        """Ready (published, not yet delivered) messages per queue, read without consuming."""
        ...

    def depth_counts(self, queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
        """(ready, reserved) per queue; reserved is all 0 when not `knows_reserved`."""
        ...

    def server_run_id(self) -> str:
        """An id that changes when the broker restarted and lost its messages; "" if it cannot
        lose them that way (or cannot tell): no restart is ever reported then."""
        ...

    def read_tails(self, queues: list[str], *, window: int) -> Snapshot:
        """The consuming end of each queue (only when `can_peek`; else NotImplementedError)."""
        ...

    def declare(self, queues: list[str]) -> None:
        """Declare the platform's own broker objects (idempotent)."""
        ...

    def dead_letters(self, *, limit: int) -> list[DeadLetter]:
        """Take up to `limit` messages the broker dropped past its delivery limit.

        Each is acknowledged once returned: the caller records it before the
        next call (a crash in between loses the record, not the job: the job
        is still queued or running, and the vanished-message rule or the
        lease sweep handles it). [] on a broker without a delivery limit.
        """
        ...


def job_of(task_id: object) -> tuple[str, int]:
    """(job id, attempt) of a Celery task id "<job id>:<attempt>"; ("", 0) for a foreign one."""
    job_id, _, attempt = str(task_id or "").partition(":")
    try:
        uuid.UUID(job_id)
        return job_id, int(attempt)
    except ValueError:
        return "", 0
