"""`jobs.prune`: retention as a job, so a periodic schedule can run it (docs/retention.md).

Payload `{}`. Deletes what `manage.py jobs_prune` would (jobs.retention),
batch by batch, and stops cleanly before its soft time limit or when
cancelled: each batch committed on its own, so the next run carries on.
Its result is the counts per status. Safe to run twice at once: batches
skip the rows another run holds.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs import retention
from jobs.kinds.base import AttemptContext, Kind, PermanentError
from jobs.kinds.registry import register
from jobs.policy import Policy

# Seconds kept in hand before the soft limit: the longest batch measured is
# well under one (docs/retention.md).
MARGIN_SECONDS = 5.0


class PrunePayload(serializers.Serializer):
    """No fields: the ages are settings (JOBS_PRUNE_*), the same for every run."""


@register
class Prune(Kind):
    name = "jobs.prune"
    payload_serializer = PrunePayload
    # The hard limit stays within the worker's grace (210 s) less 30 s (jobs.shutdown_grace).
    policy = Policy(max_attempts=3, soft_time_limit=150, hard_time_limit=180)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        try:
            config = retention.Retention.from_settings()
        except retention.RetentionError as exc:
            raise PermanentError(str(exc)) from None
        result = retention.prune(
            retention=config,
            should_stop=lambda: ctx.cancelled or ctx.remaining() < MARGIN_SECONDS,
            # A rest never runs past the margin: the stop check after it must come in time.
            sleep=lambda seconds: ctx.cancel_event.wait(
                max(0.0, min(seconds, ctx.remaining() - MARGIN_SECONDS))
            ),
        )
        ctx.progress(1, 1, f"pruned {sum(result.jobs.values())} jobs")
        return result.as_dict()
