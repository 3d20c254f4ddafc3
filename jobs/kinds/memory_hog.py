"""`demo.allocate`: allocates memory in steps, optionally keeping it after the attempt (a leak).

A fault-injection kind for the memory guard (jobs.memory_guard): `bytes` are
allocated `chunk_bytes` at a time, each chunk written so it is resident,
and held until the attempt ends; with `keep` true they stay referenced by
the module after it (a per-attempt leak the per-child limit must recycle).
With `heed_cancel` (the default) it stops on its cancellation flag (the soft
memory limit); without, only the hard limit (or AttemptAbort) stops it.
Registered with the other fault kinds (JOBS_FAULT_KINDS).
"""

from __future__ import annotations

import time
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind
from jobs.policy import Policy

MIB = 1024 * 1024
# What `keep` leaks, across attempts of this child.
_kept: list[bytes] = []


class AllocatePayload(serializers.Serializer):
    bytes = serializers.IntegerField(min_value=0, max_value=64 * 1024 * MIB)
    chunk_bytes = serializers.IntegerField(min_value=4096, max_value=1024 * MIB, default=8 * MIB)
    keep = serializers.BooleanField(default=False)
    hold_seconds = serializers.FloatField(min_value=0, max_value=60, default=0)
    heed_cancel = serializers.BooleanField(default=True)


class Allocate(Kind):
    """Allocates and touches `bytes` in `chunk_bytes` steps; returns how much it held."""

    name = "demo.allocate"
    payload_serializer = AllocatePayload
    policy = Policy(max_attempts=3, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        held: list[bytes] = []
        total, chunk = payload["bytes"], payload["chunk_bytes"]
        check = ctx.raise_if_cancelled if payload["heed_cancel"] else lambda: None
        while sum(map(len, held)) < total:
            check()
            held.append(b"\x01" * min(chunk, total - sum(map(len, held))))
        end = time.monotonic() + payload["hold_seconds"]
        while time.monotonic() < end:
            check()
            time.sleep(0.01)
        if payload["keep"]:
            _kept.extend(held)
        return {"allocated_bytes": sum(map(len, held))}


MEMORY_KINDS: tuple[type[Kind], ...] = (Allocate,)
