"""Stock Celery, no Django: the baselines of `python -m bench` (bench/ only, never in jobs/).

    celery -A bench.stock_app worker -b redis://... -Q stock --loglevel INFO --concurrency 2
    (tracked: add -E --prefetch-multiplier 1 and publish the *_tracked tasks)

"Tracked" is what Flower and celery-exporter need and what the platform
does: acks_late, prefetch 1, task events on (worker `-E`, and the
publisher's task_send_sent_event). "Defaults" is Celery as installed.
The broker comes from the command line (`-b`), so this module reads no
environment variable.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from celery import Celery

app = Celery("stock")
app.conf.task_default_queue = "stock"
app.conf.task_serializer = "json"
app.conf.accept_content = ["json"]
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True


@app.task(name="stock.noop")
def noop() -> None:
    """Does nothing, acknowledged before it runs (Celery's default)."""


@app.task(name="stock.noop_tracked", acks_late=True)
def noop_tracked() -> None:
    """Does nothing, acknowledged after it runs (as the platform's attempts)."""


@app.task(
    name="stock.fail_tracked",
    acks_late=True,
    autoretry_for=(RuntimeError,),
    retry_kwargs={"max_retries": 2, "countdown": 0},
)
def fail_tracked() -> None:
    """Fails every attempt; `autoretry_for` retries at once: 3 attempts, then the task fails."""
    raise RuntimeError("planned failure")


@app.task(name="stock.stamp", acks_late=True)
def stamp(sent: float, key: str) -> None:
    """Pushes seconds since `sent` (time.time() of the publisher) to Redis list `key`."""

    client = redis.Redis.from_url(app.conf.broker_url)
    client.rpush(key, time.time() - sent)
    client.close()


_publisher = {"broker_url": ""}


def configure(broker_url: str, *, tracked: bool) -> Celery:
    """The app as a publisher on `broker_url` (task-sent events when `tracked`)."""
    app.close()
    app.conf.update(broker_url=broker_url, task_send_sent_event=tracked)
    _publisher["broker_url"] = broker_url
    return app


def publish(name: str, count: int, *, queue: str = "stock", **options: Any) -> None:
    """Publish `count` messages of task `name` to `queue` on the broker `configure` set, over one connection.

    The connection is made here: Celery's producer pool keeps publishing to
    the first broker it connected to, even after app.close() and a new
    broker_url (P3 and memory, run after P1 in one `make bench`, published
    into P1's Redis database and waited for a worker that got nothing).
    """
    with app.connection_for_write(_publisher["broker_url"] or None) as connection:
        producer = app.amqp.Producer(connection)
        for _ in range(count):
            app.send_task(name, producer=producer, queue=queue, **options)
