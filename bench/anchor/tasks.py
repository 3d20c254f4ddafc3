"""The anchor's tasks: a no-op (P1, P2, memory) and one that fails every attempt (the storm)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="anchor.noop")
def noop(submission_id: int | None = None) -> None:
    """Does nothing; its result (None) is stored by django-celery-results."""


@shared_task(
    name="anchor.fail",
    autoretry_for=(RuntimeError,),
    retry_kwargs={"max_retries": 2, "countdown": 0},
)
def fail() -> None:
    """Fails every attempt; `autoretry_for` retries at once: 3 attempts, as the platform's storm."""
    raise RuntimeError("planned failure")
