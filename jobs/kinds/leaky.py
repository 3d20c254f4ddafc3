"""`demo.leak_thread`: starts a helper thread per attempt and, unless told to, never joins it.

A fault-injection kind for the leak checks (jobs.runner, observability.memory):
with `join` false the thread outlives the attempt (flagged as a thread
leak); with `join` true it is joined before the attempt returns (not
flagged). Registered with the other fault kinds (JOBS_FAULT_KINDS).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind
from jobs.policy import Policy


class LeakThreadPayload(serializers.Serializer):
    join = serializers.BooleanField(default=False)
    seconds = serializers.FloatField(min_value=0, max_value=600, default=5.0)


class LeakThread(Kind):
    """Starts one thread sleeping `seconds`; joins it only when `join` is true.

    The thread is a daemon, so a leaked one never keeps its child from exiting.
    """

    name = "demo.leak_thread"
    payload_serializer = LeakThreadPayload
    policy = Policy(max_attempts=1, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        thread = threading.Thread(
            target=time.sleep,
            args=(payload["seconds"],),
            name=f"demo-leak-{ctx.job_id}",
            daemon=True,
        )
        thread.start()
        if payload["join"]:
            thread.join()
        return {"joined": payload["join"], "thread_alive": thread.is_alive()}


LEAK_KINDS: tuple[type[Kind], ...] = (LeakThread,)
