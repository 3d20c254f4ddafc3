"""Telemetry of the jobs domain: receivers that turn jobs' events into metrics and spans.

observability holds the generic machinery (the metric catalogue, tracing,
multiprocess files, exporters) and imports nothing from jobs; this package
connects the two. Its receiver modules are imported (so connected) by
JobsConfig.ready() in every process (web, worker main and children,
scheduler):

- worker_events: the worker's lifecycle (Celery signals) and its children's
  recycles, lost children, memory limits;
- celery_events: celery-exporter's task-sent and task-received counters;
- job_events: the jobs.events domain events (submitted, attempts, completed, ...).

`process.start(role)` is what each process role calls after fork.
Importing this package imports nothing (config.celery_app imports
jobs.telemetry.worker_info before Django is set up).
"""
