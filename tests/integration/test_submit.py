"""POST /api/jobs/ end to end: idempotency under concurrency, backpressure, rejections.

Issue 2, Acceptance: "20 concurrent POSTs with one idempotency key create one
job that runs once", "with a queue limit of 10 and no worker running, the
11th POST gets 503 with Retry-After and writes no row", "unknown kind, wrong
payload type, malformed JSON, a 300 KiB body, no token → 400, 400, 400, 413,
401, each naming the problem, nothing written".
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from devstack.receiver import WebhookReceiver
from devstack.services import wait_for
from tests.integration.harness import HTTP_TIMEOUT, Platform

CONCURRENT_POSTS = 20
QUEUE_LIMIT = 10


@pytest.fixture(scope="module")
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as server:
        yield server


@pytest.mark.integration
def test_submit_concurrent_same_idempotency_key_creates_one_job_run_once(
    platform: Platform, receiver: WebhookReceiver
) -> None:
    # given one webhook submission and one idempotency key, sent by 20 threads
    # at once (half in the body, half as the Idempotency-Key header)
    key = f"it-{uuid.uuid4()}"
    body = {"kind": "webhook.deliver", "payload": {"url": receiver.url("/ok")}}
    headers = {"Authorization": f"Token {platform.token}"}
    barrier = threading.Barrier(CONCURRENT_POSTS)

    def post(index: int) -> requests.Response:
        as_header = index % 2 == 1
        barrier.wait(timeout=30)
        return requests.post(
            platform.url("/api/jobs/"),
            json=body if as_header else {**body, "idempotency_key": key},
            headers={**headers, "Idempotency-Key": key} if as_header else headers,
            timeout=HTTP_TIMEOUT,
        )

    # when they all POST concurrently
    with ThreadPoolExecutor(max_workers=CONCURRENT_POSTS) as pool:
        responses = list(pool.map(post, range(CONCURRENT_POSTS)))

    # then exactly one created the job (202) and the rest got it back (200)
    codes = Counter(r.status_code for r in responses)
    assert codes == {202: 1, 200: CONCURRENT_POSTS - 1}, [
        (r.status_code, r.text) for r in responses
    ]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1, ids
    (job_id,) = ids
    assert platform.scalar("SELECT count(*) FROM jobs_job WHERE idempotency_key = %s", (key,)) == 1

    # and the job ran exactly once: one attempt, one delivery
    job = platform.wait_job(job_id, timeout=60)
    assert job["status"] == "succeeded", job
    assert [a["outcome"] for a in job["attempts"]] == ["succeeded"]
    assert [d.attempt for d in receiver.deliveries_for(job_id)] == [1]


@pytest.mark.integration
def test_submit_past_queue_limit_gets_503_and_writes_nothing(
    broker_platform_factory: Callable[..., Platform],
) -> None:
    # given a platform whose queue takes 10 ready jobs, and no worker to drain it
    platform = broker_platform_factory(
        "queue_limit",
        env={"JOBS_QUEUE_MAX_READY": str(QUEUE_LIMIT)},
        worker=False,
        scheduler=False,
    )
    submission = {"kind": "demo.flaky", "payload": {"fail_times": 0}}

    # when 10 jobs are submitted
    first = [platform.post_job(submission) for _ in range(QUEUE_LIMIT)]

    # then each is accepted and its message waits in the broker
    assert [r.status_code for r in first] == [202] * QUEUE_LIMIT, [r.text for r in first]
    assert platform.broker_messages()[0] == QUEUE_LIMIT
    count_before, rows_before = platform.job_count(), platform.row_count()
    assert (count_before, rows_before) == (QUEUE_LIMIT, QUEUE_LIMIT)
    # and each row is stamped published by its web process's batched writer
    # (jobs.services.publish_stamps), no earlier than it was enqueued
    wait_for(
        lambda: (
            platform.scalar("SELECT count(*) FROM jobs_job WHERE published_at >= enqueued_at")
            == QUEUE_LIMIT
        ),
        timeout=10,
        what="10 published_at stamps",
    )

    # when the 11th is submitted
    response = platform.post_job(submission)

    # then it is refused with 503 and a Retry-After, naming the queue
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert any(e["field"] == "queue" for e in response.json()["errors"]), response.text
    # and nothing was written or published
    assert platform.job_count() == count_before
    assert platform.row_count() == rows_before
    assert platform.broker_messages()[0] == QUEUE_LIMIT


def _post_raw(platform: Platform, data: bytes, *, token: bool = True) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {platform.token}"
    return requests.post(platform.url("/api/jobs/"), data=data, headers=headers, timeout=30)


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


# (request body, send a token?, expected status, expected error field, words the reason names)
BAD_REQUESTS = {
    "unknown-kind": (
        _json({"kind": "no.such.kind", "payload": {}}),
        True,
        400,
        "kind",
        ["no.such.kind"],
    ),
    "wrong-payload-field-type": (
        _json({"kind": "demo.flaky", "payload": {"fail_times": "three"}}),
        True,
        400,
        "payload.fail_times",
        ["integer"],
    ),
    "payload-not-an-object": (
        _json({"kind": "demo.flaky", "payload": "three"}),
        True,
        400,
        "payload",
        ["object"],
    ),
    "malformed-json": (
        b'{"kind": "demo.flaky", "payload": {"fail_times": ',
        True,
        400,
        "body",
        ["Malformed JSON"],
    ),
    "body-300-kib": (
        _json({"kind": "demo.flaky", "payload": {"fail_times": 0, "pad": "x" * 300 * 1024}}),
        True,
        413,
        "body",
        ["limit"],
    ),
    "no-token": (
        _json({"kind": "demo.flaky", "payload": {"fail_times": 0}}),
        False,
        401,
        "Authorization",
        ["credentials"],
    ),
}


@pytest.mark.integration
@pytest.mark.parametrize(
    ("data", "token", "status", "field", "words"),
    list(BAD_REQUESTS.values()),
    ids=list(BAD_REQUESTS),
)
def test_submit_bad_request_is_rejected_naming_the_problem(
    platform: Platform,
    data: bytes,
    token: bool,
    status: int,
    field: str,
    words: list[str],
) -> None:
    # given the number of jobs before
    count_before, rows_before = platform.job_count(), platform.row_count()

    # when the bad request is sent
    response = _post_raw(platform, data, token=token)

    # then it gets the expected status, and an error naming the field and the reason
    assert response.status_code == status, response.text
    errors = response.json()["errors"]
    named = [e for e in errors if e["field"] == field]
    assert named, f"no error names field {field!r}: {errors}"
    reasons = " ".join(e["reason"] for e in named)
    assert all(word.lower() in reasons.lower() for word in words), reasons
    # and nothing was written
    assert platform.job_count() == count_before
    assert platform.row_count() == rows_before
