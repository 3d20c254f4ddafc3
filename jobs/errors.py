"""Domain errors raised by services; the API and commands translate them."""

from __future__ import annotations


class JobsError(Exception):
    """Base of service errors. `field` names the input at fault, when one is."""

    field: str | None = None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        if field is not None:
            self.field = field


class InvalidSubmission(JobsError):
    """The submission is malformed. `errors` maps field paths to reasons."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


class IdempotencyConflict(JobsError):
    """The idempotency key was used before with a different request."""

    field = "idempotency_key"


class QueueFull(JobsError):
    """The target queue holds its maximum of ready jobs. Retry after `retry_after` seconds."""

    field = "queue"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidTransition(JobsError):
    """The job's current status does not allow the requested change."""

    field = "status"


class JobNotFound(JobsError):
    """No job with that id that the caller may see (jobs.ownership): the same for both."""

    field = "path"

    def __init__(self, message: str = "No job with that id.") -> None:
        super().__init__(message)


class ActionNotPermitted(JobsError):
    """The caller sees the job but may not change it (staff without `jobs.change_job`)."""

    field = "Authorization"


class PauseNotFound(JobNotFound):
    """Resuming a kind or queue that is not paused (404)."""

    field = "name"
