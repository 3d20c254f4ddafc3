"""Concurrency limits (issue 24 item 1), on one host with real worker processes: never more
live attempts than the kind's (key's) limit, sampled from the database every 50 ms, and every
job succeeds.

Real PostgreSQL, Redis, gunicorn, the scheduler (tick 0.1 s, harness.BASE_ENV) and 2 workers
of 4 children each: 8 children compete for 3 slots (or one per key), so most deliveries are
held in the database and handed a slot when an attempt ends (the leader's pass the
safety net). About 30-40 s each: in the slow tier.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from devstack.services import wait_for
from tests.integration.concurrency_sampling import Sampler, live_sql, slot_gaps
from tests.integration.harness import Platform

LIMIT = 3
JOBS = 60
# demo.flaky's payload has no account field: its sleep_seconds stands in for one (each
# "account" a distinct value), so no kind is added for the test.
ACCOUNTS = [0.2, 0.21, 0.22, 0.23]
PER_ACCOUNT = 5


def _platform(
    factory: Callable[..., Platform], name: str, overrides: dict[str, object]
) -> Platform:
    platform = factory(name, env={"JOBS_KIND_OVERRIDES": json.dumps(overrides)}, worker=False)
    for n in range(2):
        platform.stack.start_worker(concurrency=4, timeout=120, log_name=f"worker{n}")
    return platform


def _drain(platform: Platform, kind: str, total: int) -> None:
    try:
        wait_for(
            lambda: (
                platform.scalar(
                    "SELECT count(*) FROM jobs_job WHERE kind = %s AND status = 'succeeded'",
                    (kind,),
                )
                == total
            ),
            timeout=120,
            interval=0.2,
            what=f"{total} {kind} succeeded",
        )
    except TimeoutError as exc:
        rows = platform.rows("SELECT status, waiting_reason, count(*) FROM jobs_job GROUP BY 1, 2")
        raise AssertionError(f"{exc}: {rows}\n{platform.log_tails()}") from None


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_concurrency_limit_holds_across_workers(
    platform_factory: Callable[..., Platform],
) -> None:
    # given demo.sleep limited to 3 live attempts, and 2 workers of 4 children each
    platform = _platform(platform_factory, "conc", {"demo.sleep": {"concurrency": LIMIT}})

    # when 60 jobs of 0.3 s are submitted at once
    with Sampler(platform, live_sql("demo.sleep", "j.kind")) as sampler:
        began = time.time()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(
                pool.map(
                    lambda _: platform.submit("demo.sleep", {"seconds": 0.3, "step_seconds": 0.05}),
                    range(JOBS),
                )
            )
        _drain(platform, "demo.sleep", JOBS)
        took = time.time() - began

    # then never more than 3 ran at once, and every job succeeded with one attempt
    held = platform.scalar(
        "SELECT count(*) FROM jobs_job WHERE kind = 'demo.sleep' AND deliveries > 1"
    )
    attempts = platform.scalar("SELECT count(*) FROM jobs_attempt")
    gaps = slot_gaps(platform, "demo.sleep", LIMIT)
    print(
        f"concurrency={LIMIT}: {JOBS} jobs of 0.3 s on 2 workers x 4 children done in "
        f"{took:.1f} s ({JOBS / took:.2f} jobs/s, ideal {LIMIT / 0.3:.0f}); peak live "
        f"{sampler.peak} in {sampler.samples} samples; {held} jobs held at least once; "
        f"{attempts} attempts; freed slot idle {gaps}"
    )
    assert sampler.samples > 20
    assert 1 <= sampler.peak <= LIMIT
    assert attempts == JOBS


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_concurrency_key_one_live_attempt_per_account(
    platform_factory: Callable[..., Platform],
) -> None:
    # given demo.flaky limited to one live attempt per "account" (payload sleep_seconds)
    platform = _platform(
        platform_factory,
        "conckey",
        {"demo.flaky": {"concurrency": 1, "concurrency_key": "sleep_seconds"}},
    )
    payloads = [
        {"fail_times": 0, "sleep_seconds": account}
        for _ in range(PER_ACCOUNT)
        for account in ACCOUNTS
    ]

    # when 4 accounts x 5 jobs are submitted (in order, one account after another)
    with Sampler(platform, live_sql("demo.flaky", "j.payload->>'sleep_seconds'")) as sampler:
        began = time.time()
        for payload in payloads:
            platform.submit("demo.flaky", payload)
        _drain(platform, "demo.flaky", len(payloads))
        took = time.time() - began
        live_accounts = platform.scalar(
            "SELECT count(DISTINCT j.payload->>'sleep_seconds') FROM jobs_job j"
        )

    # then never two live attempts for one account, and every job succeeded
    inversions = platform.scalar(
        "SELECT count(*) FROM jobs_job x JOIN jobs_job y"
        " ON x.payload->>'sleep_seconds' = y.payload->>'sleep_seconds'"
        " AND x.created_at < y.created_at AND x.started_at > y.started_at"
    )
    print(
        f"concurrency_key: {len(ACCOUNTS)} accounts x {PER_ACCOUNT} jobs done in {took:.1f} s; "
        f"peak live per account {sampler.peak} in {sampler.samples} samples; "
        f"{inversions} pairs of one account started out of submission order"
    )
    assert live_accounts == len(ACCOUNTS)
    assert sampler.samples > 20
    assert sampler.peak == 1
    assert platform.scalar("SELECT count(*) FROM jobs_attempt") == len(payloads)
