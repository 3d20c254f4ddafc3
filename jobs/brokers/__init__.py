"""The broker port and its adapters (jobs.brokers.port); the adapter is picked from the URL.

`broker_for(url)` builds the adapter of a URL; `current()` is this
process's, built once from settings.CELERY_BROKER_URL on first use. Callers
that hold a broker take it as an argument (tests pass a fake).
"""

from __future__ import annotations

import functools

from django.conf import settings

from jobs.brokers.port import Broker, DeadLetter, job_of
from jobs.brokers.rabbitmq import RabbitMQBroker
from jobs.brokers.redis import RedisBroker

__all__ = [
    "Broker",
    "DeadLetter",
    "RabbitMQBroker",
    "RedisBroker",
    "broker_for",
    "current",
    "job_of",
]


class UnsupportedBrokerError(ValueError):
    """The broker URL's scheme has no adapter (refused at start: jobs.E020)."""


def kind_of(url: str) -> str:
    """ "redis", "rabbitmq" or "unsupported", from the URL's scheme."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in {"redis", "rediss"}:
        return "redis"
    if scheme in {"amqp", "amqps", "pyamqp"}:
        return "rabbitmq"
    return "unsupported"


def broker_for(url: str) -> Broker:
    """The adapter for `url`; raises UnsupportedBrokerError for any other scheme."""
    kind = kind_of(url)
    if kind == "redis":
        return RedisBroker()
    if kind == "rabbitmq":
        return RabbitMQBroker(
            url,
            queues=list(settings.CELERY_TASK_QUEUES),
            dead_letter_exchange=settings.JOBS_RABBITMQ_DEAD_LETTER_EXCHANGE,
            dead_letter_queue=settings.JOBS_RABBITMQ_DEAD_LETTER_QUEUE,
            timeout=settings.JOBS_BROKER_SOCKET_TIMEOUT,
        )
    raise UnsupportedBrokerError(f"no broker adapter for URL scheme {url.split('://', 1)[0]!r}")


@functools.cache
def _current(url: str) -> Broker:
    return broker_for(url)


def current() -> Broker:
    """This process's broker adapter (settings.CELERY_BROKER_URL), built once."""
    return _current(settings.CELERY_BROKER_URL)
