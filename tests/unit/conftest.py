"""Fixtures of the unit tests: a private Redis broker, row factories, an API client.

Unit tests never touch the shared Redis on 127.0.0.1:6379. A redis-server of
our own, on a spare port, is the Celery broker for the whole session, so
`job_publish` and the backpressure count run for real without workers.
"""

from __future__ import annotations

import itertools
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone
from kombu import Connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from config.celery_app import app
from devstack import netns
from devstack.rebinding_dns import RebindingResolver
from devstack.receiver import WebhookReceiver
from devstack.services import RedisServer, free_port
from jobs import broker, worker_reports
from jobs.broker_transport import Transport, UnavailableIsDisconnect
from jobs.kinds import AttemptContext
from jobs.kinds.csv_summary import CsvSummary
from jobs.kinds.webhook import WebhookDeliver
from jobs.models import Attempt, Job, JobStatus
from tests.unit.ssrf_hosts import SsrfHosts, ssrf_hosts_started

SHARED_REDIS_PORT = 6379


@pytest.fixture(scope="session", autouse=True)
def private_broker() -> Iterator[RedisServer]:
    """A redis-server we start on a spare port, set as the broker for every test."""

    server = RedisServer().start()
    assert server.port != SHARED_REDIS_PORT
    override = override_settings(CELERY_BROKER_URL=server.url, REDIS_URL=server.url)
    override.enable()
    # The Celery app read its config from Django settings; point it (and any
    # connection pool it made already) at our server too.
    app.conf.broker_url = server.url
    if app._pool is not None:
        app._pool.force_close_all()
        app._pool = None
    assert f":{server.port}/" in app.connection_for_write().as_uri()
    try:
        yield server
    finally:
        if app._pool is not None:
            app._pool.force_close_all()
            app._pool = None
        override.disable()
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def broker_not_marked_unreachable() -> None:
    """A broker failure seen by an earlier test does not make this one skip the broker."""

    broker.mark_reachable()


@pytest.fixture(autouse=True)
def retry_budget_of_its_own(settings: Any) -> None:
    """Each test counts its retry budget (jobs.budget) under a key prefix of its own.

    The private broker lives for the session: without this, failures of one
    test would spend the budget of the next.
    """
    settings.JOBS_RETRY_BUDGET_KEY_PREFIX = f"test:{uuid.uuid4().hex}:"


@pytest.fixture
def broker_redis(private_broker: RedisServer) -> redis.Redis:
    """A client of the private broker, emptied before the test."""
    client = redis.Redis.from_url(private_broker.url)
    client.flushdb()
    return client


@pytest.fixture
def job_factory(db: None, user: Any) -> Callable[..., Any]:
    """Create Job rows; keyword arguments override the defaults.

    Submitted by `user` (the one `api_client` authenticates as) unless
    `created_by` says otherwise: the API shows a user only their own jobs.
    """

    counter = itertools.count(1)

    def make(**fields: Any) -> Job:
        defaults: dict[str, Any] = {
            "kind": "demo.flaky",
            "queue": "default",
            "payload": {"fail_times": 0, "sleep_seconds": 0},
            "status": JobStatus.QUEUED,
            "max_attempts": 5,
            "request_fingerprint": f"fingerprint-{next(counter)}",
            "enqueued_at": timezone.now(),
            "created_by": user,
        }
        return Job.objects.create(**{**defaults, **fields})

    return make


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ids of the jobs the submission publishes, in order: its publish is recorded and
    reported as sent instead of reaching the broker."""
    sent: list[Any] = []

    def publish(job: Job, **_: Any) -> bool:
        sent.append(job.id)
        return True

    monkeypatch.setattr("jobs.services.submission.publish_one", publish)
    monkeypatch.setattr("jobs.services.publishing.publish_one", publish)
    return sent


@pytest.fixture
def attempt_factory(db: None) -> Callable[..., Any]:
    """Create Attempt rows for a job; keyword arguments override the defaults."""

    def make(job: Any, **fields: Any) -> Attempt:
        defaults: dict[str, Any] = {
            "number": job.attempts_made or 1,
            "worker_hostname": "worker@test",
            "worker_pid": 1,
            "started_at": timezone.now() - timedelta(seconds=1),
        }
        return Attempt.objects.create(job=job, **{**defaults, **fields})

    return make


@pytest.fixture
def running_job(job_factory: Callable[..., Any], attempt_factory: Callable[..., Any]) -> Any:
    """A demo.flaky job in attempt 1, started by `worker@test` (pid 1), lease live."""

    job = job_factory(
        status=JobStatus.RUNNING,
        attempts_made=1,
        started_at=timezone.now(),
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    attempt_factory(job, number=1)
    return job


@pytest.fixture
def user(db: None) -> Any:

    return get_user_model().objects.create_user(username="api-user", password="not-used")


@pytest.fixture
def api_client(user: Any) -> Any:
    """A DRF APIClient sending the user's token."""

    token = Token.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    """The devstack webhook receiver on a free loopback port."""
    with WebhookReceiver(seed=1) as server:
        yield server


@pytest.fixture
def csv_root(tmp_path: Any, settings: Any) -> Any:
    """A temporary directory that report.csv_summary may read from."""
    settings.JOBS_CSV_ROOTS = [str(tmp_path)]
    return tmp_path


@pytest.fixture
def attempt_context() -> Callable[..., Any]:
    """Build an AttemptContext; `soft_in`/`hard_in` are seconds from now."""

    def make(*, soft_in: float = 30.0, hard_in: float = 45.0, attempt: int = 1) -> AttemptContext:
        now = time.monotonic()
        return AttemptContext(
            job_id=uuid.uuid4(),
            kind="test.kind",
            attempt=attempt,
            max_attempts=5,
            soft_deadline=now + soft_in,
            hard_deadline=now + hard_in,
        )

    return make


@pytest.fixture
def deliver(receiver: Any, attempt_context: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    """deliver(path, **payload) -> (ctx, result) of one WebhookDeliver.run."""

    def run(path: str, *, attempt: int = 1, **payload: Any) -> tuple[Any, Any]:

        kind = WebhookDeliver()
        validated = kind.validate_payload({"url": receiver.url(path), **payload})
        ctx = attempt_context(attempt=attempt)
        return ctx, kind.run(validated, ctx)

    return run


@pytest.fixture
def summarise_file(
    csv_root: Path, attempt_context: Callable[..., Any]
) -> Callable[..., dict[str, Any]]:
    """summarise_file(text, **payload) -> the kind's result for a file under csv_root."""

    def run(text: str, *, name: str = "data.csv", **payload: Any) -> dict[str, Any]:
        path = csv_root / name
        path.write_text(text, encoding="utf-8")

        kind = CsvSummary()
        validated = kind.validate_payload({"source": str(path), **payload})
        return kind.run(validated, attempt_context())

    return run


# -- a redis-server whose role tests change (failover, write refusal) ---------


@pytest.fixture(scope="module")
def role_redis() -> Iterator[RedisServer]:
    """A redis-server per test module whose role tests change (REPLICAOF); never the session broker."""
    server = RedisServer().start()
    assert server.port != SHARED_REDIS_PORT
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture
def role_admin(role_redis: RedisServer) -> Iterator[redis.Redis]:
    """A plain client of `role_redis`; the server is an empty primary again after the test."""
    client = redis.Redis.from_url(role_redis.url, protocol=2)
    client.flushdb()
    try:
        yield client
    finally:
        client.replicaof("NO", "ONE")
        client.flushdb()
        client.close()


@pytest.fixture
def demote(role_admin: redis.Redis) -> Callable[[], None]:
    """Make `role_redis` a replica of a master that does not exist (a failover in progress)."""
    return lambda: role_admin.replicaof("127.0.0.1", free_port())


@pytest.fixture
def transport_client(role_redis: RedisServer) -> Iterator[redis.Redis]:
    """The redis-py client of a channel of our broker transport (what the worker's consumer uses)."""

    with Connection(role_redis.url, transport=Transport) as connection:
        channel = connection.default_channel
        # both of kombu's pools use our connection class (kombu's own hook)
        for pool in (channel.pool, channel.async_pool):
            assert issubclass(pool.connection_class, UnavailableIsDisconnect)
        yield channel.client


# -- hosts for the SSRF tests: real servers inside a network namespace --------


@pytest.fixture(scope="module")
def _ssrf_hosts() -> Iterator[SsrfHosts]:
    reason = netns.available()
    if reason:
        pytest.skip(reason)
    with ssrf_hosts_started() as hosts:
        yield hosts


@pytest.fixture
def ssrf_hosts(_ssrf_hosts: SsrfHosts, settings: Any) -> SsrfHosts:
    """The module's SSRF hosts with no hits recorded; private destinations refused."""
    settings.JOBS_ALLOW_PRIVATE_DESTINATIONS = False
    _ssrf_hosts.clear()
    return _ssrf_hosts


@pytest.fixture
def rebinding_dns() -> Iterator[Callable[..., Any]]:
    """rebinding_dns({name: [[first answer], [later answers]]}) -> an installed RebindingResolver."""
    installed: list[RebindingResolver] = []

    def install(answers: dict[str, list[list[str]]]) -> RebindingResolver:
        resolver = RebindingResolver(answers).install()
        installed.append(resolver)
        return resolver

    yield install
    for resolver in reversed(installed):
        resolver.uninstall()


def report_worker(queues: list[str] | None) -> None:
    """A live worker report listing `queues` (None: an older report without the list)."""
    report: dict[str, Any] = {"hostname": f"w-{uuid.uuid4().hex[:6]}@box", "children": []}
    if queues is not None:
        report["queues"] = queues
    worker_reports.write(report, ttl=60)


@pytest.fixture
def no_reports(private_broker: Any) -> Iterator[None]:
    """No worker report in the (Redis) state store before and after the test."""
    client = redis.Redis.from_url(private_broker.url)
    for key in client.scan_iter("jobs:worker-report*"):
        client.delete(key)
    yield
    for key in client.scan_iter("jobs:worker-report*"):
        client.delete(key)
    client.close()
