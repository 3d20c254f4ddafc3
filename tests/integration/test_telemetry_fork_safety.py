"""No worker child wedges when spans are exported over OTLP while children are recycled.

Issue 19, item 1: with OTEL_EXPORTER_OTLP_ENDPOINT set, a replacement
child was forked while a thread of the worker's main process (its span
exporter, on its first export) held the import lock of `netrc`; every HTTP
attempt of that child then hung to its soft limit and a webhook to a
healthy receiver ended dead. Here: a slow real OTLP/HTTP receiver, a child
recycled every 3 tasks, mixed kinds (webhooks to a healthy receiver,
retries, hard time limits and lost children, whose spans the main process
records), and a shim that makes a thread's first import of `netrc` in the
worker's main process take 3 s (tests/integration/slow_thread_import), so
a fork beside such a thread happens in every run. Expected: no attempt of
a healthy webhook ends by a time limit, none ends dead, the spans of
attempts the main process ended are exported (by its children), and no
thread outside the fork gate runs beside a fork (docs/forking.md).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from devstack.otlp_receiver import SlowOtlpReceiver
from devstack.receiver import WebhookReceiver
from devstack.services import wait_for
from tests.integration.harness import Platform
from tests.integration.telemetry import covers, scrape
from tests.integration.test_failure_semantics import attempts, jobs, wait_all_terminal

SHIM = Path(__file__).with_name("slow_thread_import")
WEBHOOK_LIMITS = {"soft_time_limit": 10, "hard_time_limit": 15}
HARD_LIMITED = {"max_attempts": 2, "soft_time_limit": 1, "hard_time_limit": 2}
FAST_RETRY = {"backoff_base": 0.2, "backoff_floor": 0.1, "backoff_cap": 0.5}
UNGATED = "not under jobs.fork_gate"


def fork_safety_platform(
    factory: Callable[..., Platform], receiver: SlowOtlpReceiver, *, concurrency: int = 2
) -> Platform:
    return factory(
        "fork_safety",
        env={
            "OTEL_SDK_DISABLED": "false",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SHIM), os.environ.get("PYTHONPATH")])),
            "JOBS_WORKER_MAX_TASKS_PER_CHILD": "3",
            "JOBS_POISON_AFTER": "2",
            "JOBS_KIND_OVERRIDES": json.dumps(
                {
                    "webhook.deliver": WEBHOOK_LIMITS,
                    "demo.sleep": HARD_LIMITED,
                    "demo.flaky": FAST_RETRY,
                }
            ),
        },
        worker_concurrency=concurrency,
    )


@pytest.mark.integration
@pytest.mark.timeout(600)
@covers("jobs_worker_child_attempts_total")
@pytest.mark.slow
def test_recycling_children_beside_a_slow_otlp_exporter_wedges_none(
    platform_factory: Callable[..., Platform],
) -> None:
    # given a worker exporting spans to a slow OTLP receiver (1 s per export),
    # its children recycled every 3 tasks
    with SlowOtlpReceiver(delay=1.0) as otlp, WebhookReceiver() as hooks:
        platform = fork_safety_platform(platform_factory, otlp)
        worker = platform.worker
        assert worker is not None

        # when mixed kinds run: webhooks to a healthy receiver, flaky jobs that
        # retry, jobs the main process ends (hard time limits, lost children)
        # and short sleeps, interleaved
        webhooks, others = [], []
        for i in range(60):
            webhooks.append(platform.submit("webhook.deliver", {"url": hooks.url("/ok")}))
            if i % 3 == 0:
                others.append(platform.submit("demo.flaky", {"fail_times": 1}))
            if i % 3 == 1:
                others.append(platform.submit("demo.sleep", {"seconds": 0.2}))
            if i % 15 == 2:
                others.append(platform.submit("demo.sleep", {"seconds": 30, "mode": "unkillable"}))
            if i % 15 == 9:
                others.append(platform.submit("demo.crash", {"signal": "SIGKILL"}))
        total = len(webhooks) + len(others)
        counts = wait_all_terminal(platform, total, timeout=420)
        rows = attempts(platform)
        samples = scrape(platform.worker_metrics_url)
        recycled = samples.total("jobs_worker_children_recycled_total")
        log = worker.log()

        # then every webhook was delivered, each by one attempt: no child wedged
        hook_rows = [a for a in rows if a["job_id"] in set(webhooks)]
        statuses = Counter(j["status"] for j in jobs(platform) if j["id"] in set(webhooks))
        outcomes = Counter(a["outcome"] for a in hook_rows)
        print(
            f"fork safety: {total} jobs {counts}; webhooks {dict(statuses)}, attempts"
            f" {dict(outcomes)}; children recycled {recycled:.0f}"
            f" ({ {dict(k)['reason']: v for k, v in samples.series('jobs_worker_children_recycled_total').items() if v} });"
            f" OTLP requests {otlp.requests}, attempt spans {len(otlp.attempt_spans())}"
        )
        assert statuses == {"succeeded": len(webhooks)}, (statuses, platform.log_tails())
        assert outcomes == {"succeeded": len(webhooks)}, hook_rows
        assert {d.job_id for d in hooks.deliveries} == set(webhooks)
        # and the children were replaced many times meanwhile
        assert recycled >= 20, recycled
        # and no thread ran beside a fork outside the fork gate, none made it wait past its limit
        assert UNGATED not in log, [line for line in log.splitlines() if UNGATED in line]
        assert "with sections still running" not in log
        # and the gunicorn master, which forks web workers, runs its main thread alone
        assert platform.web is not None
        assert len(os.listdir(f"/proc/{platform.web.pid}/task")) == 1

        # and the spans of the attempts the main process ended (hard limits,
        # lost children) reached the receiver, exported by children
        ended_outside = {
            (a["job_id"], a["number"])
            for a in rows
            if a["outcome"] in ("hard_timeout", "worker_lost") and a["finished"] is not None
        }
        assert ended_outside, rows

        def missing_outside_spans() -> set[tuple[str, int]]:
            got = {
                (s.attributes.get("job.id"), int(s.attributes.get("job.attempt", 0)))
                for s in otlp.attempt_spans()
                if s.attributes.get("job.outcome") in ("hard_timeout", "worker_lost")
            }
            return ended_outside - got

        try:
            wait_for(
                lambda: not missing_outside_spans(), timeout=60, interval=0.5, what="their spans"
            )
        except TimeoutError:
            spool = sorted(p.name for p in Path(platform.stack.env["JOBS_METRICS_DIR"]).rglob("*"))
            raise AssertionError(
                f"spans of {len(missing_outside_spans())} of {len(ended_outside)} attempts ended"
                f" outside their child never arrived: {missing_outside_spans()}; files {spool}"
            ) from None
        main_pid = worker.pid
        senders = {
            s.pid
            for s in otlp.attempt_spans()
            if s.attributes.get("job.outcome") in ("hard_timeout", "worker_lost")
        }
        assert main_pid not in senders, senders

        # and each pool place counts the attempts its children ended, by kind
        by_child = {
            dict(labels)["child"]: value
            for labels, value in samples.series("jobs_worker_child_attempts_total").items()
            if dict(labels)["kind"] == "webhook.deliver" and dict(labels)["outcome"] == "succeeded"
        }
        assert set(by_child) == {"0", "1"}, by_child
        assert sum(by_child.values()) == len(webhooks), by_child
