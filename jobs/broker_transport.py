"""The broker transport: kombu's Redis transport, where "this server cannot serve you now" is a lost connection.

Redis answers with an error reply, not a closed socket, when it is up but
cannot serve a client right now: `-UNBLOCKED` to a blocked BRPOP when the
server turns into a replica (failover), `-READONLY` to a write on a replica
(the old primary, until DNS or Sentinel moves clients on), `-MISCONF` to a
write (and PING) after a failed background save, `-LOADING` while it loads
its dataset after a restart, `-MASTERDOWN` from a replica that lost its
primary, and the like. redis-py raises these as ResponseError, which kombu
classes as a channel error; Celery's consumer only recovers from connection
errors, so its main process logged "Unrecoverable error" and exited for
good (celery/celery#7951 made *every* channel error recoverable, opt-in via
`broker_channel_error_retry`; that also loops on programming errors such as
WRONGTYPE, which must stay loud).

The whole kind is handled in one place, the redis-py connection: a reply
whose error code is in UNAVAILABLE_REPLY_CODES drops the connection (a
reconnect may reach the new primary behind the same name) and raises
BrokerUnavailableError, a redis ConnectionError. That is what redis-py does
itself for `-LOADING` (BusyLoadingError) and, for READONLY, in its Sentinel
connection (redis.sentinel.SentinelManagedConnection.read_response); the
Ruby client made the same call for READONLY (redis-rb/redis-client#65).
Every kombu path then treats it as a lost connection: the worker's consumer
(BRPOP), its acknowledgements and restores, publishes from the web and the
scheduler (which fall back to the outbox), and the event receiver.

Two more effects of a server that is up but refuses writes are handled
here: a channel is not established on a replica (Channel._require_primary),
and unacknowledged messages it refuses to take back are restored later
instead of blocking the worker (jobs/broker_restore.py).

A broker that goes silent (no reply, no error) is the other kind handled
here (docs/broker-liveness.md): the subscriptions of consumers without an
event loop are health-checked (Transport.heartbeat_check), a lost
connection's channels close their sockets at once (Transport._collect), and
an acknowledgement on such a channel is a lost connection, not a crash.

`install()` (called by config/celery_app.py) makes `Transport` kombu's
transport for `redis://` and `rediss://` URLs in every process that loads
the Celery app; `redis_client()` gives our own broker reads and writes the
same behaviour and the liveness options of settings.REDIS_LIVENESS_OPTIONS.

tests/unit/test_broker_transport.py, test_broker_transport_liveness.py and
test_broker_restore.py fail if a kombu or redis-py upgrade moves the hooks
this relies on (kombu's `TRANSPORT_ALIASES`, `Channel._connparams`,
`QoS.restore_by_tag`, `Transport._collect` and `heartbeat_check`,
`MultiChannelPoller.maybe_check_subclient_health`; redis-py's
`Connection.read_response`, the WatchError raised for a lost connection).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kombu.transport
import redis
from django.conf import settings
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis import exceptions

from jobs.broker_restore import QoS

logger = logging.getLogger(__name__)

# Error codes (the reply's first word) that say the server cannot serve this
# client now, whatever the command: retry on a fresh connection. Kept out:
# OOM (reads, pops and acknowledgements still work on a full noeviction
# server, so consuming drains it; kombu logs and continues where it matters),
# NOPERM/NOAUTH-style configuration errors (AuthenticationError is already a
# connection error), and every programming error (WRONGTYPE, ERR ...).
UNAVAILABLE_REPLY_CODES = frozenset(
    {
        "UNBLOCKED",  # a blocked command ended: role change (or CLIENT UNBLOCK ... ERROR)
        "READONLY",  # a write to a replica: the primary moved
        "MISCONF",  # writes refused after a failed RDB save or AOF write
        "LOADING",  # loading the dataset (redis-py: BusyLoadingError, already a ConnectionError)
        "MASTERDOWN",  # a replica without its primary (replica-serve-stale-data no)
        "NOREPLICAS",  # fewer good replicas than min-replicas-to-write
        "BUSY",  # a script or function is running past busy-reply-threshold
        "TRYAGAIN",  # cluster resharding (managed proxies pass it on)
        "CLUSTERDOWN",  # cluster without full slot coverage
    }
)

# redis-py strips the code from the message of the replies it maps to a class
# (only recent versions keep it as `status_code`); these classes give it back.
# MasterDownError subclasses ClusterDownError, so it comes first.
_CLASS_CODES: tuple[tuple[type[exceptions.RedisError], str], ...] = (
    (exceptions.ReadOnlyError, "READONLY"),
    (exceptions.BusyLoadingError, "LOADING"),
    (exceptions.MasterDownError, "MASTERDOWN"),
    (exceptions.ClusterDownError, "CLUSTERDOWN"),
    (exceptions.TryAgainError, "TRYAGAIN"),
)


class BrokerUnavailableError(exceptions.ConnectionError):
    """The broker is up but cannot serve this client now (see UNAVAILABLE_REPLY_CODES).

    A redis ConnectionError, so kombu, Celery and redis-py treat it as a lost
    connection: reconnect and retry, never crash. Its message is the server's
    reply, code first ("READONLY You can't write ..."); `__cause__` is the
    ResponseError redis-py raised for it.
    """


class ChannelClosedError(exceptions.ConnectionError):
    """An acknowledgement on a channel whose connection was lost and closed meanwhile.

    A redis ConnectionError, so Celery logs "Couldn't ack" and goes on (as
    for an AMQP channel that closed) instead of stopping the worker on the
    AttributeError kombu raised; the message is put back on its queue by the
    restore of the lost channel's deliveries, and its second delivery is
    dropped unrun by the job's lease.
    """


def reply_code(error: BaseException) -> str:
    """The Redis error code of a reply error ("READONLY", "WRONGTYPE", ...); "" if none."""
    code = getattr(error, "status_code", None)
    if code:
        return str(code)
    for error_class, class_code in _CLASS_CODES:
        if isinstance(error, error_class):
            return class_code
    text = str(error.args[0]) if error.args else ""
    first = text.split(" ", 1)[0]
    return first if first.isupper() else ""


def is_unavailable_reply(error: BaseException) -> bool:
    """Whether `error` is a reply meaning "this server cannot serve you now" (not a bug of ours)."""
    return isinstance(error, exceptions.RedisError) and reply_code(error) in UNAVAILABLE_REPLY_CODES


def _reply_text(error: BaseException) -> str:
    """The reply as the server sent it, code first (redis-py drops the code of mapped replies)."""
    code, text = reply_code(error), str(error)
    return text if text.startswith(code) else f"{code} {text}"


class UnavailableIsDisconnect:
    """Mixin for a redis-py Connection class: an "unavailable" reply is a lost connection.

    `read_response` drops the socket and raises BrokerUnavailableError for
    such a reply; every other reply, error or not, passes unchanged.
    """

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)  # type: ignore[misc]
        except exceptions.ResponseError as error:
            if not is_unavailable_reply(error):
                raise
            # The next command reconnects: to the new primary, if the name moved.
            self.disconnect()  # type: ignore[attr-defined]
            raise BrokerUnavailableError(_reply_text(error)) from error


def unavailable_is_disconnect(connection_class: type) -> type:
    """`connection_class` (a redis-py Connection class) with UnavailableIsDisconnect mixed in."""
    if issubclass(connection_class, UnavailableIsDisconnect):
        return connection_class
    return type(connection_class.__name__, (UnavailableIsDisconnect, connection_class), {})


class Channel(kombu_redis.Channel):
    """kombu's Redis channel: UnavailableIsDisconnect connections, and restores that never block.

    Its QoS (jobs.broker_restore) puts back unacknowledged messages the broker
    refused to take back when the connection was lost, once it serves again.
    """

    QoS = QoS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # kombu pings the server here
        try:
            self._require_primary()
        except Exception:
            # Undo what kombu's __init__ set up, as it does when its ping fails.
            self.connection.cycle.discard(self)
            self._disconnect_pools()
            raise

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        self._require_open("acknowledge")
        super().basic_ack(delivery_tag, multiple=multiple)

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        self._require_open("reject")
        super().basic_reject(delivery_tag, requeue=requeue)

    def _require_open(self, what: str) -> None:
        # kombu would build a client from the closed channel's connection (None).
        if self.connection is None:
            raise ChannelClosedError(f"cannot {what}: the channel closed with its lost connection")

    def close_at_once(self) -> None:
        """Close without a word to the broker: its connection is lost already (Transport._collect).

        The sockets (the consuming BRPOP, the subscription, the pools) close
        now; the unacknowledged deliveries are put back by a later channel
        once the broker serves (jobs.broker_restore), as when it refuses them.
        """
        if self.closed:
            return
        if self._qos is not None:
            self._qos.restore_later_instead()
        self.connection.cycle.discard(self)
        self._disconnect_pools()
        self._close_clients()
        virtual.Channel.close(self)

    def close(self) -> None:
        """kombu's close, which lets go of the sockets even when the broker cannot be told.

        kombu deletes the channel's auto-delete fanout bindings (the worker's
        gossip and event subscriptions) before it closes the connections;
        when the broker is silent that command times out, and kombu's close
        raised before closing them: the subscription's socket stayed open for
        good (seen after a broker stall, with Celery's consumer restart then
        failing on the error: "Error on restarting Gossip"). The sockets are
        closed here whatever happened; a binding left behind costs nothing
        (fanout messages go out by PUBLISH) and kombu sweeps expiring ones.
        """
        try:
            super().close()
        except self.connection.connection_errors as error:
            logger.info("broker channel closed without the broker's answer: %r", error)
            self._disconnect_pools()
            self._close_clients()
            virtual.Channel.close(self)

    def _require_primary(self) -> None:
        """Raise BrokerUnavailableError if the server is a replica.

        A replica answers PING, so kombu's check passes, but it refuses the
        writes a consumer makes right after (bindings, BRPOP): Celery then
        restarted the consumer five times a second ("Frequent restarts
        detected") for as long as the failover lasted. Refused here, the
        connection counts as not established and Celery retries it with its
        back-off (2 s, 4 s, ... 30 s). A server without ROLE is not checked.
        """
        try:
            reply = self.client.execute_command("ROLE")
        except exceptions.ResponseError as error:
            if is_unavailable_reply(error):
                raise
            return  # ROLE renamed or refused (some managed services): no check
        role = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        if role != "master":
            raise BrokerUnavailableError(f"READONLY the broker is a {role}, not a primary")

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # The one place kombu picks the connection class for both of its pools
        # (TCP, TLS or Unix socket, plus its own event-loop subclass), so
        # wrapping the result covers every URL form.
        params = super()._connparams(asynchronous=asynchronous)
        params["connection_class"] = unavailable_is_disconnect(params["connection_class"])
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with BrokerUnavailableError among its connection errors.

    BrokerUnavailableError is a redis ConnectionError, which kombu lists
    already; naming it keeps the contract visible if kombu's list changes.
    """

    Channel = Channel
    connection_errors = (*kombu_redis.Transport.connection_errors, BrokerUnavailableError)
    channel_errors = kombu_redis.Transport.channel_errors

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next_subscription_check = 0.0

    def _collect(self, connection: Any) -> None:
        """Close `connection`'s channels at once, with no word to the broker (kombu's Connection.collect).

        kombu's Connection.collect, which Celery's worker calls after its
        connection is lost, uses this hook when the transport has one, else
        closes every channel the usual way, asking the broker to restore
        unacknowledged messages and drop bindings: one socket timeout per
        channel against a silent broker, while the worker's subscriptions
        (remote control, gossip) stayed open. Here every channel closes its
        sockets at once (Channel.close_at_once).
        """
        for channel in (*self._avail_channels, *self.channels):
            channel.close_at_once()
        self._avail_channels.clear()
        self.channels.clear()
        self.cycle.close()

    def heartbeat_check(self, connection: Any, rate: int = 2) -> None:
        """Check the subscriptions' health, as kombu's event loop does, every health_check_interval.

        kombu runs its pub/sub health check (maybe_check_subclient_health:
        PING each subscription, drop one that missed two answers) only from
        the event loop's timer, so a consumer that drains events instead
        (a ConsumerMixin such as the scheduler's worker monitor, which calls
        this about once a second while idle) would never notice a
        subscription gone silent. kombu's base Transport does nothing here.
        """
        interval = float(
            self.client.transport_options.get(
                "health_check_interval", kombu_redis.DEFAULT_HEALTH_CHECK_INTERVAL
            )
        )
        now = time.monotonic()
        if interval > 0 and now >= self._next_subscription_check:
            self._next_subscription_check = now + interval
            self.cycle.maybe_check_subclient_health()


# redis-py options that only TCP connections take.
TCP_ONLY_OPTIONS = ("socket_keepalive", "socket_keepalive_options")


def redis_client(url: str, **options: Any) -> redis.Redis:
    """A redis-py client for `url` whose connections treat "unavailable" replies as lost.

    `options` are redis.ConnectionPool.from_url keyword arguments (timeouts,
    protocol, ...), on top of settings.REDIS_LIVENESS_OPTIONS (health checks,
    TCP keepalive: a silent server is noticed as the transport notices it).
    For our own broker reads and writes (queue depth, run_id, cancellation
    flags, the retry budget), so a failover drops their connections too.
    """
    pool = redis.ConnectionPool.from_url(url, **{**settings.REDIS_LIVENESS_OPTIONS, **options})
    if issubclass(pool.connection_class, redis.UnixDomainSocketConnection):
        # TCP options a Unix socket connection refuses (as kombu's transport drops them).
        for option in TCP_ONLY_OPTIONS:
            pool.connection_kwargs.pop(option, None)
    pool.connection_class = unavailable_is_disconnect(pool.connection_class)
    return redis.Redis(connection_pool=pool)


TRANSPORT_PATH = "jobs.broker_transport:Transport"
# kombu.transport.redis's own aliases; `redis+socket://` URLs resolve through "redis".
REDIS_SCHEMES = ("redis", "rediss")


def install() -> None:
    """Make `Transport` kombu's transport for redis:// and rediss:// URLs in this process.

    Registered as kombu's alias for those schemes (kombu.transport.TRANSPORT_ALIASES,
    its public table of transport names) rather than through Celery's
    `broker_transport` setting: with the setting, kombu names the transport
    by its import path in every broker URL it prints (`Connection.as_uri`:
    "jobs.broker_transport:Transport://..."), and Flower, which picks its
    broker client by that URL's scheme, fails on its Broker page and queue
    API. Idempotent. Raises RuntimeError if kombu already resolved one of
    these names to another class in this process (it caches the answer).
    """
    for scheme in REDIS_SCHEMES:
        kombu.transport.TRANSPORT_ALIASES[scheme] = TRANSPORT_PATH
        resolved = kombu.transport.get_transport_cls(scheme)
        if resolved is not Transport:
            raise RuntimeError(
                f"kombu resolved {scheme}:// to {resolved!r} before jobs.broker_transport.install()"
            )
