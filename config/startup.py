"""Refuse to start a process whose configuration fails an Error-level system check.

Django runs its system checks for `manage.py` commands only: gunicorn and
the Celery worker would take requests and messages with settings that
contradict each other (Celery's Django fixup runs the checks and ignores
the result). Each long-running process calls `refuse_on_check_errors`
before it takes any work: the web from gunicorn's `on_starting` (master,
before binding or forking), the worker from `celeryd_init` (before its pool
forks or a message is consumed), the scheduler first thing in its command.
https://docs.djangoproject.com/en/5.2/topics/checks/
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

# sysexits.h: "configuration error". Not 1, so a supervisor (or a person)
# can tell a refusal from a crash and need not restart in a loop.
EX_CONFIG = 78


# Checks of what only the web serves: running the URL checks imports the
# URL conf, hence every view, the admin and the OpenAPI generator (~4 MB in
# each worker child, inherited at fork), for nothing the process uses.
WEB_ONLY_TAGS = frozenset({"urls"})


def check_errors(*, web: bool = True) -> list[CheckMessage]:
    """Error-level (and Critical) system check messages that are not silenced.

    Needs Django set up. Runs every registered check except the database
    and deployment ones, as `manage.py` commands do by default; with
    `web=False` (worker, scheduler) also without WEB_ONLY_TAGS.
    """
    from django.core import checks  # noqa: PLC0415 - config.celery_app imports this module before Django is set up

    if web:
        messages = checks.run_checks()
    else:
        # run_checks(tags=...) would also drop the untagged checks (ours among them).
        messages = []
        for check in checks.registry.registry.get_checks():
            if not WEB_ONLY_TAGS & set(getattr(check, "tags", ())):
                messages.extend(check(app_configs=None, databases=None))
    return [m for m in messages if m.level >= checks.ERROR and not m.is_silenced()]


def refusal_line(process: str, errors: Sequence[CheckMessage]) -> str:
    """One line naming the process, the first error (id, message, hint) and how many follow."""
    first = errors[0]
    text = f"{process} refused to start: {first.id}: {first.msg}"
    if first.hint:
        text += f" (hint: {first.hint})"
    if len(errors) > 1:
        ids = ", ".join(sorted({str(e.id) for e in errors[1:]}))
        text += f"; {len(errors) - 1} more ({ids}): `python manage.py check` lists them all"
    # One line whatever a message holds: newlines and runs of spaces collapse.
    return " ".join(text.split())


def refuse_on_check_errors(process: str) -> None:
    """Exit with EX_CONFIG and one line on stderr when a system check reports an error.

    `process` names the caller in that line ("web", "worker", "scheduler").
    Sets Django up if it is not yet. Returns None when the configuration
    passes; raises SystemExit(EX_CONFIG) otherwise.
    """
    import django  # noqa: PLC0415 - config.celery_app imports this module before Django is set up
    from django.apps import apps  # noqa: PLC0415 - config.celery_app imports this module before Django is set up

    if not apps.ready:
        django.setup()
    errors = check_errors(web=process == "web")
    if errors:
        sys.stderr.write(refusal_line(process, errors) + "\n")
        sys.stderr.flush()
        raise SystemExit(EX_CONFIG)


# The worker main process's ballast (JOBS_WORKER_BALLAST_BYTES), kept alive
# for the process's lifetime so every child inherits it.
_ballast: list[object] = []


def prepare_worker_memory(*, nodename: str, limit_bytes: int) -> None:
    """Set up the per-child memory limit in the worker's main process, before its pool forks.

    Allocates the test ballast (JOBS_WORKER_BALLAST_BYTES), makes billiard's
    after-task check read owned memory (jobs.memory_guard), and refuses to
    start, with EX_CONFIG and one line (jobs.E005), when `limit_bytes` (the
    per-child limit; 0 is none) is at or below what a fresh child already
    owns once started: every child would be replaced after every attempt.
    """
    from django.conf import settings  # noqa: PLC0415 - config.celery_app imports this module before Django is set up

    from jobs import memory_startup  # noqa: PLC0415 - config.celery_app imports this module before Django is set up
    from jobs.memory_guard import mib  # noqa: PLC0415 - config.celery_app imports this module before Django is set up
    from observability.memory import rss_bytes  # noqa: PLC0415 - config.celery_app imports this module before Django is set up
    from observability.task_events import host_of  # noqa: PLC0415 - config.celery_app imports this module before Django is set up

    if settings.JOBS_WORKER_BALLAST_BYTES and not _ballast:
        _ballast.append(memory_startup.allocate_ballast(settings.JOBS_WORKER_BALLAST_BYTES))
    memory_startup.install_recycle_measure(hostname=host_of(nodename), limit_kb=limit_bytes // 1024)
    if not limit_bytes:
        return
    fresh = memory_startup.fresh_child_owned_bytes()
    if fresh is None or limit_bytes > fresh:
        return
    from django.core.checks import Error  # noqa: PLC0415 - config.celery_app imports this module before Django is set up

    error = Error(
        f"the per-child memory limit JOBS_WORKER_MAX_MEMORY_PER_CHILD_BYTES is {limit_bytes} "
        f"({mib(limit_bytes)}), at or below the {mib(fresh)} a fresh child of this worker "
        f"already owns once started (measured on a probe child; the main process's "
        f"{mib(rss_bytes() or 0)} of RSS is shared with children and not charged to them): "
        "every child would be replaced after every attempt",
        hint=f"set it well above {mib(fresh)} plus what one attempt needs, or 0 for no limit",
        id="jobs.E005",
    )
    sys.stderr.write(refusal_line("worker", [error]) + "\n")
    sys.stderr.flush()
    raise SystemExit(EX_CONFIG)
