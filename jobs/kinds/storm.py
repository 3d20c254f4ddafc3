"""`demo.storm`: the incident's job, for `manage.py jobs_storm` (the retry-storm drill).

Each attempt allocates a buffer of `buffer_bytes` (every page touched, so it
is resident) and calls a "dependency" that hangs for its first `fail_times`
attempts, so those attempts end by timeout (the soft time limit). With
`leave_thread` the call runs in a helper thread holding the buffer, as the
incident's code did; the helper stops when the attempt's cancellation flag is
set (the platform sets it at the soft limit), otherwise after
`thread_seconds`. Stock Celery has no such flag: the same helper in
bench/stock_tasks.py runs out its `thread_seconds` after its attempt is gone.

Registered with the other fault kinds (JOBS_FAULT_KINDS).
"""

from __future__ import annotations

import threading
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind
from jobs.policy import Policy

PAGE_BYTES = 4096
MAX_BUFFER_BYTES = 1024**3


def touched_buffer(size: int) -> bytearray:
    """A bytearray of `size` bytes with one byte written per 4 KiB page, so all of it is resident."""
    buffer = bytearray(size)
    buffer[::PAGE_BYTES] = b"\x01" * len(range(0, size, PAGE_BYTES))
    return buffer


class StormPayload(serializers.Serializer):
    fail_times = serializers.IntegerField(min_value=0, max_value=100, default=3)
    buffer_bytes = serializers.IntegerField(min_value=0, max_value=MAX_BUFFER_BYTES, default=0)
    leave_thread = serializers.BooleanField(default=False)
    thread_seconds = serializers.FloatField(min_value=0, max_value=3600, default=30.0)


class Storm(Kind):
    """Times out on its first `fail_times` attempts holding `buffer_bytes`, then succeeds.

    A hanging call waits on the cancellation flag (at most `thread_seconds`
    in a helper thread; in the attempt's own thread, until the flag), so
    the attempt ends `soft_timeout` at the kind's soft limit.
    """

    name = "demo.storm"
    payload_serializer = StormPayload
    policy = Policy(
        max_attempts=6, soft_time_limit=1.0, hard_time_limit=10.0, backoff_base=0.5, backoff_cap=4.0
    )

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        buffer = touched_buffer(payload["buffer_bytes"])
        hangs = ctx.attempt <= payload["fail_times"]
        if payload["leave_thread"]:
            done = threading.Event()

            def call(held: bytearray = buffer) -> None:
                if hangs:
                    ctx.cancel_event.wait(payload["thread_seconds"])
                done.set()

            helper = threading.Thread(target=call, name=f"demo-storm-{ctx.job_id}", daemon=True)
            helper.start()
            while not done.wait(0.05):
                if ctx.cancelled:
                    # The flag reached the helper too; give it a moment to return.
                    helper.join(timeout=1.0)
                    break
        elif hangs:
            ctx.cancel_event.wait()
        ctx.raise_if_cancelled()
        return {"attempt": ctx.attempt, "buffer_bytes": len(buffer)}


STORM_KINDS: tuple[type[Kind], ...] = (Storm,)
