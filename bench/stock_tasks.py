"""The baseline: a plain Celery task retried the stock way (an ETA message held by the worker).

Loaded into the benchmark's worker with `celery -A config worker -I bench.stock_tasks`.
"""

from celery import shared_task


@shared_task(name="bench.stock_noop", acks_late=True)
def stock_noop() -> None:
    """Does nothing; only its waiting matters."""
