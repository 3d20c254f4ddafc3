"""Celery settings (read by `config_from_object(..., namespace="CELERY")`).

Each non-obvious setting links the Celery docs entry that explains it:
https://docs.celeryq.dev/en/stable/userguide/configuration.html
"""

from __future__ import annotations

import socket

from config.env import env

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
# Which broker adapter (jobs.brokers) the URL picks: "redis" (redis://,
# rediss://) or "rabbitmq" (amqp://, amqps://, pyamqp://: kombu's py-amqp
# transport, quorum queues). docs/brokers.md says when to pick which.
JOBS_BROKER_KIND: str = (
    "rabbitmq"
    if CELERY_BROKER_URL.split("://", 1)[0] in {"amqp", "amqps", "pyamqp"}
    else "redis"
    if CELERY_BROKER_URL.split("://", 1)[0] in {"redis", "rediss"}
    else "unsupported"  # refused at start (jobs.E020)
)
# redis:// and rediss:// brokers use jobs.broker_transport.Transport (installed
# by config/celery_app.py): kombu's Redis transport, except that Redis's "cannot
# serve you now" replies (failover: UNBLOCKED, READONLY; write refusal: MISCONF;
# ...) are lost connections every process reconnects from, not errors that end
# the worker.
# Results live in the Job row; Celery's result backend is not used.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True

# JSON only: a pickle payload from the broker is code execution.
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"

# #task-acks-late / #task-reject-on-worker-lost: a message is acknowledged only
# after the attempt ends; a child killed mid-attempt puts it back on the queue.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# #worker-prefetch-multiplier: each child reserves at most one message.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# #worker-send-task-events / #task-send-sent-event: Flower needs events.
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
# A child is replaced after an attempt once it *owns* more than this many
# bytes: its resident memory grown since it was forked (jobs.memory_guard),
# not Celery's ru_maxrss, the peak a fresh child inherits from a large main
# process. 0 turns it off. #worker-max-memory-per-child is in KiB: billiard
# compares it, after each task, with the reading jobs.memory_guard installs
# in place of its ru_maxrss one.
JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES = env.int(
    "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES", default=512 * 1024 * 1024
)
CELERY_WORKER_MAX_MEMORY_PER_CHILD = JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES // 1024 or None
CELERY_WORKER_MAX_TASKS_PER_CHILD = env.int("JOBS_WORKER_MAX_TASKS_PER_CHILD", default=1000)
CELERY_WORKER_CONCURRENCY = env.int("JOBS_WORKER_CONCURRENCY", default=2)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# #broker-connection-max-retries: a worker keeps reconnecting however long the
# broker is away (default: gives up and exits after 100 tries, ~45 minutes).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# #worker-hijack-root-logger: keep Django's LOGGING.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Fallback limits for a message that carries none (every job message carries its kind's).
CELERY_TASK_SOFT_TIME_LIMIT = env.int("JOBS_DEFAULT_SOFT_TIME_LIMIT", default=60)
CELERY_TASK_TIME_LIMIT = env.int("JOBS_DEFAULT_HARD_TIME_LIMIT", default=90)

# #broker-transport-options: an unacked message is redelivered after the
# visibility timeout; it must exceed the largest hard time limit, or a slow
# attempt runs twice. `jobs.checks` verifies this at startup.
JOBS_VISIBILITY_TIMEOUT = env.int("JOBS_VISIBILITY_TIMEOUT", default=3600)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": JOBS_VISIBILITY_TIMEOUT,
    # Socket timeouts: "Broker and Redis liveness" below.
    # One connection try per publish, no sleep-and-retry: otherwise kombu's
    # failover loop blocks each publish ~6 s while Redis is down. The worker
    # reconnects with its own loop (broker_connection_retry).
    "max_retries": 0,
    # Scan for messages unacked past the visibility timeout (a worker that died
    # with them) every unacked_restore_interval (10 s), not every 10th time.
    "unacked_restore_throttle": 1,
}
# #worker-soft-shutdown-timeout: a cold shutdown (SIGQUIT, or a second SIGTERM:
# jobs.worker_shutdown) cancels running attempts at once; they are recorded as
# interrupted and their messages redelivered. Celery's soft shutdown waits this
# many seconds first by sleeping inside the signal handler, with the event loop
# stopped: no result is read meanwhile, so attempts that end in the window are
# cancelled all the same and their time-limit timers fire late (docs/shutdown.md).
# A first SIGTERM is a warm shutdown that waits for running attempts (each
# bounded by its hard limit). #worker-enable-soft-shutdown-on-idle: off, so an
# idle worker never waits; unacked messages go back to the queue when the
# worker's broker channel closes.
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = env.float("JOBS_WORKER_SOFT_SHUTDOWN_TIMEOUT", default=0.0)
CELERY_WORKER_ENABLE_SOFT_SHUTDOWN_ON_IDLE = False

# Celery's Django fixup closes every database connection before and after
# each task unless CELERY_DB_REUSE_MAX is set (celery/fixups/django.py
# close_database): one new PostgreSQL connection per attempt, ~13% of a
# child's CPU. With it, a child keeps one connection for this many tasks
# (the fixup counts before and after each task, so twice this many calls);
# a connection dropped meanwhile is replaced on first use (jobs.db).
CELERY_DB_REUSE_MAX = env.int("JOBS_WORKER_DB_REUSE_MAX", default=1000)

# Publishing never blocks a request for long: the row is already durable.
CELERY_TASK_PUBLISH_RETRY = False

# --- Broker and Redis liveness: a silent connection is dropped within seconds ---
# A broker behind a partition, a frozen host or a proxy that lost its state
# keeps connections open and answers nothing; no error ever comes. Each kind
# of client gets its liveness options here, once (README "Faults", the
# worst cases: docs/broker-liveness.md):
# - kombu's Redis transport (every Celery connection of every process: the
#   worker's consumer, its pidbox and event subscriptions, its event and
#   reply publishers, the web's and the scheduler's publishers, the
#   scheduler's worker monitor, Flower) via CELERY_BROKER_TRANSPORT_OPTIONS;
# - our own redis-py clients (retry budget, cancellation flags, worker
#   reports, queue depths, lost-message checks, the outcome spool), all made
#   by jobs.broker_transport.redis_client, which applies REDIS_LIVENESS_OPTIONS;
# - an AMQP broker (issue 21): CELERY_BROKER_HEARTBEAT.
# https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
# health_check_interval: kombu PINGs every subscription (dropped after two
# missed answers) and drops a BRPOP overdue by brpop_timeout (1 s) + this;
# redis-py PINGs a connection idle longer than this before using it.
JOBS_BROKER_HEALTH_CHECK_INTERVAL: float = env.float(
    "JOBS_BROKER_HEALTH_CHECK_INTERVAL", default=1.0
)
# Seconds a command waits for Redis's reply (and for a connection), in every
# process: fail fast when Redis is down or silent; the outbox sweep
# republishes later, the worker reconnects.
JOBS_BROKER_SOCKET_TIMEOUT: float = env.float("JOBS_BROKER_SOCKET_TIMEOUT", default=2.0)
# TCP keepalive: a peer that vanished (host down, partition dropping every
# packet) fails an idle connection after 5 + 3 x 1 s; unacknowledged data
# fails it after TCP_USER_TIMEOUT. Linux names; other systems skip them.
_KEEPALIVE = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 8000}
REDIS_LIVENESS_OPTIONS: dict[str, object] = {
    "health_check_interval": JOBS_BROKER_HEALTH_CHECK_INTERVAL,
    "socket_keepalive": True,
    "socket_keepalive_options": {
        getattr(socket, name): value for name, value in _KEEPALIVE.items() if hasattr(socket, name)
    },
}
CELERY_BROKER_TRANSPORT_OPTIONS.update(
    REDIS_LIVENESS_OPTIONS,
    socket_timeout=JOBS_BROKER_SOCKET_TIMEOUT,
    socket_connect_timeout=JOBS_BROKER_SOCKET_TIMEOUT,
    # The worker's consumer reconnects 1 s, 2 s, then every 3 s (not kombu's
    # 2, 4, ... 30 s): back at most ~10 s after the broker is
    # (jobs.broker_liveness.Connection).
    interval_start=1,
    interval_step=1,
    interval_max=3,
)
# --- RabbitMQ (JOBS_BROKER_KIND "rabbitmq"): quorum queues, confirms, a delivery limit ---
# Seconds a publish waits for RabbitMQ's confirm (publisher confirms are on,
# kombu's `confirm_publish`): past it the publish counts as failed and the
# job stays in the outbox for the sweep (jobs.services.submission).
JOBS_BROKER_CONFIRM_TIMEOUT: float = env.float("JOBS_BROKER_CONFIRM_TIMEOUT", default=2.0)
# Deliveries of one message before RabbitMQ drops it to the dead-letter
# exchange (quorum queues' `x-delivery-limit`; RabbitMQ 3.10 has no default
# and redelivers for ever). Must stay above JOBS_POISON_AFTER (jobs.E022):
# the platform's own poison rule ends a job first; the broker's limit only
# catches what never reaches our code. A job dropped by it ends `dead` with
# reason `delivery_limit` (the scheduler consumes the dead-letter queue).
JOBS_RABBITMQ_DELIVERY_LIMIT: int = env.int("JOBS_RABBITMQ_DELIVERY_LIMIT", default=10)
# The dead-letter exchange (fanout, durable) and the quorum queue bound to it.
JOBS_RABBITMQ_DEAD_LETTER_EXCHANGE: str = env.str(
    "JOBS_RABBITMQ_DEAD_LETTER_EXCHANGE", default="jobs.dead_letter"
)
JOBS_RABBITMQ_DEAD_LETTER_QUEUE: str = env.str(
    "JOBS_RABBITMQ_DEAD_LETTER_QUEUE", default="jobs.dead_letter"
)
# RabbitMQ's consumer_timeout (seconds; the server's setting, 1800 by default
# on 3.10): a delivery unacknowledged longer closes its channel and is
# redelivered. Every kind's hard time limit must stay below it (jobs.E001).
JOBS_RABBITMQ_CONSUMER_TIMEOUT: int = env.int("JOBS_RABBITMQ_CONSUMER_TIMEOUT", default=1800)
if JOBS_BROKER_KIND == "rabbitmq":
    # https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.pyamqp.html
    # confirm_publish: every publish waits for the broker's ack (bounded by
    # JOBS_BROKER_CONFIRM_TIMEOUT, passed with each publish).
    CELERY_BROKER_TRANSPORT_OPTIONS["confirm_publish"] = True
    # #worker-detect-quorum-queues (Celery's default, said here): a quorum
    # queue refuses global QoS, so prefetch is per consumer (1, above).
    CELERY_WORKER_DETECT_QUORUM_QUEUES = True
    # #broker-connection-timeout: a dead RabbitMQ fails a publish's connect fast.
    CELERY_BROKER_CONNECTION_TIMEOUT = JOBS_BROKER_SOCKET_TIMEOUT

# #broker-heartbeat (AMQP only; the Redis transport ignores it): the worker
# and RabbitMQ exchange heartbeats; a connection silent for two of them is
# dropped (checked broker_heartbeat / broker_heartbeat_checkrate apart).
CELERY_BROKER_HEARTBEAT = 4
# #worker-cancel-long-running-tasks-on-connection-loss (Celery 6 will turn it
# on): kept off. A lost broker connection must not end running attempts:
# each writes its outcome to the database, and its message, put back with
# the lost channel's deliveries, is dropped unrun by the job's lease. On,
# every running attempt would be killed and its work done again.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
