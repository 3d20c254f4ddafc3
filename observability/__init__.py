"""Telemetry of jobs and workers: memory, metrics, tracing.

`start(role)` is the one place each process role starts its telemetry.
"""

from __future__ import annotations

ROLES = ("web", "worker", "worker-child", "scheduler")


def start(role: str, *, hostname: str | None = None) -> None:
    """Start this process's telemetry for `role`; call it after fork, once per process.

    Roles and their call sites: "web" (gunicorn post_fork, each worker),
    "worker" (the Celery worker's main process, worker_ready; `hostname`
    is its node name), "worker-child" (each pool child,
    worker_process_init), "scheduler" (jobs_scheduler, after its metrics
    directory is activated). The tracer provider (observability.tracing;
    nothing is installed when no exporter is configured, so spans cost a
    no-op) is set up here; a child also gets its memory-dump handler. The
    jobs domain's series at 0 are jobs.telemetry.start's (it calls this).
    The worker's main process forks children for its whole life: it starts
    no exporter thread, its spans are exported by its children
    (docs/forking.md). Raises ValueError for an unknown role.
    """
    if role not in ROLES:
        raise ValueError(f"unknown telemetry role {role!r}; one of {', '.join(ROLES)}")
    from observability import span_spool, tracing  # noqa: PLC0415 - import cost: tracing pulls in OpenTelemetry; the package is imported before a role starts

    if role == "worker-child":
        from django.conf import settings  # noqa: PLC0415 - import cost: the package is imported before Django is set up

        from observability import dumps  # noqa: PLC0415 - import cost: dumps only in a worker child

        tracing.setup(role="worker", replay_from=span_spool.spool_dir())
        # After fork, so tracemalloc counts only this child's allocations.
        frames = settings.JOBS_TRACEMALLOC_FRAMES if settings.JOBS_TRACEMALLOC else 0
        dumps.install_child(tracemalloc_frames=frames)
        return
    if role == "worker":
        tracing.setup_spooled(role="worker", directory=span_spool.spool_dir())
    else:
        tracing.setup(role=role)
