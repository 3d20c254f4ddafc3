"""Read-only views of the Redis broker: ready messages per queue.

Kombu's Redis transport stores a queue with priorities as several lists: the
queue's own name for priority 0 and `name + "\\x06\\x16" + step` for the other
priority steps (kombu.transport.redis.Channel._q_for_pri), all under the
transport's `global_keyprefix`. Counting only the plain list misses messages
(celery-exporter issue 272); this counts all of them in one round trip.
"""

from __future__ import annotations

import functools
import json

import redis
from django.conf import settings
from kombu.transport.redis import PRIORITY_STEPS

PRIORITY_SEP = "\x06\x16"


@functools.cache
def _client(url: str) -> redis.Redis:
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=options.get("socket_connect_timeout", 2),
        socket_timeout=options.get("socket_timeout", 5),
        # RESP2: these reads need nothing RESP3 offers, and redis-py 8's RESP3
        # handshake (HELLO plus push-notification handlers) was seen failing
        # with AttributeError under concurrent first use in gunicorn threads.
        protocol=2,
    )


def broker_client() -> redis.Redis:
    """A Redis client for the broker URL (one connection pool per process)."""
    return _client(settings.CELERY_BROKER_URL)


def queue_keys(queue: str) -> list[str]:
    """Every Redis list that holds ready messages of `queue`."""
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    steps = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("priority_steps", PRIORITY_STEPS)
    return [
        f"{prefix}{queue}{PRIORITY_SEP}{step}" if step else f"{prefix}{queue}" for step in steps
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
