"""CPU-heavy work for P5: the kind `bench.cpu` (platform) and the same loop for the thread pool."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind
from jobs.kinds.registry import register
from jobs.policy import Policy


def burn(seconds: float) -> int:
    """Hash in a loop for `seconds` of wall time, holding the GIL most of it; returns rounds."""
    deadline = time.perf_counter() + seconds
    rounds = 0
    block = b"x" * 64
    while time.perf_counter() < deadline:
        for _ in range(200):
            block = hashlib.sha256(block).digest()
        rounds += 1
    return rounds


class CpuPayload(serializers.Serializer):
    seconds = serializers.FloatField(min_value=0, max_value=10, default=0.1)


@register
class Cpu(Kind):
    """Burns `seconds` of CPU in the worker child."""

    name = "bench.cpu"
    payload_serializer = CpuPayload
    policy = Policy(max_attempts=1, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        return {"rounds": burn(payload["seconds"])}
