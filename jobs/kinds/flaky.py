"""`demo.flaky`: fails its first `fail_times` attempts with a retryable error, then succeeds.

A demo kind (up to 600 s of sleep, 10,000 planned failures a job): registered
with the fault kinds, only when settings.JOBS_FAULT_KINDS is true (off in
production).
"""

from __future__ import annotations

import time
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind, RetryableError
from jobs.policy import Policy


class FlakyPayload(serializers.Serializer):
    fail_times = serializers.IntegerField(min_value=0, max_value=10_000, default=1)
    sleep_seconds = serializers.FloatField(min_value=0, max_value=600, default=0)


class Flaky(Kind):
    name = "demo.flaky"
    payload_serializer = FlakyPayload
    policy = Policy(max_attempts=5, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        deadline = time.monotonic() + payload["sleep_seconds"]
        while time.monotonic() < deadline:
            ctx.raise_if_cancelled()
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        if ctx.attempt <= payload["fail_times"]:
            raise RetryableError(f"planned failure {ctx.attempt} of {payload['fail_times']}")
        return {"attempt": ctx.attempt}


DEMO_KINDS: tuple[type[Kind], ...] = (Flaky,)
