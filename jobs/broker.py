"""Read-only views of the Redis broker: ready messages per queue, and the consuming ends.

Kombu's Redis transport stores a queue with priorities as several lists: the
queue's own name for priority 0 and `name + "\\x06\\x16" + step` for the other
priority steps (kombu.transport.redis.Channel._q_for_pri), all under the
transport's `global_keyprefix`. Counting only the plain list misses messages
(celery-exporter issue 272); this counts all of them in one round trip.

Each list is FIFO: a publish is an LPUSH, a consumer takes the right end
(BRPOP), so index -1 is the oldest message still waiting. Kombu puts a
message back in two ways (kombu.transport.redis): `reject(requeue=True)` (a
lost child) LPUSHes it behind everything, and a restore of unacknowledged
messages (a worker closing its channel, the visibility timeout) RPUSHes it
ahead of everything; both mark it `headers.redelivered`. `read_tails` reads
the consuming end of every sub-queue for jobs.services.lost_messages.
"""

from __future__ import annotations

import bisect
import functools
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from kombu.transport.redis import PRIORITY_STEPS

from jobs.broker_transport import redis_client

PRIORITY_SEP = "\x06\x16"
# Message header stamped by jobs.services.publishing.job_publish just before
# the publish: the database's time, ISO 8601 with offset.
PUBLISHED_AT_HEADER = "jobs_published_at"


@functools.cache
def _client(url: str) -> redis.Redis:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    # Failover and write-refusal replies drop the connection, as in the transport.
    return redis_client(
        url,
        socket_connect_timeout=options.get("socket_connect_timeout", 2),
        socket_timeout=options.get("socket_timeout", 5),
        # RESP2: these reads need nothing RESP3 offers, and redis-py 8's RESP3
        # handshake (HELLO plus push-notification handlers) was seen failing
        # with AttributeError under concurrent first use in gunicorn threads.
        protocol=2,
    )


# Monotonic time until which this process treats the broker as unreachable,
# and whether its last call failed (then one caller at a time probes it).
_unreachable: dict[str, Any] = {"until": 0.0, "failed": False}
_probe_lock = threading.Lock()


def mark_unreachable() -> None:
    """Remember, for JOBS_BROKER_BACKOFF_SECONDS, that the broker just failed a call.

    A frozen or partitioned Redis fails each call only after the socket
    timeout (5 s); without this, every request of the web would wait that
    long, twice (the queue count, then the publish), and the web's threads
    would all be waiting.
    """
    _unreachable["until"] = time.monotonic() + settings.JOBS_BROKER_BACKOFF_SECONDS
    _unreachable["failed"] = True


def recently_unreachable() -> bool:
    """Whether a caller that can do without the broker (the backpressure count, a
    publish the outbox sweep redoes) should skip it now.

    True for JOBS_BROKER_BACKOFF_SECONDS after a failed call. After that, one
    caller at a time gets False (it probes the broker; the others keep
    skipping for as long as a call can take); its success (mark_reachable)
    or failure (mark_unreachable) settles it.
    """
    now = time.monotonic()
    if now < _unreachable["until"]:
        return True
    if not _unreachable["failed"]:
        return False
    with _probe_lock:
        if now < _unreachable["until"]:
            return True
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        _unreachable["until"] = now + float(options.get("socket_timeout", 5)) + 1.0
        return False


def in_backoff() -> bool:
    """Whether the backoff after a failed call is still running (a pure read: no probe)."""
    return time.monotonic() < _unreachable["until"]


def mark_reachable() -> None:
    """Forget an earlier failure (a call just succeeded)."""
    if _unreachable["failed"]:
        _unreachable["until"] = 0.0
        _unreachable["failed"] = False


def broker_client() -> redis.Redis:
    """A Redis client for the broker URL (one connection pool per process).

    On a RabbitMQ broker, the client of REDIS_URL instead: the state kept in
    Redis until it moves to PostgreSQL (cancellation, worker reports, the
    outcome spool) never gets a Redis client built from an amqp:// URL.
    """
    if settings.JOBS_BROKER_KIND != "redis":
        return _client(settings.REDIS_URL)
    return _client(settings.CELERY_BROKER_URL)


def priority_steps() -> list[int]:
    """Kombu's priority steps for the broker (the sub-queues of each queue, 0 first)."""
    return list(settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", PRIORITY_STEPS))


def step_of(priority: int | None) -> int:
    """The priority step (sub-queue) kombu files a message of job `priority` under.

    None publishes no priority, which kombu treats as 0
    (Channel._get_message_priority); then Channel.priority's bisect.
    """
    steps = priority_steps()
    return steps[bisect.bisect(steps, priority or 0) - 1]


def queue_keys(queue: str) -> list[str]:
    """Every Redis list that holds ready messages of `queue`, in priority_steps order."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    return [
        f"{prefix}{queue}{PRIORITY_SEP}{step}" if step else f"{prefix}{queue}"
        for step in priority_steps()
    ]


def _read_lengths(queues: list[str], *, with_unacked: bool) -> tuple[dict[str, int], list[bytes]]:
    """Ready counts per queue (and, if asked, the unacked hash's values) in one pipeline."""
    pipe = broker_client().pipeline(transaction=False)
    key_lists = [queue_keys(q) for q in queues]
    for keys in key_lists:
        for key in keys:
            pipe.llen(key)
    if with_unacked:
        pipe.hvals(unacked_key())
    results = pipe.execute()
    ready: dict[str, int] = {}
    position = 0
    for queue, keys in zip(queues, key_lists, strict=True):
        ready[queue] = sum(results[position : position + len(keys)])
        position += len(keys)
    return ready, (results[-1] if with_unacked else [])


def ready_counts(queues: list[str]) -> dict[str, int]:
    """Ready (published, not yet reserved) messages per queue, in one pipeline.

    Raises redis.RedisError when the broker cannot be reached.
    """
    return _read_lengths(queues, with_unacked=False)[0]


def server_run_id() -> str:
    """The broker's run_id: a new value means Redis restarted (and, without
    persistence, lost every message). Raises redis.RedisError when unreachable."""
    return str(broker_client().info("server").get("run_id", ""))


def unacked_key() -> str:
    """The hash where kombu's Redis transport keeps delivered, unacknowledged messages."""
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    return options.get("global_keyprefix", "") + options.get("unacked_key", "unacked")


def depth_counts(queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(ready, reserved) messages per queue, read in one pipelined round trip.

    Ready: every priority sub-queue's list length. Reserved: entries of the
    unacked hash whose routing key is the queue (kombu stores each as
    [message, exchange, routing_key]). Raises redis.RedisError when the
    broker cannot be reached.
    """
    ready, unacked = _read_lengths(queues, with_unacked=True)
    reserved = dict.fromkeys(queues, 0)
    for raw in unacked:
        try:
            routing_key = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key in reserved:
            reserved[routing_key] += 1
    return ready, reserved


# --- the consuming ends, for the lost-message check -----------------------------------


@dataclass(frozen=True)
class MessageFacts:
    """What the lost-message check needs of one broker message.

    `job_id` is the part of the Celery task id before ":" ("<job id>:<attempt>",
    job_publish), "" when absent; `published_at` the PUBLISHED_AT_HEADER
    stamp, None when absent or unreadable; `redelivered` whether kombu put
    it back (restored or requeued) after a consumer had taken it.
    """

    job_id: str
    published_at: datetime | None
    redelivered: bool


def message_facts(message: Any) -> MessageFacts:
    """Facts of a decoded kombu message dict; tolerates any shape (a foreign message)."""
    headers = message.get("headers") if isinstance(message, dict) else None
    headers = headers if isinstance(headers, dict) else {}
    properties = message.get("properties") if isinstance(message, dict) else None
    delivery = properties.get("delivery_info") if isinstance(properties, dict) else None
    task_id = headers.get("id") or (properties or {}).get("correlation_id") or ""
    stamp = headers.get(PUBLISHED_AT_HEADER)
    published_at = None
    if isinstance(stamp, str):
        try:
            published_at = datetime.fromisoformat(stamp)
        except ValueError:
            published_at = None
        if published_at is not None and published_at.tzinfo is None:
            published_at = None  # a naive stamp cannot be compared: not ours
    redelivered = bool(headers.get("redelivered")) or bool(
        isinstance(delivery, dict) and delivery.get("redelivered")
    )
    return MessageFacts(
        job_id=str(task_id).partition(":")[0], published_at=published_at, redelivered=redelivered
    )


def _decode(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True)
class Tail:
    """The consuming end of one priority sub-queue, as read at one instant.

    `messages` are the facts of the up to `window` messages nearest the
    consuming end, the next one to be consumed LAST; `empty` says the list
    held nothing.
    """

    queue: str
    step: int
    messages: tuple[MessageFacts, ...]

    @property
    def empty(self) -> bool:
        return not self.messages

    def boundary(self) -> datetime | None:
        """Publish stamp of the message nearest the consuming end that kombu never put back.

        Every message published before it was consumed already (FIFO), so a
        job published before it is either in a consumer's hands or lost.
        Messages put back are skipped: a restore puts an old message ahead of
        newer ones. None when no such message is among those read (no
        verdict for this sub-queue now).
        """
        for facts in reversed(self.messages):
            if not facts.redelivered and facts.published_at is not None:
                return facts.published_at
        return None

    def job_ids(self) -> set[str]:
        """Jobs with a message among those read (still in the broker)."""
        return {facts.job_id for facts in self.messages if facts.job_id}


@dataclass(frozen=True)
class Snapshot:
    """Every sub-queue's consuming end and the jobs of every unacknowledged message."""

    tails: tuple[Tail, ...]
    unacked: tuple[MessageFacts, ...]

    def unacked_job_ids(self) -> set[str]:
        return {facts.job_id for facts in self.unacked if facts.job_id}


def read_tails(queues: list[str], *, window: int) -> Snapshot:
    """The last `window` messages of every priority sub-queue of `queues`, and the unacked hash.

    One pipelined round trip: LRANGE key -window -1 per sub-queue (O(window)
    each, whatever the list's length) and HVALS of the unacked hash (bounded
    by prefetch x worker processes). Raises redis.RedisError when the broker
    cannot be reached.
    """
    pipe = broker_client().pipeline(transaction=False)
    plan: list[tuple[str, int]] = []
    for queue in queues:
        for step, key in zip(priority_steps(), queue_keys(queue), strict=True):
            pipe.lrange(key, -window, -1)
            plan.append((queue, step))
    pipe.hvals(unacked_key())
    results = pipe.execute()
    tails = tuple(
        Tail(queue=queue, step=step, messages=tuple(message_facts(_decode(r)) for r in raws))
        for (queue, step), raws in zip(plan, results[:-1], strict=True)
    )
    unacked = []
    for raw in results[-1]:
        entry = _decode(raw)  # kombu stores [message, exchange, routing_key]
        if isinstance(entry, list) and entry:
            unacked.append(message_facts(entry[0]))
    return Snapshot(tails=tails, unacked=tuple(unacked))
