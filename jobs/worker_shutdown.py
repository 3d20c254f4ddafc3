"""A second SIGTERM to a worker is a cold shutdown, as a second Ctrl-C is.

Celery's first SIGTERM starts a warm shutdown: no new message is taken and
running attempts finish (each bounded by its hard time limit). Celery keeps
that handler for every later SIGTERM, so an init system or an operator that
sends SIGTERM again (the usual "stop, and mean it") waits as long as the
first one. Here the first SIGTERM's warm shutdown installs Celery's own cold
shutdown handler for SIGTERM (what SIGQUIT runs: running attempts cancelled
at once, recorded as interrupted, their messages left for redelivery), and
a third SIGTERM then does what a second SIGQUIT does. SIGQUIT and SIGINT
keep Celery's handling. See docs/shutdown.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import signals
from celery.apps import worker as celery_worker

logger = logging.getLogger(__name__)

# celery/apps/worker.py's handler installers (not in celery-types' stubs);
# tests/unit/test_worker_shutdown.py fails if Celery renames them.
install_handler: Callable[..., None] = celery_worker.install_worker_term_hard_handler  # type: ignore[attr-defined]
during_soft_shutdown: Callable[..., None] = celery_worker.during_soft_shutdown  # type: ignore[attr-defined]

_worker: dict[str, Any] = {"instance": None}


@signals.worker_init.connect
def remember_worker(sender: Any = None, **_: Any) -> None:
    # The WorkController whose signal handlers are replaced below (main process).
    _worker["instance"] = sender


@signals.worker_shutting_down.connect
def escalate_sigterm(sig: str = "", how: str = "", **_: Any) -> None:
    """Run inside Celery's SIGTERM handler: the next SIGTERM escalates one step."""
    worker = _worker["instance"]
    if worker is None or sig != "SIGTERM":
        return
    if how == "Warm":
        # celery/apps/worker.py: the handler SIGQUIT has (on_cold_shutdown).
        install_handler(worker, sig="SIGTERM")
        logger.info("warm shutdown: a second SIGTERM cancels running attempts (cold shutdown)")
    elif how == "Cold":
        # What SIGQUIT gets once a cold shutdown is under way.
        install_handler(worker, sig="SIGTERM", callback=during_soft_shutdown)
