"""`byow.work`: the fresh app's kind. Fails transiently, sleeps or ignores its cancel flag on request."""

from __future__ import annotations

import time
from typing import Any

from rest_framework import serializers

from jobs.kinds import AttemptContext, Kind, RetryableError, register
from jobs.policy import Policy


class WorkPayload(serializers.Serializer):
    fail_times = serializers.IntegerField(min_value=0, max_value=100, default=0)
    sleep_seconds = serializers.FloatField(min_value=0, max_value=60, default=0)
    # True: keep sleeping past the soft limit (only the hard limit stops it).
    ignore_cancel = serializers.BooleanField(default=False)


@register
class Work(Kind):
    name = "byow.work"
    payload_serializer = WorkPayload
    policy = Policy(
        max_attempts=3,
        soft_time_limit=2,
        hard_time_limit=4,
        backoff_base=0.3,
        backoff_floor=0.2,
        backoff_cap=1.0,
    )

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        deadline = time.monotonic() + payload["sleep_seconds"]
        while time.monotonic() < deadline:
            try:
                if not payload["ignore_cancel"]:
                    ctx.raise_if_cancelled()
                time.sleep(0.05)
            except BaseException:  # noqa: B036 - the soft limit and the abort too: only the hard limit ends it
                if not payload["ignore_cancel"]:
                    raise
        if ctx.attempt <= payload["fail_times"]:
            raise RetryableError(f"transient failure {ctx.attempt} of {payload['fail_times']}")
        return {"attempt": ctx.attempt}
