"""System checks: configuration that would silently run attempts twice, never, or fail later.

Each web, worker and scheduler process refuses to start on an Error-level
check (config.startup); `python manage.py check` lists them all.

- jobs.E001: a kind's hard time limit is not below the broker's visibility
  timeout, so a slow attempt would be redelivered while it still runs.
- jobs.E002: JOBS_KIND_OVERRIDES is not an object of objects, or makes a
  kind's Policy contradict itself (jobs.policy.Policy says which rules).
- jobs.E003: JOBS_JSON_MAX_DEPTH is outside 1..MAX_JSON_DEPTH.
- jobs.E004: a memory limit is negative, or a kind's soft memory limit (its
  own or JOBS_MEMORY_SOFT_LIMIT_BYTES) is not below its hard one: the soft
  limit would never ask the attempt to stop before it is ended.
- jobs.E005 (worker only, config.startup.prepare_worker_memory): the
  per-child memory limit is at or below what a fresh child already owns.
- jobs.E006: a JOBS_RETRY_BUDGET_* setting the budget cannot work with (a
  window or Redis timeout not above 0; a ratio, floor or maximum deferral
  below 0).
- jobs.E007: JOBS_PUBLISH_STAMP_DELAY_SECONDS is outside 0..MAX_STAMP_DELAY:
  a later stamp would leave published rows looking unpublished to the
  outbox sweep (jobs.services.publish_stamps).
- jobs.E008: JOBS_BROKER_HEALTH_CHECK_INTERVAL or JOBS_BROKER_SOCKET_TIMEOUT
  is not above 0: kombu's health checks would be off (a silent broker never
  noticed) or every Redis command would fail at once.
- jobs.E020: CELERY_BROKER_URL names a broker with no adapter (jobs.brokers:
  redis://, rediss://, amqp://, amqps://, pyamqp:// only).
- jobs.E022 (RabbitMQ): JOBS_RABBITMQ_DELIVERY_LIMIT is not above
  JOBS_POISON_AFTER: the broker would drop a poison message before our own
  rule ends it with reason "poison" (docs/brokers.md).
- jobs.E013: two classes register one kind name (in two apps' `kinds`
  modules, jobs.kinds.discovery): which one would run is an accident of
  import order.
- jobs.E014 (jobs.taskbackend.JobsBackend.check, run by Django's Tasks
  checks): the TASKS backend's QUEUES name a queue not in JOBS_QUEUES.
- jobs.E031 (jobs.periodic.checks): a schedule declared in code (JOBS_SCHEDULES)
  names an unknown kind or has a bad cron expression, time zone, interval or policy.
- jobs.E021: JOBS_SCHEDULER_LEASE_SECONDS, JOBS_SCHEDULER_RENEW_SECONDS or
  JOBS_OUTBOX_CLAIM_SECONDS is not above 0, or the renewal is not shorter
  than the lease: the leader would lose its lease between two renewals.
- jobs.E030: JOBS_STATE_STORE names a store that cannot work here (unknown,
  postgres on another database, redis with a broker that is not Redis):
  jobs.state_store.problem.
- jobs.E041: JOBS_RATE_DISPATCH_MARGIN is not a number of seconds from 0 to 1.
- jobs.E040: a JOBS_PRUNE_* setting retention cannot work with (an age that
  is not a positive number with a unit or "off", a batch outside
  1..MAX_BATCH, a pause outside 0..60 s, a duty cycle outside 0.01..1, a
  batch target outside 10..10,000 ms): jobs.retention.problems.
- jobs.W001: JOBS_KIND_OVERRIDES names a kind that is not registered (a
  typo, or a fault kind while JOBS_FAULT_KINDS is off).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from jobs import retention, state_store
from jobs.kinds import get_kind, kind_names, policy_for
from jobs.kinds.registry import duplicate_kinds
from jobs.memory_guard import attempt_limits

# Highest JOBS_JSON_MAX_DEPTH accepted: recursive code below the API (DRF
# serializers, json.dumps, the request fingerprint) spends a few frames per
# level, and Python's recursion limit is 1000 frames.
MAX_JSON_DEPTH = 200
# Longest accepted batching delay of `published_at` stamps (seconds).
MAX_STAMP_DELAY = 0.25


@register()
def check_kind_overrides(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_KIND_OVERRIDES must be {kind: {policy field: value}} and give valid policies."""

    overrides = settings.JOBS_KIND_OVERRIDES
    if not isinstance(overrides, dict):
        return [
            Error(
                f"JOBS_KIND_OVERRIDES must be a JSON object of kind names, not {overrides!r}",
                hint='e.g. JOBS_KIND_OVERRIDES=\'{"webhook.deliver": {"max_attempts": 10}}\'',
                id="jobs.E002",
            )
        ]
    messages: list[CheckMessage] = []
    known = set(kind_names())
    for name, fields in overrides.items():
        if name not in known:
            messages.append(
                Warning(
                    f"JOBS_KIND_OVERRIDES names kind {name!r}, which is not registered; "
                    f"known kinds: {', '.join(sorted(known))}",
                    id="jobs.W001",
                )
            )
            continue
        try:
            get_kind(name).policy.with_overrides(fields or {})
        except ValueError as exc:
            messages.append(
                Error(
                    f"JOBS_KIND_OVERRIDES[{name!r}] gives an invalid policy: {exc}",
                    hint="fix or remove that override; jobs/policy.py lists the rules",
                    id="jobs.E002",
                )
            )
    return messages


@register()
def check_visibility_timeout(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The Redis visibility timeout (kombu issue 337), or RabbitMQ's consumer_timeout (a
    delivery unacknowledged longer closes its channel: redelivered), must exceed every
    kind's hard time limit."""

    errors: list[CheckMessage] = []
    if settings.JOBS_BROKER_KIND == "rabbitmq":
        setting, timeout = "JOBS_RABBITMQ_CONSUMER_TIMEOUT", settings.JOBS_RABBITMQ_CONSUMER_TIMEOUT
    else:
        setting, timeout = "JOBS_VISIBILITY_TIMEOUT", settings.JOBS_VISIBILITY_TIMEOUT
    for name in kind_names():
        try:
            hard = policy_for(name).hard_time_limit
        except (ValueError, AttributeError):
            continue  # an invalid override: jobs.E002 reports it
        if hard >= timeout:
            errors.append(
                Error(
                    f"kind {name!r} has hard_time_limit {hard}s >= {setting} "
                    f"{timeout}s: a slow attempt would be redelivered while running",
                    hint=f"raise {setting} or lower the kind's hard_time_limit",
                    id="jobs.E001",
                )
            )
    return errors


@register()
def check_json_depth(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_JSON_MAX_DEPTH must leave recursive code below the API room (1..MAX_JSON_DEPTH)."""
    depth = settings.JOBS_JSON_MAX_DEPTH
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_JSON_DEPTH:
        return [
            Error(
                f"JOBS_JSON_MAX_DEPTH is {depth!r}; it must be an integer from 1 to "
                f"{MAX_JSON_DEPTH}: deeper JSON would reach Python's recursion limit",
                id="jobs.E003",
            )
        ]
    return []


@register()
def check_memory_limits(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Memory limits are >= 0 and each kind's effective soft one is below its hard one (jobs.memory_guard)."""

    errors: list[CheckMessage] = []
    for name in (
        "JOBS_MEMORY_SOFT_LIMIT_BYTES",
        "JOBS_MEMORY_HARD_LIMIT_BYTES",
        "JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES",
    ):
        if getattr(settings, name) < 0:
            errors.append(
                Error(
                    f"{name} is {getattr(settings, name)}; it must be >= 0 (0: no limit)",
                    id="jobs.E004",
                )
            )
    if errors:
        return errors
    for kind in kind_names():
        try:
            soft, hard = attempt_limits(policy_for(kind))
        except ValueError:
            continue  # an invalid override: jobs.E002 reports it
        if soft and hard and soft >= hard:
            errors.append(
                Error(
                    f"kind {kind!r} has a soft memory limit of {soft} bytes, not below its hard "
                    f"memory limit of {hard} bytes: it would be ended before being asked to stop",
                    hint="lower JOBS_MEMORY_SOFT_LIMIT_BYTES or the kind's soft_memory_limit, "
                    "or raise the hard one",
                    id="jobs.E004",
                )
            )
    return errors


@register()
def check_retry_budget(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_RETRY_BUDGET_*: window and Redis timeout > 0 s; ratio, floor, max deferral >= 0."""
    rules = [
        ("JOBS_RETRY_BUDGET_WINDOW", settings.JOBS_RETRY_BUDGET_WINDOW, True),
        ("JOBS_RETRY_BUDGET_REDIS_TIMEOUT", settings.JOBS_RETRY_BUDGET_REDIS_TIMEOUT, True),
        ("JOBS_RETRY_BUDGET_RATIO", settings.JOBS_RETRY_BUDGET_RATIO, False),
        ("JOBS_RETRY_BUDGET_FLOOR", settings.JOBS_RETRY_BUDGET_FLOOR, False),
        ("JOBS_RETRY_BUDGET_MAX_DEFERRAL", settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL, False),
    ]
    return [
        Error(
            f"{name} is {value!r}; it must be a number "
            f"{'above 0' if positive else 'of at least 0'}",
            id="jobs.E006",
        )
        for name, value, positive in rules
        if isinstance(value, bool)
        or not isinstance(value, int | float)
        or (value <= 0 if positive else value < 0)
    ]


@register()
def check_publish_stamp_delay(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_PUBLISH_STAMP_DELAY_SECONDS is a number of seconds from 0 to MAX_STAMP_DELAY."""
    delay = settings.JOBS_PUBLISH_STAMP_DELAY_SECONDS
    if (
        isinstance(delay, bool)
        or not isinstance(delay, int | float)
        or not 0 <= delay <= MAX_STAMP_DELAY
    ):
        return [
            Error(
                f"JOBS_PUBLISH_STAMP_DELAY_SECONDS is {delay!r}; it must be from 0 (stamp at once)"
                f" to {MAX_STAMP_DELAY:g} seconds",
                id="jobs.E007",
            )
        ]
    return []


@register()
def check_broker_liveness(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_BROKER_HEALTH_CHECK_INTERVAL and JOBS_BROKER_SOCKET_TIMEOUT are seconds above 0."""
    rules = [
        ("JOBS_BROKER_HEALTH_CHECK_INTERVAL", settings.JOBS_BROKER_HEALTH_CHECK_INTERVAL),
        ("JOBS_BROKER_SOCKET_TIMEOUT", settings.JOBS_BROKER_SOCKET_TIMEOUT),
    ]
    return [
        Error(
            f"{name} is {value!r}; it must be a number of seconds above 0 "
            "(docs/broker-liveness.md: what it bounds)",
            id="jobs.E008",
        )
        for name, value in rules
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
    ]


@register()
def check_scheduler_lease(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Lease, renewal and outbox claim are seconds above 0, and the renewal is below the lease."""
    rules = [
        ("JOBS_SCHEDULER_LEASE_SECONDS", settings.JOBS_SCHEDULER_LEASE_SECONDS),
        ("JOBS_SCHEDULER_RENEW_SECONDS", settings.JOBS_SCHEDULER_RENEW_SECONDS),
        ("JOBS_OUTBOX_CLAIM_SECONDS", settings.JOBS_OUTBOX_CLAIM_SECONDS),
    ]
    errors: list[CheckMessage] = [
        Error(f"{name} is {value!r}; it must be a number of seconds above 0", id="jobs.E021")
        for name, value in rules
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
    ]
    lease, renew = rules[0][1], rules[1][1]
    if not errors and renew >= lease:
        errors.append(
            Error(
                f"JOBS_SCHEDULER_RENEW_SECONDS ({renew:g}) must be below "
                f"JOBS_SCHEDULER_LEASE_SECONDS ({lease:g}): the leader would lose its lease "
                "between two renewals (docs/scheduler.md)",
                id="jobs.E021",
            )
        )
    return errors


@register()
def check_duplicate_kinds(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """Each kind name is registered by one class only (jobs.kinds.registry.duplicate_kinds)."""
    return [
        Error(
            f"kind {c.name!r} is registered twice: by {c.first} and by {c.second}",
            hint="Rename one of them (kind names are global: prefix them with the app's label).",
            id="jobs.E013",
        )
        for c in duplicate_kinds()
    ]


@register()
def check_state_store(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_STATE_STORE is a store that can work with this database and broker (jobs.state_store)."""
    problem = state_store.problem()
    return [] if problem is None else [Error(problem, id="jobs.E030")]


@register()
def check_broker(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The broker URL must pick an adapter; on RabbitMQ the delivery limit must exceed the poison bound."""
    kind = settings.JOBS_BROKER_KIND
    if kind not in {"redis", "rabbitmq"}:
        scheme = settings.CELERY_BROKER_URL.split("://", 1)[0]
        return [
            Error(
                f"CELERY_BROKER_URL scheme {scheme!r} has no broker adapter "
                "(redis://, rediss://, amqp://, amqps://, pyamqp://)",
                id="jobs.E020",
            )
        ]
    if kind == "rabbitmq" and settings.JOBS_RABBITMQ_DELIVERY_LIMIT <= settings.JOBS_POISON_AFTER:
        return [
            Error(
                f"JOBS_RABBITMQ_DELIVERY_LIMIT {settings.JOBS_RABBITMQ_DELIVERY_LIMIT} is not above "
                f"JOBS_POISON_AFTER {settings.JOBS_POISON_AFTER}: RabbitMQ would drop a poison "
                "message before the platform ends its job",
                hint="raise JOBS_RABBITMQ_DELIVERY_LIMIT (default 10)",
                id="jobs.E022",
            )
        ]
    return []


@register()
def check_retention(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """The JOBS_PRUNE_* settings are ages and a pace (batch, pause, duty, target) retention can use."""
    return [Error(problem, id="jobs.E040") for problem in retention.problems()]


@register()
def check_rate_dispatch_margin(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    """JOBS_RATE_DISPATCH_MARGIN is a number of seconds from 0 to 1."""
    margin = settings.JOBS_RATE_DISPATCH_MARGIN
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin <= 1:
        return [
            Error(
                f"JOBS_RATE_DISPATCH_MARGIN is {margin!r}; it must be from 0 to 1 second",
                id="jobs.E041",
            )
        ]
    return []
