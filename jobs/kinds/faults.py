"""Fault-injection kinds for demos, storm drills and tests (`demo.sleep`, `demo.crash`).

Registered only when settings.JOBS_FAULT_KINDS is true (off in production).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from rest_framework import serializers

from jobs.kinds.base import AttemptContext, Kind
from jobs.policy import Policy

SLEEP_MODES = ("cooperative", "swallow", "unkillable")


class SleepPayload(serializers.Serializer):
    seconds = serializers.FloatField(min_value=0, max_value=3600)
    step_seconds = serializers.FloatField(min_value=0.01, max_value=60, default=1.0)
    mode = serializers.ChoiceField(choices=SLEEP_MODES, default="cooperative")


class Sleep(Kind):
    """Sleeps `seconds` in steps.

    mode "cooperative" stops when the cancellation flag is set; "swallow"
    wraps each step in `try/except Exception: continue` (swallows soft time
    limits); "unkillable" swallows every BaseException, so only the hard
    time limit ends it.
    """

    name = "demo.sleep"
    payload_serializer = SleepPayload
    policy = Policy(max_attempts=3, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        end = time.monotonic() + payload["seconds"]
        step = payload["step_seconds"]
        mode = payload["mode"]
        while (left := end - time.monotonic()) > 0:
            if mode == "cooperative":
                ctx.raise_if_cancelled()
                time.sleep(min(step, left))
            elif mode == "swallow":
                try:
                    time.sleep(min(step, left))
                except Exception:  # noqa: S112 - swallowing is the point of this kind
                    continue
            else:
                try:
                    time.sleep(min(step, left))
                except BaseException:  # noqa: B036 - so is this
                    continue
        return {"slept_seconds": payload["seconds"]}


class CrashPayload(serializers.Serializer):
    signal = serializers.ChoiceField(
        choices=["SIGKILL", "SIGSEGV", "SIGABRT", "SIGTERM"], default="SIGKILL"
    )
    after_seconds = serializers.FloatField(min_value=0, max_value=60, default=0)


class Crash(Kind):
    """Kills its own worker child with `signal` after `after_seconds`: a poison message."""

    name = "demo.crash"
    payload_serializer = CrashPayload
    policy = Policy(max_attempts=10, soft_time_limit=30, hard_time_limit=45)

    def run(self, payload: dict[str, Any], ctx: AttemptContext) -> Any:
        time.sleep(payload["after_seconds"])
        os.kill(os.getpid(), getattr(signal, payload["signal"]))
        time.sleep(5)  # not reached for fatal signals
        return None


FAULT_KINDS: tuple[type[Kind], ...] = (Sleep, Crash)
