"""The contract every job kind follows.

A kind is plain code: a payload schema (a DRF serializer), a Policy, a default
queue and `run(payload, ctx)`. It never touches Celery. It signals failures by
raising RetryableError (try again, optionally not before `retry_after`
seconds) or PermanentError (dead-letter now); any other exception is retried
when the kind's policy says so. Error text is redacted by the platform
(`secret_values`, jobs.redaction), so a kind may name its URL in an error.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rest_framework import serializers

from jobs import redaction
from jobs.policy import Policy


class JobError(Exception):
    """Base of the errors a kind raises on purpose."""


class RetryableError(JobError):
    """A transient failure. `retry_after` (seconds) is the least delay before the next attempt."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PermanentError(JobError):
    """A failure that no retry can fix (bad input, 4xx from a receiver): dead-letter now."""


class Cancelled(JobError):
    """Raised by `AttemptContext.raise_if_cancelled` when the job was cancelled."""


@dataclass(frozen=True)
class AttemptContext:
    """What a running attempt may know about itself.

    `soft_deadline` and `hard_deadline` are time.monotonic() readings
    (seconds): a step of the host's wall clock moves no deadline. Past the
    soft one the attempt is recorded `soft_timeout` whatever it returns, past
    the hard one the child is killed. `cancel_event` is set when the job is
    cancelled or the soft limit fires, and when the attempt ends however it
    ended; long loops should poll `cancelled`, helper threads wait on it.
    """

    job_id: uuid.UUID
    kind: str
    attempt: int
    max_attempts: int
    soft_deadline: float
    hard_deadline: float
    cancel_event: threading.Event = field(default_factory=threading.Event, compare=False)
    # Where `progress` reports go (jobs.progress.ProgressReporter); None: nowhere.
    progress_sink: Callable[[float, float | None, str], None] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def remaining(self) -> float:
        """Seconds left before the soft time limit (never negative)."""
        return max(0.0, self.soft_deadline - time.monotonic())

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report `done` units of work of `total` (None: unknown) and a short `message`.

        Cheap to call often: the platform keeps the latest report and writes
        it at most every JOBS_PROGRESS_INTERVAL seconds (and at once when
        `done` reaches `total`), to the job's row (the API's `progress`, the
        admin), Flower (state PROGRESS) and the jobs_attempt_progress_ratio
        gauge. Never raises for a report it cannot write; a negative or
        non-finite `done`, or a `total` not above 0, is ignored.
        """
        if self.progress_sink is not None:
            self.progress_sink(done, total, message)

    def raise_if_cancelled(self) -> None:
        """Raise Cancelled when the cancellation flag is set."""
        if self.cancel_event.is_set():
            raise Cancelled(f"job {self.job_id} attempt {self.attempt} was cancelled")


class Kind:
    """Base class of job kinds. Subclasses set the class attributes and `run`."""

    name: ClassVar[str]
    payload_serializer: ClassVar[type[serializers.Serializer]]
    policy: ClassVar[Policy] = Policy()
    queue: ClassVar[str] = "default"

    def validate_payload(self, payload: Any) -> dict[str, Any]:
        """Validated, normalised payload.

        Raises rest_framework.exceptions.ValidationError naming each bad field.
        """
        if not isinstance(payload, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        serializer = self.payload_serializer(data=payload)
        serializer.is_valid(raise_exception=True)
        unknown = sorted(set(payload) - set(serializer.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return dict(serializer.validated_data)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        """Do the work once; return a JSON-serialisable result. Raise to fail."""
        raise NotImplementedError

    def secret_values(self, payload: dict[str, Any]) -> frozenset[str]:
        """Strings of `payload` that must never appear in an attempt's error text.

        The platform also redacts every URL's credentials and query string
        (jobs.redaction); by default this adds what those look like in other
        forms and every value of a `headers` map. Override to add more.
        """
        return redaction.payload_secrets(payload)
