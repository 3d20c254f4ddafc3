"""Celery's app classes with bounded waits on a silent broker: the worker notices a stall and comes back.

Two waits of Celery's own had no bound, measured through a proxy that
silently dropped the broker's traffic for 30 s (tests/integration/
test_faults_broker_stall.py; the reasoning and figures: docs/broker-liveness.md):

- The worker's heartbeat (celery.worker.heartbeat.Heart, every 2 s) sends
  with `retry=True` and no policy, which kombu's Connection.ensure retries
  without end. The worker's event loop sat in that loop for the whole
  stall, so nothing else of its main process ran (kombu's health checks of
  the consuming connection and of the remote-control subscription, the
  results of finished attempts): the connection was dropped 35 s after the
  stall began. `EventDispatcher` gives such a send a bounded policy: no
  retry on Redis (kombu's Redis channel reconnects by itself on its next
  command, so a retry only waits), one reconnection elsewhere (AMQP: a
  connection the broker closed is reopened, celery/celery#4804). An event
  that could not be sent stays in Celery's offline buffer and goes out
  after the next success.
- The worker's consumer reconnects with kombu's ensure_connection back-off
  (2 s, 4 s, ... up to 30 s apart): after a long outage the broker could be
  back for 30 s before the next try. `Connection` takes the interval_start,
  interval_step and interval_max of broker_transport_options (kombu's own
  names, which kombu applies only to a publisher's first connection) for
  every ensure_connection that does not give them.

config.celery_app installs both (`Celery(events=..., amqp=...)`).
"""

from __future__ import annotations

from typing import Any

import kombu
from celery.app.amqp import AMQP as CeleryAMQP
from celery.app.events import Events as CeleryEvents
from celery.events.dispatcher import EventDispatcher as CeleryEventDispatcher

# kombu Connection.ensure arguments for a send that asked to retry without a policy.
RETRY_ON_REDIS: dict[str, Any] = {"max_retries": 0}
RETRY_ELSEWHERE: dict[str, Any] = {"max_retries": 1}
# broker_transport_options keys kombu's ensure_connection takes as keywords.
RECONNECT_OPTIONS = ("interval_start", "interval_step", "interval_max")


class EventDispatcher(CeleryEventDispatcher):
    """Celery's EventDispatcher; `send(retry=True)` without a policy retries a bounded number of times."""

    def send(self, type: str, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 — Celery's name
        if kwargs.get("retry") and kwargs.get("retry_policy") is None:
            kwargs["retry_policy"] = self.bounded_retry_policy()
        return super().send(type, *args, **kwargs)

    def bounded_retry_policy(self) -> dict[str, Any]:
        """The retry policy of a send that asked for retries without saying how many."""
        driver = getattr(getattr(self.connection, "transport", None), "driver_type", "")
        return dict(RETRY_ON_REDIS if driver == "redis" else RETRY_ELSEWHERE)


class Events(CeleryEvents):
    """Celery's app.events, dispatching with EventDispatcher."""

    dispatcher_cls = "jobs.broker_liveness:EventDispatcher"


class Connection(kombu.Connection):
    """kombu's Connection; ensure_connection's back-off comes from the transport options."""

    def ensure_connection(self, *args: Any, **kwargs: Any) -> Connection:
        # Celery's consumer passes (errback, max_retries) positionally: the
        # intervals are the 3rd to 5th arguments.
        given = RECONNECT_OPTIONS[: max(0, len(args) - 2)]
        options = self.transport_options or {}
        for name in RECONNECT_OPTIONS:
            if name not in given and name not in kwargs and name in options:
                kwargs[name] = options[name]
        return super().ensure_connection(*args, **kwargs)


class AMQP(CeleryAMQP):
    """Celery's app.amqp, connecting with Connection."""

    Connection = Connection
    BrokerConnection = Connection
