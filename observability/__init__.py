"""Telemetry of jobs and workers: memory, metrics, tracing."""
