"""jobs.broker_liveness: Celery's own waits on a silent broker are bounded.

Issue 19, item 3. The worker's heartbeat retried its send for as long as
the broker was away (its event loop blocked meanwhile), and the consumer
reconnected up to 30 s apart. These tests pin the classes the Celery app
uses and what each bounds; the scheduler's worker monitor (a consumer
without an event loop) is shown dropping a silent subscription within the
health-check bound, well before its own 15 s silence timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
from celery import Celery
from django.conf import settings

from config.celery_app import app
from devstack.services import RedisServer, wait_for
from devstack.stall_proxy import StallProxy
from jobs import broker_liveness
from observability.worker_monitor import WorkerMonitor


@pytest.fixture
def proxy(private_broker: RedisServer) -> Iterator[StallProxy]:
    stall_proxy = StallProxy(private_broker.port).start()
    try:
        yield stall_proxy
    finally:
        stall_proxy.close()


def test_broker_liveness_is_what_the_celery_app_uses() -> None:
    assert issubclass(app.amqp.Connection, broker_liveness.Connection)
    assert isinstance(app.connection_for_read(), broker_liveness.Connection)
    assert issubclass(app.events.Dispatcher, broker_liveness.EventDispatcher)
    # and a lost connection does not end running attempts (their outcome is in the database)
    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is False
    assert app.conf.broker_heartbeat == settings.CELERY_BROKER_HEARTBEAT == 4


def test_broker_liveness_heartbeat_to_a_silent_broker_gives_up_and_is_buffered(
    proxy: StallProxy,
) -> None:
    # given the worker heartbeat's dispatcher, connected through the proxy
    through_proxy = Celery("liveness-heartbeat", broker=proxy.url, set_as_current=False)
    through_proxy.conf.broker_transport_options = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    through_proxy.events_cls = "jobs.broker_liveness:Events"
    assert issubclass(through_proxy.events.Dispatcher, broker_liveness.EventDispatcher)
    dispatcher: Any = through_proxy.events.Dispatcher(
        through_proxy.connection_for_write(), hostname="w@h"
    )
    dispatcher.send("worker-heartbeat", retry=True)
    assert not dispatcher._outbound_buffer
    done = threading.Event()

    def send() -> None:
        dispatcher.send("worker-heartbeat", retry=True)
        done.set()

    # when the broker goes silent and the heartbeat is sent (retry=True, no policy)
    proxy.stall()
    started = time.monotonic()
    threading.Thread(target=send, daemon=True).start()

    # then the send gives up after one try (Celery's own dispatcher reconnected
    # and retried for as long as the broker stayed silent)
    assert done.wait(4 * settings.JOBS_BROKER_SOCKET_TIMEOUT), "the heartbeat is still retrying"
    print(f"heartbeat to a silent broker gave up after {time.monotonic() - started:.1f} s")
    # and the event waits in Celery's offline buffer for the next successful send
    assert len(dispatcher._outbound_buffer) == 1
    through_proxy.close()


def test_broker_liveness_retry_policy_is_none_on_redis_and_one_reconnection_elsewhere() -> None:
    redis_dispatcher = app.events.Dispatcher(app.connection_for_write(), enabled=False)
    assert redis_dispatcher.bounded_retry_policy() == {"max_retries": 0}
    memory_dispatcher = app.events.Dispatcher(kombu.Connection("memory://"), enabled=False)
    assert memory_dispatcher.bounded_retry_policy() == {"max_retries": 1}


def test_broker_liveness_send_keeps_a_policy_given_by_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(
        broker_liveness.CeleryEventDispatcher,
        "send",
        lambda self, type, *args, **kwargs: seen.append(kwargs),
    )
    dispatcher = app.events.Dispatcher(app.connection_for_write(), enabled=False)
    dispatcher.send("worker-heartbeat", retry=True, retry_policy={"max_retries": 5})
    dispatcher.send("worker-heartbeat", retry=True)
    dispatcher.send("task-succeeded")
    assert [kwargs.get("retry_policy") for kwargs in seen] == [
        {"max_retries": 5},
        {"max_retries": 0},
        None,
    ]


def test_broker_liveness_ensure_connection_takes_its_back_off_from_the_transport_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(
        kombu.Connection, "ensure_connection", lambda self, *a, **kw: calls.append((a, kw))
    )
    options = {"interval_start": 1, "interval_step": 1, "interval_max": 3}
    connection = broker_liveness.Connection("memory://", transport_options=options)

    # as Celery's consumer calls it: (errback, max_retries), intervals left to kombu's 2/2/30
    connection.ensure_connection(print, None, callback=print)
    # with intervals of its own
    connection.ensure_connection(print, None, 5, interval_max=9)

    assert calls[0] == ((print, None), {"callback": print, **options})
    assert calls[1] == ((print, None, 5), {"interval_max": 9, "interval_step": 1})


def test_broker_liveness_worker_monitor_drops_a_silent_subscription_within_the_bound(
    private_broker: RedisServer, proxy: StallProxy
) -> None:
    # given the scheduler's worker monitor through the proxy, with the platform's
    # broker options and its default 30 s offline threshold (15 s of silence
    # before it reconnects on its own)
    through_proxy = Celery("liveness-monitor", broker=proxy.url, set_as_current=False)
    through_proxy.conf.broker_transport_options = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    monitor = WorkerMonitor(through_proxy, offline_after=30, reconnect_max=0.2).start()
    try:
        wait_for(
            lambda: monitor.connected and any(link.subscribed for link in proxy.links),
            timeout=10,
            what="the monitor subscribed",
        )
        # when the broker goes silent
        stalled_at = proxy.stall()
        subscription = next(link for link in proxy.links if link.subscribed)

        # then kombu's subscription check (run from heartbeat_check) drops it
        wait_for(lambda: subscription.closed_at is not None, timeout=20, what="dropped")
        took = (subscription.closed_at or 0) - stalled_at
        print(f"worker monitor gave up its silent subscription after {took:.1f} s")
        bound = (
            4 * settings.JOBS_BROKER_HEALTH_CHECK_INTERVAL + 2 * settings.JOBS_BROKER_SOCKET_TIMEOUT
        )
        assert took <= bound < monitor.silence_after, (took, bound)
        assert subscription.closed_by == "client"
    finally:
        monitor.stop()
        through_proxy.close()
