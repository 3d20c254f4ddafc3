"""jobs.state_store: the store chosen once by settings, and the check that refuses one that cannot work."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psutil
import pytest
from django.utils import timezone

from jobs import state_store
from jobs.checks import check_state_store
from jobs.engine.overlap import provably_over
from jobs.reasons import StateStore


def test_state_store_default_is_redis_on_sqlite(settings: Any) -> None:
    settings.JOBS_STATE_STORE = ""
    assert state_store.configured() == StateStore.REDIS
    assert check_state_store(None) == []


def test_state_store_postgres_on_sqlite_refuses_to_start(settings: Any) -> None:
    settings.JOBS_STATE_STORE = "postgres"
    (error,) = check_state_store(None)
    assert error.id == "jobs.E030"
    assert "database is sqlite" in error.msg
    assert "\n" not in error.msg


def test_state_store_left_to_default_with_a_rabbitmq_broker_on_sqlite_refuses_to_start(
    settings: Any,
) -> None:
    settings.JOBS_STATE_STORE = ""
    settings.CELERY_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
    (error,) = check_state_store(None)
    assert error.id == "jobs.E030"
    assert "broker is amqp://" in error.msg
    assert "\n" not in error.msg


def test_state_store_redis_set_explicitly_with_a_rabbitmq_broker_keeps_state_in_redis_url(
    settings: Any,
) -> None:
    settings.JOBS_STATE_STORE = "redis"
    settings.CELERY_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
    settings.REDIS_URL = "redis://127.0.0.1:6390/0"
    assert check_state_store(None) == []
    settings.REDIS_URL = "amqp://guest:guest@127.0.0.1:5672//"
    (error,) = check_state_store(None)
    assert "REDIS_URL (amqp://) names no Redis" in error.msg


def test_state_store_unknown_name_refuses_to_start(settings: Any) -> None:
    settings.JOBS_STATE_STORE = "memcached"
    (error,) = check_state_store(None)
    assert "must be one of postgres, redis" in error.msg


def test_budget_on_a_broker_that_is_not_redis_falls_back_and_never_raises(settings: Any) -> None:
    # given the Redis store asked to count on an amqp:// URL (what started 19
    # jobs and left them running: ValueError inside the attempt's start)
    from jobs import budget  # noqa: PLC0415 - after the settings fixture

    settings.JOBS_STATE_STORE = "redis"
    settings.JOBS_RETRY_BUDGET_REDIS_URL = "amqp://guest:guest@127.0.0.1:5672//"
    # then counting and deciding fall back instead of raising
    assert budget.record_first("k", now=time.time()) is False
    answer = budget.reserve("k", now=time.time(), due=time.time() + 5)
    assert answer.fallback
    assert answer.granted


@pytest.fixture
def live_process() -> Iterator[psutil.Process]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield psutil.Process(child.pid)
    finally:
        child.kill()
        child.wait()


@pytest.mark.django_db
@pytest.mark.parametrize("host_ahead", [0.0, 90.0, -90.0])
def test_attempt_provably_over_compares_database_times_whatever_the_host_clock(
    job_factory: Callable[..., Any],
    attempt_factory: Callable[..., Any],
    live_process: psutil.Process,
    monkeypatch: pytest.MonkeyPatch,
    host_ahead: float,
) -> None:
    # given an attempt that started (database time) 5 s after its process did,
    # on this machine, with the lease still live
    now = timezone.now()
    process_age = time.time() - live_process.create_time()
    job = job_factory(
        status="running", attempts_made=1, lease_expires_at=now + timedelta(minutes=5)
    )
    previous = attempt_factory(
        job,
        number=1,
        worker_hostname="worker@" + os.uname().nodename,
        worker_pid=live_process.pid,
        started_at=now - timedelta(seconds=process_age) + timedelta(seconds=5),
    )
    # when this host's clock is ahead or behind the database's (psutil reads the
    # process's start on the host clock, as time.time does)
    real_time, real_create = time.time, psutil.Process.create_time
    monkeypatch.setattr(time, "time", lambda: real_time() + host_ahead)
    monkeypatch.setattr(psutil.Process, "create_time", lambda self: real_create(self) + host_ahead)
    # then the process is still the attempt's: not provably over
    assert not provably_over(previous, job, now=now, hostname="other@" + os.uname().nodename)
