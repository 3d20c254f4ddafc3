"""jobs.worker_shutdown: a second SIGTERM installs Celery's cold shutdown handler (receivers called directly)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery.apps import worker as celery_worker

from jobs import worker_shutdown

# celery/apps/worker.py's module namespace (its handlers are not in celery-types' stubs).
CELERY_WORKER = vars(celery_worker)


@pytest.fixture
def restore_sigterm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        worker_shutdown._worker["instance"] = None


def _captured(handler: object) -> list[object]:
    """What Celery's installed signal handler closes over (its callback among them)."""
    return [cell.cell_contents for cell in getattr(handler, "__closure__", None) or ()]


def test_celery_still_has_the_handlers_it_reuses() -> None:
    # Fails loudly if Celery renames what jobs.worker_shutdown installs.
    for name in ("install_worker_term_hard_handler", "during_soft_shutdown", "on_cold_shutdown"):
        assert callable(CELERY_WORKER.get(name)), name


@pytest.mark.usefixtures("restore_sigterm")
def test_worker_shutdown_second_sigterm_is_cold_then_third_as_a_second_sigquit() -> None:
    # given the worker that started
    worker_shutdown.remember_worker(sender=SimpleNamespace(hostname="w@h"))

    # when a first SIGTERM starts a warm shutdown
    worker_shutdown.escalate_sigterm(sig="SIGTERM", how="Warm")
    # then the next SIGTERM runs Celery's cold shutdown (what SIGQUIT runs)
    handler = signal.getsignal(signal.SIGTERM)
    assert getattr(handler, "__name__", None) == "worker_Cold"
    assert CELERY_WORKER["on_cold_shutdown"] in _captured(handler)

    # when that cold shutdown runs, the one after is what a second SIGQUIT does
    worker_shutdown.escalate_sigterm(sig="SIGTERM", how="Cold")
    assert CELERY_WORKER["during_soft_shutdown"] in _captured(signal.getsignal(signal.SIGTERM))


@pytest.mark.usefixtures("restore_sigterm")
def test_worker_shutdown_leaves_other_signals_and_unknown_workers_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    # no worker remembered (not a worker process): nothing changes
    worker_shutdown.escalate_sigterm(sig="SIGTERM", how="Warm")
    assert signal.getsignal(signal.SIGTERM) is before
    # SIGQUIT and SIGINT keep Celery's own escalation
    worker_shutdown.remember_worker(sender=SimpleNamespace(hostname="w@h"))
    worker_shutdown.escalate_sigterm(sig="SIGQUIT", how="Cold")
    worker_shutdown.escalate_sigterm(sig="SIGINT", how="Warm")
    assert signal.getsignal(signal.SIGTERM) is before
