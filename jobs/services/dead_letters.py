"""Jobs whose message the broker dropped past its delivery limit end `dead` (reason delivery_limit).

Only RabbitMQ keeps a delivery limit (x-delivery-limit, set above our own
poison bound, JOBS_POISON_AFTER): its drops go to the dead-letter queue,
which the scheduler drains through the broker port. A drop ends the job
only while the job still waits for that very attempt (queued, its next
attempt the message's); anything that moved it on since (a start, a
requeue, a republish that already ran) wins.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from jobs import engine
from jobs.brokers.port import DeadLetter
from jobs.engine.values import JobRef

logger = logging.getLogger(__name__)


def dead_letters_record(*, letters: Iterable[DeadLetter]) -> int:
    """End each letter's job `dead` (reason delivery_limit) if it still waits for that attempt.

    Returns how many jobs ended. Foreign messages (no job id) are logged and
    skipped. Raises the database's errors.
    """
    ended = 0
    for letter in letters:
        if not letter.job_id:
            logger.warning("dead-lettered message without a job id dropped")
            continue
        job = engine.current().drop(JobRef(uuid.UUID(letter.job_id)), attempt=letter.attempt)
        if job is None:
            continue
        ended += 1
        logger.warning(
            "job dead job_id=%s kind=%s attempt=%s reason=delivery_limit: the broker dropped "
            "its message past x-delivery-limit",
            job.id,
            job.kind,
            letter.attempt,
        )
    return ended
